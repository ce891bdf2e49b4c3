#include "core/compare/compare_grid.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "base/progress.h"
#include "io/file_util.h"
#include "proto/run_convert.h"
#include "proto/stats_convert.h"

namespace moe {
namespace {

bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > 64 || name[0] == '.' || name[0] == '-') return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '+' || c == '.';
    if (!ok) return false;
  }
  return true;
}

std::vector<std::string> split_words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> words;
  std::string w;
  while (in >> w) words.push_back(w);
  return words;
}

std::string fmt(double v, int digits = 2) {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

// Mean and sample standard deviation of the finite values (std 0 for one value).
std::pair<double, double> mean_std(const std::vector<double>& values) {
  std::vector<double> v;
  for (double x : values) {
    if (std::isfinite(x)) v.push_back(x);
  }
  if (v.empty()) return {NAN, NAN};
  double mean = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  double var = 0;
  for (double x : v) var += (x - mean) * (x - mean);
  return {mean, v.size() > 1 ? std::sqrt(var / static_cast<double>(v.size() - 1)) : 0.0};
}

// A seed as momoe-compare writes it: decimal digits only, within 64 bits.
bool parse_seed(const std::string& text, uint64_t* seed) {
  if (text.empty() || text.size() > 20 ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  errno = 0;
  *seed = std::strtoull(text.c_str(), nullptr, 10);
  return errno == 0;
}

// "mean +- sd" of the finite values ("-" when there is none); signed: "+1.00 +- 0.50".
std::string mean_sd_cell(const std::vector<double>& x, int digits = 2, bool sign = false) {
  const auto [m, s] = mean_std(x);
  if (!std::isfinite(m)) return "-";
  const auto finite = std::count_if(x.begin(), x.end(), [](double v) { return std::isfinite(v); });
  // One value has no spread: "+- 0.00" would claim a measured one.
  return (sign && m >= 0 ? "+" : "") + fmt(m, digits) +
         (finite > 1 ? " +- " + fmt(s, digits) : std::string());
}

// The note after the comparison table when the finished runs' validation texts have different
// <unk> shares ("" otherwise): per-word measures favour the text with more <unk>.
std::string unknown_share_note(const std::vector<CompareRun>& runs) {
  std::map<std::string, double> share;  // variant -> its runs' <unk> share
  double lo = INFINITY, hi = -INFINITY;
  for (const CompareRun& r : runs) {
    if (!r.ok || !std::isfinite(r.valid_unknown_fraction)) continue;
    share[r.variant] = r.valid_unknown_fraction;
    lo = std::min(lo, r.valid_unknown_fraction);
    hi = std::max(hi, r.valid_unknown_fraction);
  }
  if (!(hi - lo > 5e-5)) return "";  // equal at the 0.01% the tables print
  std::string list;
  for (const auto& [variant, f] : share) {
    list += str_cat(list.empty() ? "" : ", ", variant, " ", format_percent(f));
  }
  return str_cat(
      "\n**Per-word measures do not compare here**: the runs' validation texts have "
      "different `<unk>` shares (",
      list,
      "). Perplexity per word and bits per byte (runs.csv) favour the text with more "
      "`<unk>` (each unknown word is one easy token); compare them only at equal "
      "shares, e.g. on text every tokenizer covers.\n");
}

std::string target_label(double t) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", t);
  return buf;
}

}  // namespace

StatusOr<CompareVariant> parse_variant(const std::string& spec) {
  const std::vector<std::string> words = split_words(spec);
  if (words.empty())
    return invalid_argument_error("an empty variant (expected NAME KEY=VALUE ...)");
  CompareVariant v;
  v.name = words[0];
  if (!valid_name(v.name)) {
    return invalid_argument_error("variant name '", v.name,
                                  "': use letters, digits, '-', '_', '+' "
                                  "and '.' (it names the run directory)");
  }
  for (size_t i = 1; i < words.size(); ++i) {
    const size_t eq = words[i].find('=');
    if (eq == std::string::npos || eq == 0) {
      return invalid_argument_error("variant ", v.name, ": '", words[i],
                                    "' is not KEY=VALUE (a --set override, or config=PATH)");
    }
    if (words[i].compare(0, eq, "config") == 0) {
      v.config = words[i].substr(eq + 1);
    } else {
      v.overrides.push_back(words[i]);
    }
  }
  return v;
}

