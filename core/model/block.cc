#include "core/model/block.h"

#include "core/layers/rng_streams.h"
#include "kernels/activation.h"
#include "kernels/optimizer.h"

namespace moe {
namespace {

Tensor like(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype()); }

}  // namespace

TransformerBlock::TransformerBlock(int index, const ModelConfig& model, const BlockPlan& plan,
                                   int moe_index, ParameterSet* params, comm::Communicator* ep_comm)
    : index_(index),
      style_(model.block_style),
      dropout_(model.dropout),
      attn_(str_cat("blocks.", index, ".attn"), model.d_model, model.n_heads, model.seq_len,
            model.attention_dropout, params),
      ln1_(str_cat("blocks.", index, ".ln1"), model.d_model, params),
      ln2_(str_cat("blocks.", index, ".ln2"), model.d_model, params) {
  const std::string prefix = str_cat("blocks.", index);
  if (plan.moe) {
    if (style_ == BlockStyle::kPostLnDoubleResidual) {
      ln_in_ = std::make_unique<LayerNorm>(prefix + ".ln_in", model.d_model, params);
    }
    moe_ = std::make_unique<MoeLayer>(prefix + ".moe", plan.moe_cfg, index, moe_index, params,
                                      ep_comm);
  } else {
    ffn_ = std::make_unique<DenseFfn>(prefix + ".ffn", model.d_model, model.d_ff, model.activation,
                                      model.dropout, params);
  }
}

Status TransformerBlock::residual_dropout(const StepContext& ctx, RandomSite site,
                                          const TensorView& x, bool backward) const {
  if (!ctx.training || dropout_ <= 0) return Status::OK();
  const int64_t n = x.dim(0);
  Tensor keys = Tensor::empty({n}, DType::kI64);
  for (int64_t t = 0; t < n; ++t) keys.data<int64_t>()[t] = ctx.token_offset() + t;
  const CounterRng rng = site_rng(ctx.seed, site, index_, ctx.step);
  const float p = static_cast<float>(dropout_);
  return backward ? kernels::dropout_backward(x, keys, rng, p, x)
                  : kernels::dropout_forward(x, keys, rng, p, x);
}

Status TransformerBlock::forward(const StepContext& ctx, Tensor* h, MoeState* state, Saved* s,
                                 RouterStatsInfo* stats) const {
  const bool post = style_ == BlockStyle::kPostLnDoubleResidual;

  // Attention sublayer: post-LN h = LN1(h + drop(Attn(h))); pre-LN h = h + drop(Attn(LN1(h))).
  Tensor attn_in = post ? Tensor::copy_of(*h) : like(*h);
  if (!post) MOE_RETURN_IF_ERROR(ln1_.forward(*h, attn_in, &s->ln1));
  s->attn_out = like(*h);
  MOE_RETURN_IF_ERROR(attn_.forward(attn_in, ctx.batch, ctx.sequence_offset, ctx.training,
                                    site_rng(ctx.seed, RandomSite::kAttentionProbs, index_, ctx.step),
                                    s->attn_out, &s->attn));
  Tensor dropped = Tensor::copy_of(s->attn_out);
  MOE_RETURN_IF_ERROR(residual_dropout(ctx, RandomSite::kAttentionOut, dropped, false));
  MOE_RETURN_IF_ERROR(kernels::add(*h, dropped, *h));
  if (post) MOE_RETURN_IF_ERROR(ln1_.forward(*h, *h, &s->ln1));

  if (moe_ != nullptr) {
    // post-LN: h = LN2(h + LN_in(z)), z = MoE(x_in = h, x_base = h);
    // pre-LN:  h = z, z = MoE(x_in = LN2(h), x_base = h).
    Tensor x_in = post ? Tensor::copy_of(*h) : like(*h);
    if (!post) MOE_RETURN_IF_ERROR(ln2_.forward(*h, x_in, &s->ln2));
    Tensor z = like(*h);
    Tensor p_out = like(*h);
    Tensor top1 = Tensor::empty({h->dim(0)}, DType::kI32);
    MoeLayerInputs in;
    in.x_in = x_in;
    in.x_base = *h;
    in.p_in = state->p.view();
    in.prev_top1 = state->top1.view();
    in.token_offset = ctx.token_offset();
    in.step = ctx.step;
    in.seed = ctx.seed;
    in.training = ctx.training;
    in.stats_comm = ctx.stats_comm;
    MoeLayerOutputs out;
    out.out = z;
    out.p_out = p_out;
    out.top1 = top1;
    MOE_RETURN_IF_ERROR(moe_->forward(in, out, &s->moe, stats).with_context(str_cat("block ", index_)));
    state->p = std::move(p_out);
    state->top1 = std::move(top1);
    if (post) {
      MOE_RETURN_IF_ERROR(ln_in_->forward(z, z, &s->ln_in));
      MOE_RETURN_IF_ERROR(kernels::add(*h, z, *h));
      return ln2_.forward(*h, *h, &s->ln2);
    }
    *h = std::move(z);
    return Status::OK();
  }

  // Dense: post-LN h = LN2(h + drop(FFN(h))); pre-LN h = h + drop(FFN(LN2(h))).
  Tensor ffn_in = post ? Tensor::copy_of(*h) : like(*h);
  if (!post) MOE_RETURN_IF_ERROR(ln2_.forward(*h, ffn_in, &s->ln2));
  Tensor f = like(*h);
  MOE_RETURN_IF_ERROR(ffn_->forward(ffn_in, ctx.token_offset(), ctx.training,
                                    site_rng(ctx.seed, RandomSite::kFfnHidden, index_, ctx.step), f,
                                    &s->ffn));
  MOE_RETURN_IF_ERROR(residual_dropout(ctx, RandomSite::kFfnOut, f, false));
  MOE_RETURN_IF_ERROR(kernels::add(*h, f, *h));
  if (post) MOE_RETURN_IF_ERROR(ln2_.forward(*h, *h, &s->ln2));
  return Status::OK();
}

