#include "core/model/transformer.h"

#include "core/base/hash.h"
#include "core/layers/init.h"
#include "core/layers/rng_streams.h"
#include "kernels/activation.h"
#include "kernels/cross_entropy.h"
#include "kernels/optimizer.h"

namespace moe {
namespace {

Status embedding_dropout(const StepContext& ctx, double p, const TensorView& h, bool backward) {
  if (!ctx.training || p <= 0) return Status::OK();
  const int64_t n = h.dim(0);
  Tensor keys = Tensor::empty({n}, DType::kI64);
  for (int64_t t = 0; t < n; ++t) keys.data<int64_t>()[t] = ctx.token_offset() + t;
  const CounterRng rng = site_rng(ctx.seed, RandomSite::kEmbedding, 0, ctx.step);
  return backward ? kernels::dropout_backward(h, keys, rng, static_cast<float>(p), h)
                  : kernels::dropout_forward(h, keys, rng, static_cast<float>(p), h);
}

}  // namespace

TransformerLM::TransformerLM(const ModelConfig& cfg, DType dtype, comm::Communicator* ep_comm)
    : cfg_(cfg), params_(std::make_unique<ParameterSet>(dtype)) {
  embed_ = std::make_unique<Embedding>("embed", cfg.vocab_size, cfg.d_model, cfg.seq_len,
                                       params_.get());
  for (size_t b = 0; b < cfg.blocks.size(); ++b) {
    blocks_.push_back(std::make_unique<TransformerBlock>(static_cast<int>(b), cfg, cfg.blocks[b],
                                                         num_moe_, params_.get(), ep_comm));
    num_moe_ += cfg.blocks[b].moe;
  }
  if (cfg.block_style == BlockStyle::kPreLn) {
    final_ln_ = std::make_unique<LayerNorm>("final_ln", cfg.d_model, params_.get());
  }
  head_ = std::make_unique<OutputHead>("head", cfg.vocab_size, cfg.d_model,
                                       cfg.tie_embeddings ? &embed_->tokens() : nullptr,
                                       params_.get());
}

Status TransformerLM::init_parameters(uint64_t seed) {
  for (const auto& p : params_->all()) {
    const std::string& n = p->name;
    const std::string leaf = n.substr(n.rfind('.') + 1);
    if (leaf == "gamma" || leaf == "omega") {
      MOE_RETURN_IF_ERROR(init_constant(p->value, 1.0));
    } else if (leaf[0] == 'b') {
      MOE_RETURN_IF_ERROR(init_constant(p->value, 0.0));  // beta, b_qkv, b_o, b1, b2, b_router
    } else {
      // One stream per parameter name; an expert shard draws its slice of the global tensor.
      const CounterRng rng{seed, make_stream(RngTag::kInit, 0, fnv1a64(n))};
      const uint64_t first = p->kind == ParamKind::kExpert
                                 ? static_cast<uint64_t>(p->first_expert * (p->value.numel() / p->value.dim(0)))
                                 : 0;
      MOE_RETURN_IF_ERROR(init_normal(p->value, cfg_.init_std, rng, first));
    }
  }
  return Status::OK();
}

Status TransformerLM::forward_impl(const TensorView& inputs, const TensorView& targets,
                                   const StepContext& ctx, Activations* acts, LossResult* loss,
                                   std::vector<RouterStatsInfo>* stats,
                                   std::vector<Tensor>* top1s) {
  const int64_t batch = inputs.dim(0), n = batch * cfg_.seq_len;
  const DType dtype = params_->dtype();
  if (inputs.ndim() != 2 || inputs.dim(1) != cfg_.seq_len || inputs.dtype() != DType::kI32) {
    return invalid_argument_error("model: inputs ", inputs.to_string(), " are not i32 [B, ",
                                  cfg_.seq_len, "]");
  }
  acts->ctx = ctx;
  acts->inputs = Tensor::copy_of(inputs);
  acts->targets = Tensor::copy_of(targets);
  acts->blocks.clear();
  acts->blocks.resize(blocks_.size());
  if (stats != nullptr && stats->size() != static_cast<size_t>(num_moe_)) stats->assign(num_moe_, {});

  Tensor h = Tensor::empty({n, cfg_.d_model}, dtype);
  MOE_RETURN_IF_ERROR(embed_->forward(inputs, h));
  MOE_RETURN_IF_ERROR(embedding_dropout(ctx, cfg_.dropout, h, false));
  MoeState state;
  int moe = 0;
  for (size_t b = 0; b < blocks_.size(); ++b) {
    RouterStatsInfo* s = nullptr;
    if (blocks_[b]->is_moe() && stats != nullptr) s = &(*stats)[moe];
    MOE_RETURN_IF_ERROR(blocks_[b]->forward(ctx, &h, &state, &acts->blocks[b], s));
    if (blocks_[b]->is_moe()) {
      loss->aux_loss += acts->blocks[b].moe.aux_loss;
      if (top1s != nullptr) top1s->push_back(Tensor::copy_of(state.top1));
      ++moe;
    }
  }
  if (final_ln_ != nullptr) MOE_RETURN_IF_ERROR(final_ln_->forward(h, h, &acts->final_ln));
  acts->h_final = std::move(h);
  if (top1s != nullptr) return Status::OK();
  acts->logits = Tensor::empty({n, cfg_.vocab_size}, dtype);
  MOE_RETURN_IF_ERROR(head_->forward(acts->h_final, acts->logits));
  acts->lse = Tensor::empty({n}, dtype);
  MOE_ASSIGN_OR_RETURN(kernels::CrossEntropyResult ce,
                       kernels::cross_entropy_forward(acts->logits, targets.reshape({n}), acts->lse));
  loss->loss_sum += ce.loss_sum;
  loss->tokens += ce.count;
  acts->counted = ce.count;
  return Status::OK();
}

Status TransformerLM::forward(const TensorView& inputs, const TensorView& targets,
                              const StepContext& ctx, Activations* acts, LossResult* loss,
                              std::vector<RouterStatsInfo>* stats) {
  return forward_impl(inputs, targets, ctx, acts, loss, stats, nullptr);
}

Status TransformerLM::backward(const Activations& acts, double ce_scale, double aux_scale) {
  const int64_t n = acts.h_final.dim(0);
  Tensor d_logits = Tensor::empty(acts.logits.shape(), acts.logits.dtype());
  const double scale = acts.counted > 0 ? ce_scale / static_cast<double>(acts.counted) : 0.0;
  MOE_RETURN_IF_ERROR(kernels::cross_entropy_backward(acts.logits, acts.targets.view().reshape({n}),
                                                      acts.lse, scale, d_logits));
  Tensor dh = Tensor::empty({n, cfg_.d_model}, acts.h_final.dtype());
  MOE_RETURN_IF_ERROR(head_->backward(acts.h_final, d_logits, dh));
  if (final_ln_ != nullptr) MOE_RETURN_IF_ERROR(final_ln_->backward(dh, acts.final_ln, dh));
  MoeStateGrad state_grad;
  for (size_t b = blocks_.size(); b-- > 0;) {
    MOE_RETURN_IF_ERROR(blocks_[b]->backward(acts.ctx, acts.blocks[b], aux_scale, &dh, &state_grad));
  }
  MOE_RETURN_IF_ERROR(embedding_dropout(acts.ctx, cfg_.dropout, dh, true));
  return embed_->backward(acts.inputs, dh);
}

StatusOr<LossResult> TransformerLM::evaluate(const TensorView& inputs, const TensorView& targets,
                                             const StepContext& ctx,
                                             std::vector<RouterStatsInfo>* stats) {
  StepContext eval = ctx;
  eval.training = false;
  Activations acts;
  LossResult loss;
  MOE_RETURN_IF_ERROR(forward_impl(inputs, targets, eval, &acts, &loss, stats, nullptr));
  return loss;
}

StatusOr<std::vector<Tensor>> TransformerLM::route_probe(const TensorView& inputs,
                                                         const StepContext& ctx) {
  StepContext eval = ctx;
  eval.training = false;
  Activations acts;
  LossResult loss;
  std::vector<Tensor> top1s;
  MOE_RETURN_IF_ERROR(forward_impl(inputs, inputs, eval, &acts, &loss, nullptr, &top1s));
  return top1s;
}

}  // namespace moe