StatusOr<std::vector<CompareVariant>> parse_grid_text(const std::string& text,
                                                      const std::string& source) {
  std::vector<CompareVariant> out;
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    if (split_words(line).empty()) continue;
    StatusOr<CompareVariant> v = parse_variant(line);
    if (!v.ok()) return v.status().with_context(str_cat(source, ":", number));
    out.push_back(std::move(*v));
  }
  if (out.empty())
    return invalid_argument_error(source, ": no variant (one per line: NAME KEY=VALUE ...)");
  return out;
}

StatusOr<std::vector<uint64_t>> parse_seeds(const std::string& list) {
  std::vector<uint64_t> seeds;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    uint64_t v = 0;
    if (!parse_seed(item, &v)) {
      return invalid_argument_error("--seeds '", list, "': '", item,
                                    "' is not a seed (a list like 1,2,3)");
    }
    if (std::find(seeds.begin(), seeds.end(), v) != seeds.end()) {
      return invalid_argument_error("--seeds '", list, "': seed ", v, " appears twice");
    }
    seeds.push_back(v);
  }
  if (seeds.empty()) return invalid_argument_error("--seeds: no seed given");
  return seeds;
}

CompareGrid grid_of_preset(const ComparePreset& preset, const std::string& config_dir) {
  CompareGrid grid;
  grid.base_config = config_dir + "/" + preset.base_config;
  grid.common = preset.common;
  grid.variants = preset.variants;
  for (CompareVariant& v : grid.variants) {
    if (!v.config.empty() && v.config[0] != '/') v.config = config_dir + "/" + v.config;
  }
  return grid;
}

