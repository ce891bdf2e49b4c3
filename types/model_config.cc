#include "types/model_config.h"

#include "base/check.h"

namespace moe {

int64_t ModelConfig::num_moe_layers() const {
  int64_t n = 0;
  for (const BlockPlan& b : blocks) n += b.moe;
  return n;
}

std::string ModelConfig::batch_dependent_evaluation() const {
  for (size_t b = 0; b < blocks.size(); ++b) {
    if (!blocks[b].moe) continue;
    const MoeLayerConfig& m = blocks[b].moe_cfg;
    if (m.ac.enabled) {
      return str_cat("block ", b, "'s AC router computes its metric from each evaluation batch");
    }
    if (!m.dropless && m.eval_capacity_factor > 0) {
      return str_cat("block ", b, " evaluates with a capacity (eval_capacity_factor ",
                     m.eval_capacity_factor, ") set by each batch's size and loads");
    }
  }
  return "";
}

Status ModelConfig::validate(int ep_size) const {
  auto range = [](const char* field, double value, const char* allowed) {
    return invalid_argument_error("model.", field, " = ", value, " is outside the allowed range ",
                                  allowed);
  };
  if (vocab_size < 2) return range("vocab_size", vocab_size, "[2, inf)");
  if (d_model < 1) return range("d_model", d_model, "[1, inf)");
  if (n_heads < 1) return range("n_heads", n_heads, "[1, inf)");
  if (d_model % n_heads != 0) {
    return invalid_argument_error("model.d_model = ", d_model,
                                  " is not divisible by n_heads = ", n_heads);
  }
  if (seq_len < 1) return range("seq_len", seq_len, "[1, inf)");
  if (d_ff < 1) return range("d_ff", d_ff, "[1, inf)");
  if (!(dropout >= 0 && dropout < 1)) return range("dropout", dropout, "[0, 1)");
  if (!(attention_dropout >= 0 && attention_dropout < 1)) {
    return range("attention_dropout", attention_dropout, "[0, 1)");
  }
  if (!(init_std > 0)) return range("init_std", init_std, "(0, inf)");
  if (!(norm_eps > 0 && norm_eps < 1)) return range("norm_eps", norm_eps, "(0, 1)");
  if (position == PositionKind::kRope) {
    if ((d_model / n_heads) % 2 != 0) {
      return invalid_argument_error("model.position = ROPE needs an even head width; d_model / ",
                                    "n_heads = ", d_model / n_heads);
    }
    if (!(rope_base > 1)) return range("rope_base", rope_base, "(1, inf)");
  }
  if (blocks.empty()) return invalid_argument_error("model: no blocks (set arch or layers)");
  int moe_index = 0;
  for (size_t b = 0; b < blocks.size(); ++b) {
    if (!blocks[b].moe) continue;
    const MoeLayerConfig& m = blocks[b].moe_cfg;
    const std::string where = str_cat("model.blocks[", b, "].moe");
    if (m.d_model != d_model) {
      return invalid_argument_error(where, ".d_model = ", m.d_model,
                                    " differs from model.d_model = ", d_model);
    }
    MOE_RETURN_IF_ERROR(m.validate(where, ep_size));
    if (moe_index == 0 && m.ac.enabled) {
      return invalid_argument_error(where,
                                    ": the AC router needs a previous MoE layer's clusters; "
                                    "the first MoE layer must use the standard router");
    }
    if (moe_index > 0 && m.residual == ResidualKind::kAdam) {
      return invalid_argument_error(where,
                                    ": AdamSMoE is only used in the first MoE layer "
                                    "(later layers use heavy ball, spec/momentum-smoe.md 3.2)");
    }
    ++moe_index;
  }
  return Status::OK();
}

StatusOr<std::vector<BlockPlan>> expand_arch_string(const std::string& arch,
                                                    const MoeLayerConfig& moe_default) {
  if (arch.empty() || arch.size() % 2 != 0) {
    return invalid_argument_error("model.arch = '", arch, "' must be pairs of 's' and one of ",
                                  "g, m, a, r, c, f (e.g. \"sgsmsm\")");
  }
  std::vector<BlockPlan> blocks;
  for (size_t i = 0; i < arch.size(); i += 2) {
    if (arch[i] != 's') {
      return invalid_argument_error("model.arch = '", arch, "': position ", i, " is '", arch[i],
                                    "', expected 's' (attention)");
    }
    BlockPlan plan;
    plan.moe = arch[i + 1] != 'f';
    plan.moe_cfg = moe_default;
    MoeLayerConfig& m = plan.moe_cfg;
    switch (arch[i + 1]) {
      case 'f':
        break;
      case 'g':
        m.residual = ResidualKind::kPlain;
        break;
      case 'm':
        m.residual = ResidualKind::kHeavyBall;
        break;
      case 'a':
        m.residual = ResidualKind::kAdam;
        break;
      case 'r':
        m.residual = ResidualKind::kRobust;
        break;
      case 'c':
        m.residual = ResidualKind::kPlain;
        m.ac.enabled = true;
        break;
      default:
        return invalid_argument_error("model.arch = '", arch, "': position ", i + 1, " is '",
                                      arch[i + 1], "', expected one of g, m, a, r, c, f");
    }
    blocks.push_back(plan);
  }
  return blocks;
}

}  // namespace moe
