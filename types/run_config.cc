#include "types/run_config.h"

#include <cmath>
#include <cstdlib>
#include <fstream>

namespace moe {

std::string bundled_data_path(const std::string& relative) {
  if (const char* env = std::getenv("MOMOE_DATA_DIR")) return std::string(env) + "/" + relative;
#if defined(MOE_SOURCE_DIR)
  const std::string source = std::string(MOE_SOURCE_DIR) + "/data/" + relative;
  if (std::ifstream(source).good()) return source;
#endif
  return "data/" + relative;
}

const char* precision_name(Precision p) { return p == Precision::kBf16 ? "BF16" : "FP32"; }

const char* placement_name(Placement p) { return p == Placement::kHosts ? "HOSTS" : "RANK_ORDER"; }
const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::kNone:
      return "NONE";
    case Recompute::kSelective:
      return "SELECTIVE";
    case Recompute::kFull:
      return "FULL";
  }
  return "NONE";
}

DType activation_dtype(Precision p) { return p == Precision::kBf16 ? DType::kBF16 : DType::kF32; }

Status TrainConfig::validate() const {
  auto range = [](const char* field, double value, const char* allowed) {
    return invalid_argument_error("train.", field, " = ", value, " is outside the allowed range ",
                                  allowed);
  };
  if (steps < 0) return range("steps", static_cast<double>(steps), "[0, inf)");
  if (batch_size < 1) return range("batch_size", static_cast<double>(batch_size), "[1, inf)");
  if (grad_accum < 1) return range("grad_accum", static_cast<double>(grad_accum), "[1, inf)");
  if (loss_chunk_tokens < 0) {
    return range("loss_chunk_tokens", static_cast<double>(loss_chunk_tokens), "[0, inf)");
  }
  if (!(optimizer.lr >= 0 && std::isfinite(optimizer.lr)))
    return range("optimizer.lr", optimizer.lr, "[0, inf)");
  if (!(optimizer.beta1 >= 0 && optimizer.beta1 < 1))
    return range("optimizer.beta1", optimizer.beta1, "[0, 1)");
  if (!(optimizer.beta2 >= 0 && optimizer.beta2 < 1))
    return range("optimizer.beta2", optimizer.beta2, "[0, 1)");
  if (!(optimizer.eps > 0)) return range("optimizer.eps", optimizer.eps, "(0, inf)");
  if (!(optimizer.weight_decay >= 0))
    return range("optimizer.weight_decay", optimizer.weight_decay, "[0, inf)");
  if (!(optimizer.momentum >= 0 && optimizer.momentum < 1))
    return range("optimizer.momentum", optimizer.momentum, "[0, 1)");
  if (warmup_steps < 0)
    return range("schedule.warmup_steps", static_cast<double>(warmup_steps), "[0, inf)");
  if (!(min_lr_ratio >= 0 && min_lr_ratio <= 1))
    return range("schedule.min_lr_ratio", min_lr_ratio, "[0, 1]");
  if (!(grad_clip >= 0)) return range("grad_clip", grad_clip, "[0, inf)");
  if (eval_every < 0) return range("eval_every", static_cast<double>(eval_every), "[0, inf)");
  if (eval_sequences < 0)
    return range("eval_sequences", static_cast<double>(eval_sequences), "[0, inf)");
  if (checkpoint_every < 0)
    return range("checkpoint_every", static_cast<double>(checkpoint_every), "[0, inf)");
  if (!(checkpoint_minutes >= 0))
    return range("checkpoint_minutes", checkpoint_minutes, "[0, inf) (0 = not by time)");
  if (keep_checkpoints < 1)
    return range("keep_checkpoints", static_cast<double>(keep_checkpoints), "[1, inf)");
  if (log_every < 1) return range("log_every", static_cast<double>(log_every), "[1, inf)");
  if (!(attack_rate >= 0 && attack_rate <= 1)) return range("attack_rate", attack_rate, "[0, 1]");
  if (probe_every < 0) return range("probe_every", static_cast<double>(probe_every), "[0, inf)");
  if (probe_sequences < 1)
    return range("probe_sequences", static_cast<double>(probe_sequences), "[1, inf)");
  if (!(collapse_threshold > 1 && std::isfinite(collapse_threshold))) {
    return range("collapse_threshold", collapse_threshold, "(1, inf)");
  }
  if (max_skipped_steps < 0) {
    return range("max_skipped_steps", static_cast<double>(max_skipped_steps),
                 "[0, inf) (0 = never stop)");
  }
  return Status::OK();
}

Status TrainConfig::check_batch_split(int world_size) const {
  if (batch_size % (grad_accum * world_size) != 0) {
    return invalid_argument_error("train.batch_size = ", batch_size, " is not divisible by ",
                                  "grad_accum (", grad_accum, ") x world size (", world_size, ")");
  }
  return Status::OK();
}

double TrainConfig::learning_rate(int64_t step) const {
  const double peak = optimizer.lr;
  if (warmup_steps > 0 && step < warmup_steps) {
    return peak * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  }
  if (schedule == LrScheduleKind::kConstant) return peak;
  const int64_t decay_steps = std::max<int64_t>(1, steps - warmup_steps - 1);
  const double progress =
      std::min(1.0, static_cast<double>(step - warmup_steps) / static_cast<double>(decay_steps));
  const double floor = min_lr_ratio * peak;
  return floor + (peak - floor) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace moe