// function-length: table (the presets, variant by variant)
StatusOr<ComparePreset> compare_preset(const std::string& name) {
  auto v = [](const std::string& spec) { return parse_variant(spec).value(); };
  ComparePreset p;
  // The papers' settings on the quick-start model (3 MoE blocks, 600 steps): dropless routing,
  // Adam without weight decay or clipping at a constant rate after warmup (configs/papers/ has
  // the papers' own sizes and budgets), and per paper: no balance loss for MomentumSMoE's
  // family, the reference code's Adam, the AC gate with 0.01, SparseMixer's r = 0.1 with 0.01.
  // The learning rate and warmup stay the quick start's (600 steps, not 80,000).
  const std::vector<std::string> papers_common = {
      "train.steps=600",         "train.attack_rate=0.025",       "train.log_every=100",
      "model.moe.dropless=true", "model.moe.z_loss_coef=0",       "train.schedule.kind=CONSTANT",
      "train.grad_clip=0",       "train.optimizer.weight_decay=0"};
  const std::string smoe = "model.arch=sgsgsg model.moe.balance_loss_coef=0";
  const std::string momentum = "model.arch=smsmsm model.moe.balance_loss_coef=0";
  const std::string adam =
      "model.arch=sasmsm model.moe.adam.reference_code=true model.moe.balance_loss_coef=0";
  const std::string robust = "model.arch=srsrsr model.moe.balance_loss_coef=0";
  const std::string acmoe =
      "model.arch=sgscsc model.moe.balance_loss_coef=0.01 "
      "model.moe.ac.normalization=REFERENCE_CODE "
      "model.moe.ac.min_cluster_size=0 model.moe.ac.logits=UNIT_NORM_EMBEDDINGS";
  const std::string switch_top1 =
      "model.arch=sgsgsg model.moe.top_k=1 model.moe.balance_loss_coef=0.01";
  const std::string sparsemixer =
      switch_top1 + " model.moe.sparsemixer.enabled=true model.moe.sparsemixer.jitter=0.1";
  if (name == "papers") {
    p.base_config = "quickstart.pbtxt";
    p.common = papers_common;
    p.variants = {v("smoe " + smoe),
                  v("momentum " + momentum),
                  v("adam " + adam),
                  v("robust " + robust),
                  v("acmoe " + acmoe),
                  v("switch-top1 " + switch_top1),
                  v("sparsemixer-top1 " + sparsemixer)};
    return p;
  }
  if (name == "papers-ablations") {
    // Each departure of momoe's defaults from the papers, alone: a papers variant with one
    // setting put back to the quick start's (compare each with its papers-grid row, same seeds).
    const std::string capacity = " model.moe.dropless=false";  // the quick start's factor 1.25
    const std::string cosine_clip = " train.schedule.kind=COSINE train.grad_clip=1";
    p.base_config = "quickstart.pbtxt";
    p.common = papers_common;
    p.variants = {
        v("smoe+capacity " + smoe + capacity), v("momentum+capacity " + momentum + capacity),
        v("switch-top1+capacity " + switch_top1 + capacity),
        v("sparsemixer-top1+capacity " + sparsemixer + capacity),
        v("smoe+balance " + smoe + " model.moe.balance_loss_coef=0.01"),
        v("momentum+balance " + momentum + " model.moe.balance_loss_coef=0.01"),
        // momoe's AC gate: r W + b, the paper's normalisation, clusters under 2 tokens left out.
        v("acmoe+momoe-gate " + acmoe +
          " model.moe.ac.logits=LINEAR model.moe.ac.normalization=PAPER "
          "model.moe.ac.min_cluster_size=2"),
        v("smoe+cosine-clip " + smoe + cosine_clip),
        v("momentum+cosine-clip " + momentum + cosine_clip),
        v("adam+cosine-clip " + adam + cosine_clip),
        // momoe's Adam layer: the paper's equations (eps outside the square root, kappa 0).
        v("adam+momoe-layer " + adam + " model.moe.adam.reference_code=false")};
    return p;
  }
  if (name == "papers-capacity") {
    // The second question: the same variants with a capacity (factor 1.25, tokens dropped in
    // training) and the balance loss at 0.01 everywhere, AdamW with cosine decay and clipping
    // (the quick start's settings): the grid momoe-compare ran before the papers' settings.
    p.base_config = "quickstart.pbtxt";
    p.common = {"train.steps=600", "train.attack_rate=0.025", "train.log_every=100"};
    p.variants = {v("smoe model.arch=sgsgsg"),
                  v("momentum model.arch=smsmsm"),
                  v("adam model.arch=sasmsm"),
                  v("robust model.arch=srsrsr"),
                  v("acmoe model.arch=sgscsc"),
                  v("switch-top1 model.arch=sgsgsg model.moe.top_k=1"),
                  v("sparsemixer-top1 model.arch=sgsgsg model.moe.top_k=1 "
                    "model.moe.sparsemixer.enabled=true")};
    return p;
  }
  if (name == "gpu-medium") {
    // The papers' medium models (6 MoE layers of 16 experts, D = 352, seq 512; spec tables),
    // sized for one GPU once the CUDA backend trains (it also runs, slowly, on the CPU).
    p.base_config = "smoe.pbtxt";
    p.common = {"train.attack_rate=0.025", "model.d_model=352", "model.seq_len=512",
                "model.moe.d_expert=352", "model.moe.num_experts=16"};
    p.variants = {v("smoe model.arch=sgsgsgsgsgsg"),
                  v("momentum model.arch=smsmsmsmsmsm"),
                  v("adam model.arch=sasmsmsmsmsm"),
                  v("robust model.arch=srsrsrsrsrsr"),
                  v("acmoe model.arch=sgsgscscscsc"),
                  v("switch-top1 model.arch=sgsgsgsgsgsg model.moe.top_k=1"),
                  v("sparsemixer-top1 model.arch=sgsgsgsgsgsg model.moe.top_k=1 "
                    "model.moe.sparsemixer.enabled=true")};
    return p;
  }
  if (name == "modern") {
    // Today's MoE recipes beside the seeds' routers, all on the block of current models (pre-norm
    // RMSNorm, RoPE, SwiGLU, no biases: configs/modern/mixtral.pbtxt) at the quick start's size
    // and budget: Mixtral, Qwen2-MoE, Qwen3-MoE and DeepSeek-V3 as configs/modern/ has them, then
    // MomentumSMoE, AdamSMoE, ACMoE and SparseMixer with Mixtral's capacity and balance loss.
    p.base_config = "modern/mixtral.pbtxt";
    p.common = {"train.attack_rate=0.025", "train.log_every=100"};
    p.variants = {v("mixtral"),
                  v("qwen2-moe config=modern/qwen2-moe.pbtxt"),
                  v("qwen3-moe config=modern/qwen3-moe.pbtxt"),
                  v("deepseek-v3 config=modern/deepseek-v3.pbtxt"),
                  v("momentum model.arch=sgsmsm"),
                  v("adam model.arch=sasmsm model.moe.adam.reference_code=true"),
                  v("acmoe model.arch=sgscsc model.moe.ac.normalization=REFERENCE_CODE "
                    "model.moe.ac.min_cluster_size=0 model.moe.ac.logits=UNIT_NORM_EMBEDDINGS"),
                  v("sparsemixer-top1 model.moe.top_k=1 model.moe.sparsemixer.enabled=true")};
    return p;
  }
  return invalid_argument_error(
      "unknown --preset '", name,
      "' (known: papers, papers-capacity, papers-ablations, gpu-medium, modern)");
}

