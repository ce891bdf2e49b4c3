#include "core/train/config_warnings.h"

#include "base/progress.h"
#include "base/status.h"
#include "core/train/model_size.h"

namespace moe {
namespace {

// The vocabulary's share of the parameters: the token table and, untied, the output head.
std::string vocabulary_warning(const RunConfig& cfg) {
  const ModelConfig& m = cfg.model;
  const ModelSize size = model_size(m);
  const double vocab_params =
      static_cast<double>(m.vocab_size * m.d_model) * (m.tie_embeddings ? 1.0 : 2.0);
  const double share = vocab_params / static_cast<double>(size.total_params);
  const bool uncapped =
      cfg.data.dataset.empty() && !cfg.data.sentencepiece && cfg.data.vocab_max_size == 0;
  if (!(share > (uncapped ? kUncappedVocabularyShare : kVocabularyShare))) return "";
  const std::string cap =
      !cfg.data.dataset.empty()
          ? std::string(
                "prepare the dataset again with a smaller vocabulary "
                "(momoe-data prepare --vocab-max-size N, or --sp-vocab-size N)")
      : cfg.data.sentencepiece
          ? std::string("set data.tokenizer.vocab_size lower")
          : str_cat("set data.vocab_max_size (now ",
                    cfg.data.vocab_max_size == 0 ? std::string("0: no cap")
                                                 : std::to_string(cfg.data.vocab_max_size),
                    "), e.g. data.vocab_max_size=", kSuggestedVocabCap);
  return str_cat("the vocabulary (", m.vocab_size, " entries) holds ", format_percent(share),
                 " of the model's ", si_count(static_cast<double>(size.total_params)),
                 " parameters (token embedding", m.tie_embeddings ? "" : " and output head",
                 "): every step pays for it, the experts and attention get little; ", cap);
}

}  // namespace

std::vector<std::string> config_warnings(const RunConfig& cfg) {
  std::vector<std::string> out;
  if (std::string v = vocabulary_warning(cfg); !v.empty()) out.push_back(v);
  const DataConfig defaults;
  if (!cfg.data.dataset.empty() && (cfg.data.vocab_max_size != defaults.vocab_max_size ||
                                    cfg.data.vocab_min_count != defaults.vocab_min_count)) {
    out.push_back(str_cat("data.vocab_max_size (", cfg.data.vocab_max_size,
                          ") and data.vocab_min_count (", cfg.data.vocab_min_count,
                          ") do not apply to data.dataset ", cfg.data.dataset,
                          ": its tokenizer has ", cfg.model.vocab_size,
                          " entries, chosen when it was prepared (momoe-data prepare "
                          "--vocab-max-size); unset them"));
  }
  const TrainConfig& t = cfg.train;
  if (t.warmup_steps > 0 && t.steps <= t.warmup_steps) {
    // Step i (0-based) of the warm-up runs at lr (i + 1) / warmup_steps: the last one at lr.
    out.push_back(str_cat(
        "train.steps = ", t.steps, " does not exceed schedule.warmup_steps = ", t.warmup_steps,
        ": the whole run is warm-up, and the learning rate ",
        t.steps < t.warmup_steps ? "never reaches" : "reaches only at its last step",
        " train.optimizer.lr = ", t.optimizer.lr, "; train longer or lower the warm-up"));
  }
  return out;
}

}  // namespace moe
