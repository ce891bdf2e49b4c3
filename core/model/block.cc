#include "core/model/block.h"

#include "kernels/activation.h"
#include "kernels/elementwise.h"

namespace moe {
namespace {

AttentionOptions attention_options(const ModelConfig& model) {
  AttentionOptions options;
  options.rope_base = model.position == PositionKind::kRope ? model.rope_base : 0.0;
  options.bias = model.linear_bias;
  options.qk_norm = model.qk_norm;
  options.norm_eps = model.norm_eps;
  return options;
}

}  // namespace

TransformerBlock::TransformerBlock(int index, const ModelConfig& model, const BlockPlan& plan,
                                   int moe_index, ParameterSet* params, comm::Communicator* ep_comm)
    : ctx_(params->context()),
      index_(index),
      style_(model.block_style),
      dropout_(model.dropout),
      attn_(str_cat("blocks.", index, ".attn"), model.d_model, model.n_heads, model.seq_len,
            model.attention_dropout, params, attention_options(model)),
      ln1_(str_cat("blocks.", index, ".ln1"), model.d_model, params, model.norm_eps, model.norm),
      ln2_(str_cat("blocks.", index, ".ln2"), model.d_model, params, model.norm_eps, model.norm) {
  const std::string prefix = str_cat("blocks.", index);
  if (plan.moe) {
    if (style_ == BlockStyle::kPostLnDoubleResidual) {
      ln_in_ = std::make_unique<LayerNorm>(prefix + ".ln_in", model.d_model, params, model.norm_eps,
                                           model.norm);
    }
    moe_ = std::make_unique<MoeLayer>(prefix + ".moe", plan.moe_cfg, index, moe_index, params,
                                      ep_comm);
  } else {
    ffn_ = std::make_unique<DenseFfn>(prefix + ".ffn", model.d_model, model.d_ff, model.activation,
                                      model.linear_bias, model.dropout, params);
  }
}

StatusOr<Tensor> TransformerBlock::residual_dropout(const StepContext& ctx, RandomSite site,
                                                    const Tensor& x, bool backward) const {
  if (!ctx.training || dropout_ <= 0) return x;
  MOE_ASSIGN_OR_RETURN(Tensor y, ctx_.empty_like(x));
  const CounterRng rng = ctx.rng(site, index_);
  const float p = static_cast<float>(dropout_);
  MOE_RETURN_IF_ERROR(backward
                          ? kernels::dropout_backward(ctx_, x, {}, ctx.token_offset(), rng, p, y)
                          : kernels::dropout_forward(ctx_, x, {}, ctx.token_offset(), rng, p, y));
  return y;
}

StatusOr<Tensor> TransformerBlock::sum(const Tensor& a, const Tensor& b) const {
  MOE_ASSIGN_OR_RETURN(Tensor out, ctx_.empty_like(a));
  MOE_RETURN_IF_ERROR(kernels::add(ctx_, a, b, out));
  return out;
}

StatusOr<Tensor> TransformerBlock::forward(const StepContext& ctx, const Tensor& h_in,
                                           MoeState* state, Saved* s,
                                           const TensorView& stats) const {
  const bool post = style_ == BlockStyle::kPostLnDoubleResidual;

  // Attention sublayer: post-LN h = LN1(h + drop(Attn(h))); pre-LN h = h + drop(Attn(LN1(h))).
  Tensor attn_in = h_in;
  if (!post) {
    MOE_ASSIGN_OR_RETURN(attn_in, ln1_.forward(h_in, &s->ln1));
  }
  MOE_ASSIGN_OR_RETURN(
      Tensor a, attn_.forward(attn_in, ctx.batch, ctx.sequence_offset, ctx.training,
                              ctx.rng(RandomSite::kAttentionProbs, index_, /*sequence_keys=*/true),
                              &s->attn));
  MOE_ASSIGN_OR_RETURN(a, residual_dropout(ctx, RandomSite::kAttentionOut, a, false));
  MOE_ASSIGN_OR_RETURN(Tensor h, sum(h_in, a));
  if (post) {
    MOE_ASSIGN_OR_RETURN(h, ln1_.forward(h, &s->ln1));
  }

  if (moe_ != nullptr) {
    // post-LN: h = LN2(h + LN_in(z)), z = MoE(x_in = h, x_base = h);
    // pre-LN:  h = z, z = MoE(x_in = LN2(h), x_base = h).
    MoeLayerInputs in;
    in.x_in = h;
    if (!post) {
      MOE_ASSIGN_OR_RETURN(in.x_in, ln2_.forward(h, &s->ln2));
    }
    in.x_base = h;
    in.p_in = state->p;
    in.prev_top1 = state->top1;
    in.token_offset = ctx.token_offset();
    in.seq_len = ctx.seq_len;
    in.step = ctx.step;
    in.seed = ctx.seed;
    in.device_step = ctx.device_step;
    in.training = ctx.training;
    in.training_capacity = ctx.training_capacity;
    in.stats_comm = ctx.stats_comm;
    in.stats = stats;
    in.recompute_hidden = ctx.recompute_hidden();
    in.replay = ctx.replay;
    StatusOr<MoeLayerOutputs> out = moe_->forward(in, &s->moe);
    if (!out.ok()) return out.status().with_context(str_cat("block ", index_));
    state->p = out->p_out;
    state->top1 = out->top1;
    if (!post) return out->out;
    MOE_ASSIGN_OR_RETURN(Tensor z, ln_in_->forward(out->out, &s->ln_in));
    MOE_ASSIGN_OR_RETURN(h, sum(h, z));
    return ln2_.forward(h, &s->ln2);
  }

  // Dense: post-LN h = LN2(h + drop(FFN(h))); pre-LN h = h + drop(FFN(LN2(h))).
  Tensor ffn_in = h;
  if (!post) {
    MOE_ASSIGN_OR_RETURN(ffn_in, ln2_.forward(h, &s->ln2));
  }
  MOE_ASSIGN_OR_RETURN(Tensor f, ffn_->forward(ffn_in, ctx.token_offset(), ctx.training,
                                               ctx.rng(RandomSite::kFfnHidden, index_), &s->ffn,
                                               ctx.recompute_hidden()));
  MOE_ASSIGN_OR_RETURN(f, residual_dropout(ctx, RandomSite::kFfnOut, f, false));
  MOE_ASSIGN_OR_RETURN(h, sum(h, f));
  if (post) return ln2_.forward(h, &s->ln2);
  return h;
}

StatusOr<Tensor> TransformerBlock::backward(const StepContext& ctx, const Saved& s,
                                            double aux_scale, const Tensor& dh_out,
                                            MoeStateGrad* state_grad) const {
  const bool post = style_ == BlockStyle::kPostLnDoubleResidual;
  // First the FFN or MoE sublayer, giving dL/dh_mid (h_mid: the attention sublayer's output).
  Tensor dh;
  if (moe_ != nullptr) {
    Tensor d_sum, dz = dh_out;
    if (post) {
      MOE_ASSIGN_OR_RETURN(d_sum, ln2_.backward(dh_out, s.ln2));  // dL/d(h_mid + LN_in(z))
      MOE_ASSIGN_OR_RETURN(dz, ln_in_->backward(d_sum, s.ln_in));
    }
    MoeLayerGradOutputs g;
    g.d_out = dz;
    g.d_p_out = state_grad->d_p;
    g.aux_scale = aux_scale;
    StatusOr<MoeLayerGradInputs> gi = moe_->backward(g, s.moe);
    if (!gi.ok()) return gi.status().with_context(str_cat("block ", index_));
    state_grad->d_p = gi->d_p_in;
    // post: dh_mid = dL/d(sum) (outer residual) + d_x_in + d_x_base;
    // pre: dh_mid = d_x_base + LN2'(d_x_in).
    if (post) {
      MOE_ASSIGN_OR_RETURN(dh, sum(d_sum, gi->d_x_base));
      MOE_RETURN_IF_ERROR(kernels::add(ctx_, dh, gi->d_x_in, dh));
    } else {
      MOE_ASSIGN_OR_RETURN(Tensor d_ln, ln2_.backward(gi->d_x_in, s.ln2));
      MOE_ASSIGN_OR_RETURN(dh, sum(gi->d_x_base, d_ln));
    }
  } else {
    Tensor d_sum = dh_out;
    if (post) {
      MOE_ASSIGN_OR_RETURN(d_sum, ln2_.backward(dh_out, s.ln2));
    }
    MOE_ASSIGN_OR_RETURN(Tensor df, residual_dropout(ctx, RandomSite::kFfnOut, d_sum, true));
    MOE_ASSIGN_OR_RETURN(Tensor d_ffn_in, ffn_->backward(df, s.ffn));
    if (!post) {
      MOE_ASSIGN_OR_RETURN(d_ffn_in, ln2_.backward(d_ffn_in, s.ln2));
    }
    MOE_ASSIGN_OR_RETURN(dh, sum(d_sum, d_ffn_in));
  }

  // Attention sublayer.
  Tensor d_sum = dh;
  if (post) {
    MOE_ASSIGN_OR_RETURN(d_sum, ln1_.backward(dh, s.ln1));
  }
  MOE_ASSIGN_OR_RETURN(Tensor da, residual_dropout(ctx, RandomSite::kAttentionOut, d_sum, true));
  MOE_ASSIGN_OR_RETURN(Tensor d_attn_in, attn_.backward(da, s.attn));
  if (!post) {
    MOE_ASSIGN_OR_RETURN(d_attn_in, ln1_.backward(d_attn_in, s.ln1));
  }
  return sum(d_sum, d_attn_in);
}

}  // namespace moe