StatusOr<std::vector<RunConfig>> resolve_grid(const CompareGrid& grid, uint64_t seed) {
  if (grid.variants.empty()) return invalid_argument_error("the grid has no variant");
  std::set<std::string> names;
  std::vector<RunConfig> out;
  for (const CompareVariant& v : grid.variants) {
    if (!names.insert(v.name).second) {
      return invalid_argument_error("variant name '", v.name, "' appears twice in the grid");
    }
    std::vector<std::string> sets = grid.common;
    sets.insert(sets.end(), v.overrides.begin(), v.overrides.end());
    sets.push_back(str_cat("train.seed=", seed));
    const std::string path = v.config.empty() ? grid.base_config : v.config;
    StatusOr<RunConfig> cfg = load_run_config(path, sets);
    if (!cfg.ok()) return cfg.status().with_context(str_cat("variant ", v.name));
    out.push_back(std::move(*cfg));
  }
  // One budget: the same number of training tokens (steps x batch x sequence length).
  auto budget = [](const RunConfig& c) {
    return c.train.steps * c.train.batch_size * c.model.seq_len;
  };
  for (size_t i = 1; i < out.size(); ++i) {
    if (budget(out[i]) != budget(out[0])) {
      const RunConfig& a = out[0];
      const RunConfig& b = out[i];
      return invalid_argument_error(
          "mismatched budgets: variant ", grid.variants[0].name, " trains ", budget(a), " tokens (",
          a.train.steps, " steps x batch ", a.train.batch_size, " x seq_len ", a.model.seq_len,
          "), variant ", grid.variants[i].name, " trains ", budget(b), " (", b.train.steps, " x ",
          b.train.batch_size, " x ", b.model.seq_len,
          "); give every variant the same budget (e.g. --set train.steps=N)");
    }
  }
  return out;
}

