#include "core/train/memory_advice.h"

#include <cstdio>
#include <utility>

#include "core/train/memory_estimate.h"

namespace moe {
namespace {

// One candidate change: its --set text and what it does to a config. combine: whether it joins
// the combination tried when nothing fits alone (SELECTIVE does not: FULL keeps less), with
// `combined` as its text there when that differs.
struct Change {
  Change(std::string o, std::function<void(RunConfig*)> f, bool c = true, std::string text = "")
      : overrides(std::move(o)), apply(std::move(f)), combine(c), combined(std::move(text)) {}
  std::string overrides;
  std::function<void(RunConfig*)> apply;
  bool combine = true;
  std::string combined;
};

// The chunk the advice offers for the loss (train.loss_chunk_tokens).
constexpr int64_t kAdvisedLossChunk = 1024;

void set_grad_accum(RunConfig* c, int64_t accum) { c->train.grad_accum = accum; }

// The smallest gradient accumulation above the config's that splits the batch over the ranks and
// fits; 0 when none does.
int64_t fitting_grad_accum(const RunConfig& cfg, int world_size, int64_t available,
                           const std::function<int64_t(const RunConfig&)>& need) {
  for (int64_t accum = cfg.train.grad_accum + 1; accum <= cfg.train.batch_size; ++accum) {
    RunConfig c = cfg;
    set_grad_accum(&c, accum);
    if (!c.train.check_batch_split(world_size).ok()) continue;
    if (need(c) <= available) return accum;
  }
  return 0;
}

// The changes that keep the model and the batch: recomputation and the distributed optimizer
// (over several ranks) train the same bits; BF16 changes the arithmetic only.
std::vector<Change> single_changes(const RunConfig& cfg, int world_size) {
  std::vector<Change> out;
  if (!cfg.train.distributed_optimizer && world_size > 1) {
    out.push_back({"train.distributed_optimizer=true",
                   [](RunConfig* c) { c->train.distributed_optimizer = true; }});
  }
  const Recompute r = cfg.train.recompute;
  if (r == Recompute::kNone) {
    out.push_back({"train.recompute=SELECTIVE",
                   [](RunConfig* c) { c->train.recompute = Recompute::kSelective; }, false});
  }
  if (r != Recompute::kFull) {
    out.push_back(
        {"train.recompute=FULL", [](RunConfig* c) { c->train.recompute = Recompute::kFull; }});
  }
  if (cfg.train.precision == Precision::kFp32) {
    out.push_back(
        {"train.precision=BF16", [](RunConfig* c) { c->train.precision = Precision::kBf16; }});
  }
  // The loss in chunks; with recomputation (SELECTIVE unless a setting is chosen) the head's
  // logits are then not kept either.
  const int64_t tokens = cfg.train.micro_batch_per_rank(world_size) * cfg.model.seq_len;
  if (cfg.train.loss_chunk_tokens == 0 && tokens > kAdvisedLossChunk) {
    const std::string chunk = str_cat("train.loss_chunk_tokens=", kAdvisedLossChunk);
    out.push_back({(r == Recompute::kNone ? "train.recompute=SELECTIVE " : "") + chunk,
                   [](RunConfig* c) {
                     c->train.loss_chunk_tokens = kAdvisedLossChunk;
                     if (c->train.recompute == Recompute::kNone) {
                       c->train.recompute = Recompute::kSelective;
                     }
                   },
                   true, chunk});
  }
  return out;
}

}  // namespace

std::vector<FittingSetting> settings_that_fit(
    const RunConfig& cfg, int world_size, int64_t available,
    const std::function<int64_t(const RunConfig&)>& need) {
  std::vector<FittingSetting> out;
  if (const int64_t accum = fitting_grad_accum(cfg, world_size, available, need); accum > 0) {
    RunConfig c = cfg;
    set_grad_accum(&c, accum);
    out.push_back({str_cat("train.grad_accum=", accum), need(c)});
  }
  const std::vector<Change> changes = single_changes(cfg, world_size);
  for (const Change& ch : changes) {
    RunConfig c = cfg;
    ch.apply(&c);
    if (const int64_t bytes = need(c); bytes <= available) out.push_back({ch.overrides, bytes});
  }
  if (!out.empty() || changes.empty()) return out;
  // Nothing fits alone: every change together, with the gradient accumulation that then fits.
  RunConfig all = cfg;
  std::string overrides;
  for (const Change& ch : changes) {
    if (!ch.combine) continue;
    ch.apply(&all);
    overrides +=
        (overrides.empty() ? "" : " ") + (ch.combined.empty() ? ch.overrides : ch.combined);
  }
  if (const int64_t accum = fitting_grad_accum(all, world_size, available, need); accum > 0) {
    set_grad_accum(&all, accum);
    overrides += str_cat(" train.grad_accum=", accum);
  }
  if (need(all) <= available) out.push_back({overrides, need(all)});
  return out;
}

std::string fitting_settings_text(const std::vector<FittingSetting>& settings) {
  if (settings.empty()) return "";
  std::string out = "; it fits with";
  for (size_t i = 0; i < settings.size(); ++i) {
    out += i == 0 ? " " : " or ";
    std::string sets;
    size_t begin = 0;
    const std::string& o = settings[i].overrides;
    while (begin < o.size()) {
      size_t end = o.find(' ', begin);
      if (end == std::string::npos) end = o.size();
      sets += str_cat(sets.empty() ? "" : " ", "--set ", o.substr(begin, end - begin));
      begin = end + 1;
    }
    out += str_cat(sets, " (", gib_text(settings[i].bytes), " GiB)");
  }
  return out;
}

}  // namespace moe
