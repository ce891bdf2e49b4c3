#include "core/train/startup_banner.h"

#include <cstdio>

#include "base/cpu_info.h"
#include "core/train/model_size.h"
#include "kernels/cpu/blas_library.h"

namespace moe {
namespace {

// "12.34%" of `part` in `whole`.
std::string fixed_percent(int64_t part, int64_t whole) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f%%",
                whole > 0 ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0);
  return buf;
}

}  // namespace

std::vector<std::string> startup_banner(const RunConfig& cfg, const comm::Communicator* world,
                                        const RunDevice& device, const RunData& data,
                                        const TransformerLM& model, const MemoryEstimate& memory) {
  const int ranks = world == nullptr ? 1 : world->world_size();
  std::vector<std::string> lines;
  int64_t dense = 0, expert = 0;
  for (const auto& p : model.params().all()) {
    (p->kind == ParamKind::kDense ? dense : expert) += p->numel();
  }
  lines.push_back(str_cat(
      "momoe: ", ranks, " rank(s), ep ", cfg.parallel.ep, " x dp ", ranks / cfg.parallel.ep,
      world != nullptr ? str_cat(" (", world->backend_name(), ")") : std::string(), "; ",
      precision_name(cfg.train.precision), " on ", device.description, "; ",
      data.corpus.tokenizer->describe(), "; ", data.train->size(), " training sequences of ",
      cfg.model.seq_len, " tokens; ", cfg.model.blocks.size(), " blocks (", model.num_moe_layers(),
      " MoE); parameters: ", dense, " dense + ", expert, " expert on this rank"));
  const ModelSize size = model_size(cfg.model);
  lines.push_back(str_cat(
      "momoe: model: ", si_count(static_cast<double>(size.total_params)),
      " parameters (every expert of every rank, embeddings included; ",
      si_count(static_cast<double>(size.expert_params)), " in experts), ",
      si_count(static_cast<double>(size.active_params)),
      " active per token (dense + its top-k experts); ",
      si_count(size.train_flops_per_token, "FLOP"), " per token to train (6 x ",
      si_count(static_cast<double>(size.matmul_params())),
      " active parameters besides the embedding lookups + attention's 12 x layers x d_model x "
      "seq_len)"));
  std::string texts;
  const data::TokenizedCorpus& c = data.corpus;
  for (const data::TokenSplit* s : {&c.train, &c.valid, &c.test}) {
    texts += texts.empty() ? "" : "; ";
    if (!s->present()) {
      texts += str_cat(s->name, ": none");
      continue;
    }
    texts += str_cat(s->name, " ", s->source, " (", s->size(), " tokens, ",
                     fixed_percent(s->stats.unknown, s->size()), " <unk>)");
  }
  lines.push_back(str_cat("momoe: data: ", texts));
  if (cfg.train.attack_rate > 0 && c.tokenizer->kind() != data::Tokenizer::Kind::kWord) {
    lines.push_back(
        "momoe: the word-swap attack evaluation (train.attack_rate) does not run: it swaps "
        "words, and this run's tokenizer is SentencePiece");
  }
  if (cfg.train.device == DeviceKind::kCpu) {
    lines.push_back(str_cat("momoe: CPU ", cpu_info().description(), ", ", cpu_info().isa_summary(),
                            "; BLAS ", kernels::ref::blas_info().summary()));
  }
  lines.push_back(str_cat("momoe: memory per rank (estimated): ", memory.to_string()));
  lines.push_back(str_cat("momoe: memory: ", memory.scratch_to_string()));
  return lines;
}

}  // namespace moe