namespace {

// CompareRun's balance figures from the last kBalanceSteps training records with router stats.
void summarize_balance(const std::vector<StepStatsInfo>& records, CompareRun* r) {
  double busiest = 0, dropped = 0, spread = 0;
  int64_t steps = 0, with_bias = 0;
  for (auto it = records.rbegin(); it != records.rend() && steps < kBalanceSteps; ++it) {
    if (it->layers.empty() || it->valid_ppl || it->attacked_valid_ppl) continue;
    double b = 0, d = 0, sp = 0;
    int64_t biased = 0;
    for (const RouterStatsInfo& l : it->layers) {
      b += l.max_load;
      d += l.dropped_fraction;
      if (!l.score_bias.empty()) {
        sp += score_bias_spread(l);
        ++biased;
      }
    }
    const double layers = static_cast<double>(it->layers.size());
    busiest += b / layers;
    dropped += d / layers;
    if (biased > 0) {
      spread += sp / static_cast<double>(biased);
      ++with_bias;
    }
    ++steps;
  }
  if (steps == 0) return;
  r->busiest = busiest / static_cast<double>(steps);
  r->dropped = dropped / static_cast<double>(steps);
  if (with_bias > 0) r->bias_spread = spread / static_cast<double>(with_bias);
}

}  // namespace

CompareRun summarize_run(const std::string& variant, uint64_t seed,
                         const std::vector<StepStatsInfo>& steps) {
  CompareRun r;
  r.variant = variant;
  r.seed = seed;
  for (const StepStatsInfo& s : live_records(steps)) {
    if (s.valid_ppl || s.attacked_valid_ppl) {  // an evaluation record
      if (s.valid_ppl) r.valid_ppl = *s.valid_ppl;
      if (s.attacked_valid_ppl) r.attacked_valid_ppl = *s.attacked_valid_ppl;
      if (s.valid_word_ppl) r.valid_word_ppl = *s.valid_word_ppl;
      if (s.valid_bits_per_byte) r.valid_bits_per_byte = *s.valid_bits_per_byte;
      if (s.valid_unknown_fraction) r.valid_unknown_fraction = *s.valid_unknown_fraction;
      continue;
    }
    if (!s.skipped && std::isfinite(s.loss)) r.losses.emplace_back(s.step, s.loss);
  }
  r.ok = !r.losses.empty();
  if (!r.ok) r.error = "no training step recorded";
  summarize_balance(live_records(steps), &r);
  return r;
}

int64_t steps_to_loss(const std::vector<std::pair<int64_t, double>>& losses, double target,
                      int window) {
  double sum = 0;
  for (size_t i = 0; i < losses.size(); ++i) {
    sum += losses[i].second;
    if (i >= static_cast<size_t>(window)) sum -= losses[i - window].second;
    const size_t n = std::min(i + 1, static_cast<size_t>(window));
    if (n == static_cast<size_t>(window) && sum / static_cast<double>(n) <= target) {
      return losses[i].first + 1;  // steps done
    }
  }
  return -1;
}

std::string compare_markdown(const std::vector<CompareVariant>& variants,
                             const std::vector<CompareRun>& runs,
                             const std::vector<double>& target_losses) {
  std::ostringstream out;
  out << "| variant | runs | valid ppl | attacked valid ppl | final loss |";
  for (double t : target_losses) out << " steps to loss " << target_label(t) << " |";
  out << "\n|---|---|---|---|---|";
  for (size_t i = 0; i < target_losses.size(); ++i) out << "---|";
  out << "\n";
  for (const CompareVariant& v : variants) {
    std::vector<double> ppl, att, final_loss;
    int ok = 0, total = 0;
    std::vector<std::vector<double>> reach(target_losses.size());
    for (const CompareRun& r : runs) {
      if (r.variant != v.name) continue;
      ++total;
      if (!r.ok) continue;
      ++ok;
      ppl.push_back(r.valid_ppl);
      att.push_back(r.attacked_valid_ppl);
      final_loss.push_back(r.losses.back().second);
      for (size_t t = 0; t < target_losses.size(); ++t) {
        const int64_t s = steps_to_loss(r.losses, target_losses[t]);
        if (s >= 0) reach[t].push_back(static_cast<double>(s));
      }
    }
    out << "| " << v.name << " | " << ok << (ok == total ? "" : str_cat(" of ", total)) << " | "
        << mean_sd_cell(ppl) << " | " << mean_sd_cell(att) << " | " << mean_sd_cell(final_loss)
        << " |";
    for (size_t t = 0; t < target_losses.size(); ++t) {
      const auto [m, s] = mean_std(reach[t]);
      out << " " << (std::isfinite(m) ? fmt(m, 0) : std::string("not reached"))
          << (reach[t].size() == static_cast<size_t>(ok) || reach[t].empty()
                  ? ""
                  : str_cat(" (", reach[t].size(), " of ", ok, ")"))
          << " |";
    }
    out << "\n";
  }
  out << unknown_share_note(runs);
  return out.str();
}