Status TransformerBlock::backward(const StepContext& ctx, const Saved& s, double aux_scale,
                                  Tensor* dh, MoeStateGrad* state_grad) const {
  const bool post = style_ == BlockStyle::kPostLnDoubleResidual;
  // dh is dL/d(block output). First the FFN or MoE sublayer, leaving dL/dh_mid in dh.
  if (moe_ != nullptr) {
    Tensor dz = like(*dh);
    if (post) {
      MOE_RETURN_IF_ERROR(ln2_.backward(*dh, s.ln2, *dh));  // dL/d(h_mid + LN_in(z))
      MOE_RETURN_IF_ERROR(ln_in_->backward(*dh, s.ln_in, dz));
    } else {
      MOE_RETURN_IF_ERROR(device_memcpy(dz.raw(), dz.device(), dh->raw(), dh->device(), dh->nbytes()));
      MOE_RETURN_IF_ERROR(dh->zero());
    }
    Tensor d_x_in = like(*dh), d_x_base = like(*dh), d_p_in = like(*dh);
    MoeLayerGradOutputs g;
    g.d_out = dz;
    g.d_p_out = state_grad->d_p.view();
    g.aux_scale = aux_scale;
    MoeLayerGradInputs gi;
    gi.d_x_in = d_x_in;
    gi.d_x_base = d_x_base;
    gi.d_p_in = d_p_in;
    MOE_RETURN_IF_ERROR(moe_->backward(g, s.moe, gi).with_context(str_cat("block ", index_)));
    state_grad->d_p = std::move(d_p_in);
    // post: dh_mid = dL/d(sum) (outer residual) + d_x_in + d_x_base; pre: through LN2 for x_in.
    MOE_RETURN_IF_ERROR(kernels::add(*dh, d_x_base, *dh));
    if (post) {
      MOE_RETURN_IF_ERROR(kernels::add(*dh, d_x_in, *dh));
    } else {
      MOE_RETURN_IF_ERROR(ln2_.backward(d_x_in, s.ln2, d_x_in));
      MOE_RETURN_IF_ERROR(kernels::add(*dh, d_x_in, *dh));
    }
  } else {
    if (post) MOE_RETURN_IF_ERROR(ln2_.backward(*dh, s.ln2, *dh));
    Tensor df = Tensor::copy_of(*dh);
    MOE_RETURN_IF_ERROR(residual_dropout(ctx, RandomSite::kFfnOut, df, true));
    Tensor d_ffn_in = like(*dh);
    MOE_RETURN_IF_ERROR(ffn_->backward(df, s.ffn, d_ffn_in));
    if (!post) MOE_RETURN_IF_ERROR(ln2_.backward(d_ffn_in, s.ln2, d_ffn_in));
    MOE_RETURN_IF_ERROR(kernels::add(*dh, d_ffn_in, *dh));
  }

  // Attention sublayer.
  if (post) MOE_RETURN_IF_ERROR(ln1_.backward(*dh, s.ln1, *dh));
  Tensor da = Tensor::copy_of(*dh);
  MOE_RETURN_IF_ERROR(residual_dropout(ctx, RandomSite::kAttentionOut, da, true));
  Tensor d_attn_in = like(*dh);
  MOE_RETURN_IF_ERROR(attn_.backward(da, s.attn, d_attn_in));
  if (!post) MOE_RETURN_IF_ERROR(ln1_.backward(d_attn_in, s.ln1, d_attn_in));
  return kernels::add(*dh, d_attn_in, *dh);
}

}  // namespace moe