std::string balance_markdown(const std::vector<CompareVariant>& variants,
                             const std::vector<CompareRun>& runs) {
  std::ostringstream out;
  out << "| variant | busiest expert / mean | dropped | bias spread |\n|---|---|---|---|\n";
  for (const CompareVariant& v : variants) {
    std::vector<double> busiest, dropped, spread;
    for (const CompareRun& r : runs) {
      if (r.variant != v.name || !r.ok) continue;
      if (std::isfinite(r.busiest)) busiest.push_back(r.busiest);
      if (std::isfinite(r.dropped)) dropped.push_back(100 * r.dropped);
      if (std::isfinite(r.bias_spread)) spread.push_back(r.bias_spread);
    }
    auto cell = [](const std::vector<double>& x, int digits, const char* unit) {
      return x.empty() ? std::string("-") : mean_sd_cell(x, digits) + unit;
    };
    out << "| " << v.name << " | " << cell(busiest, 2, "") << " | " << cell(dropped, 2, "%")
        << " | " << cell(spread, 4, "") << " |\n";
  }
  return out.str();
}

namespace {

// A variant's settings in one line: "config=PATH KEY=VALUE ...".
std::string settings_of(const CompareVariant& v) {
  std::string s = v.config.empty() ? std::string() : "config=" + v.config;
  for (const std::string& o : v.overrides) s += (s.empty() ? "" : " ") + o;
  return s;
}

}  // namespace

std::string variants_markdown(const std::vector<CompareVariant>& variants) {
  std::ostringstream out;
  out << "## Variants\n\n| variant | overrides |\n|---|---|\n";
  for (const CompareVariant& v : variants) {
    std::string cell;
    if (!v.config.empty()) cell = "config `" + v.config + "`";
    for (const std::string& o : v.overrides) cell += (cell.empty() ? "`" : " `") + o + "`";
    out << "| " << v.name << " | " << (cell.empty() ? std::string("(the base config)") : cell)
        << " |\n";
  }
  return out.str();
}

std::string compare_csv(const std::vector<CompareVariant>& variants,
                        const std::vector<CompareRun>& runs,
                        const std::vector<double>& target_losses) {
  std::ostringstream out;
  out << "variant,seed,ok,valid_ppl,attacked_valid_ppl,final_loss,valid_word_ppl,valid_bits_per_"
         "byte,valid_unknown_fraction";
  for (double t : target_losses) out << ",steps_to_loss_" << target_label(t);
  out << ",overrides\n";
  for (const CompareRun& r : runs) {
    out << r.variant << "," << r.seed << "," << (r.ok ? 1 : 0) << "," << fmt(r.valid_ppl, 4) << ","
        << fmt(r.attacked_valid_ppl, 4) << ","
        << (r.losses.empty() ? std::string("-") : fmt(r.losses.back().second, 5)) << ","
        << fmt(r.valid_word_ppl, 4) << "," << fmt(r.valid_bits_per_byte, 5) << ","
        << fmt(r.valid_unknown_fraction, 6);
    for (double t : target_losses) out << "," << (r.ok ? steps_to_loss(r.losses, t) : -1);
    std::string settings;
    for (const CompareVariant& v : variants) {
      if (v.name == r.variant) settings = settings_of(v);
    }
    std::string quoted = "\"";  // CSV: inside quotes, a quote is doubled
    for (char c : settings) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
    out << "," << quoted << "\"\n";
  }
  return out.str();
}

std::string curves_csv(const std::vector<CompareRun>& runs) {
  std::ostringstream out;
  out << "variant,seed,step,loss\n";
  for (const CompareRun& r : runs) {
    for (const auto& [step, loss] : r.losses) {
      out << r.variant << "," << r.seed << "," << step << "," << fmt(loss, 6) << "\n";
    }
  }
  return out.str();
}

namespace {

// The fields of one CSV line (RFC 4180: a quoted field may hold commas and doubled quotes);
// false for a quote left open.
bool csv_fields(const std::string& line, std::vector<std::string>* out) {
  out->assign(1, std::string());
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        out->back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        out->back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out->emplace_back();
    } else {
      out->back() += c;
    }
  }
  return !quoted;
}

}  // namespace

StatusOr<std::vector<CompareRow>> parse_runs_csv(const std::string& text,
                                                 const std::string& source) {
  std::istringstream in(text);
  std::string line;
  std::vector<std::string> header, f;
  auto strip_cr = [](std::string* l) {
    if (!l->empty() && l->back() == '\r') l->pop_back();
  };
  if (!std::getline(in, line)) return invalid_argument_error(source, ": empty (no header line)");
  strip_cr(&line);
  if (!csv_fields(line, &header)) {
    return invalid_argument_error(source, ":1: a quote is not closed");
  }
  auto column = [&](const std::string& name) -> int {
    for (size_t i = 0; i < header.size(); ++i) {
      if (header[i] == name) return static_cast<int>(i);
    }
    return -1;
  };
  const int variant = column("variant"), seed = column("seed"), ok = column("ok"),
            ppl = column("valid_ppl"), att = column("attacked_valid_ppl"),
            loss = column("final_loss");
  for (const auto& [index, name] : std::vector<std::pair<int, const char*>>{
           {variant, "variant"}, {seed, "seed"}, {ok, "ok"}, {ppl, "valid_ppl"}}) {
    if (index < 0) {
      return invalid_argument_error(source, ": no '", name,
                                    "' column (not a momoe-compare runs.csv?)");
    }
  }
  std::vector<CompareRow> rows;
  std::set<std::pair<std::string, uint64_t>> seen;
  for (int n = 2; std::getline(in, line); ++n) {
    strip_cr(&line);
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string where = str_cat(source, ":", n, ": ");
    if (!csv_fields(line, &f)) return invalid_argument_error(where, "a quote is not closed");
    if (f.size() != header.size()) {
      return invalid_argument_error(where, f.size(), " fields, the header has ", header.size());
    }
    CompareRow r;
    r.variant = f[variant];
    if (!parse_seed(f[seed], &r.seed)) {
      return invalid_argument_error(where, "seed '", f[seed], "' is not a seed");
    }
    if (f[ok] != "0" && f[ok] != "1") {
      return invalid_argument_error(where, "ok '", f[ok], "' is not 0 or 1");
    }
    r.ok = f[ok] == "1";
    for (const auto& [i, value, name] :
         {std::tuple{ppl, &r.valid_ppl, "valid_ppl"},
          std::tuple{att, &r.attacked_valid_ppl, "attacked_valid_ppl"},
          std::tuple{loss, &r.final_loss, "final_loss"}}) {
      if (i < 0 || f[i] == "-") {
        *value = NAN;
        continue;
      }
      char* end = nullptr;
      *value = std::strtod(f[i].c_str(), &end);
      if (f[i].empty() || *end != '\0' || !std::isfinite(*value)) {
        return invalid_argument_error(where, name, " '", f[i], "' is not a number");
      }
    }
    if (!seen.emplace(r.variant, r.seed).second) {
      return invalid_argument_error(where, "variant ", r.variant, " seed ", r.seed,
                                    " appears twice");
    }
    rows.push_back(std::move(r));
  }
  if (rows.empty()) return invalid_argument_error(source, ": no run (a header only)");
  return rows;
}

std::vector<CompareRow> compare_rows(const std::vector<CompareRun>& runs) {
  std::vector<CompareRow> rows;
  for (const CompareRun& r : runs) {
    CompareRow row;
    row.variant = r.variant;
    row.seed = r.seed;
    row.ok = r.ok;
    row.valid_ppl = r.valid_ppl;
    row.attacked_valid_ppl = r.attacked_valid_ppl;
    row.final_loss = r.losses.empty() ? NAN : r.losses.back().second;
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string baseline_variant(const std::string& name, const std::vector<CompareRow>& baseline) {
  auto has = [&](const std::string& v) {
    return std::any_of(baseline.begin(), baseline.end(),
                       [&](const CompareRow& b) { return b.variant == v; });
  };
  if (has(name)) return name;
  const std::string stem = name.substr(0, name.find('+'));
  return has(stem) ? stem : std::string();
}

std::vector<std::string> unpaired_variants(const std::vector<std::string>& variants,
                                           const std::vector<uint64_t>& seeds,
                                           const std::vector<CompareRow>& baseline) {
  std::vector<std::string> out;
  for (const std::string& v : variants) {
    const std::string base = baseline_variant(v, baseline);
    const bool paired =
        !base.empty() && std::any_of(baseline.begin(), baseline.end(), [&](const CompareRow& b) {
          return b.variant == base && b.ok &&
                 std::find(seeds.begin(), seeds.end(), b.seed) != seeds.end();
        });
    if (!paired) out.push_back(v);
  }
  return out;
}

std::string baseline_markdown(const std::vector<CompareRow>& runs,
                              const std::vector<CompareRow>& baseline,
                              const std::string& baseline_label) {
  std::vector<std::string> order;
  for (const CompareRow& r : runs) {
    if (std::find(order.begin(), order.end(), r.variant) == order.end()) {
      order.push_back(r.variant);
    }
  }
  std::ostringstream out;
  out << "| variant | baseline | seeds | valid ppl | baseline valid ppl | difference | attacked "
         "difference | final loss difference |\n|---|---|---|---|---|---|---|---|\n";
  std::vector<std::string> unmatched;
  for (const std::string& name : order) {
    const std::string base = baseline_variant(name, baseline);
    if (base.empty()) {
      unmatched.push_back(name);
      continue;
    }
    // A seed pairs when both runs finished with a clean perplexity; the attacked perplexity and
    // the final loss differ over the pairs where both sides have them.
    std::vector<double> ppl, base_ppl, d_ppl, d_att, d_loss;
    std::vector<uint64_t> seeds;
    for (const CompareRow& r : runs) {
      if (r.variant != name || !r.ok || !std::isfinite(r.valid_ppl)) continue;
      for (const CompareRow& b : baseline) {
        if (b.variant != base || b.seed != r.seed || !b.ok || !std::isfinite(b.valid_ppl)) {
          continue;
        }
        seeds.push_back(r.seed);
        ppl.push_back(r.valid_ppl);
        base_ppl.push_back(b.valid_ppl);
        d_ppl.push_back(r.valid_ppl - b.valid_ppl);
        d_att.push_back(r.attacked_valid_ppl - b.attacked_valid_ppl);  // NaN drops out
        d_loss.push_back(r.final_loss - b.final_loss);
      }
    }
    std::string seed_list;
    for (uint64_t s : seeds) seed_list += (seed_list.empty() ? "" : ",") + std::to_string(s);
    out << "| " << name << " | " << base << " | " << (seeds.empty() ? "none" : seed_list) << " | "
        << mean_sd_cell(ppl) << " | " << mean_sd_cell(base_ppl) << " | "
        << mean_sd_cell(d_ppl, 2, true) << " | " << mean_sd_cell(d_att, 2, true) << " | "
        << mean_sd_cell(d_loss, 3, true) << " |\n";
  }
  if (!unmatched.empty()) {
    out << "\nNo variant of the same name (or the name before its '+') in " << baseline_label
        << ":";
    for (const std::string& n : unmatched) out << " " << n;
    out << "\n";
  }
  return out.str();
}

}  // namespace moe
