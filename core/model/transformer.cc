#include "core/model/transformer.h"

#include "base/hash.h"
#include "core/layers/rng_streams.h"
#include "kernels/activation.h"
#include "kernels/cross_entropy.h"
#include "kernels/elementwise.h"
#include "kernels/init.h"

namespace moe {

TransformerLM::TransformerLM(const ModelConfig& cfg, Context* ctx, DType act,
                             comm::Communicator* ep_comm)
    : cfg_(cfg), ctx_(*ctx), params_(std::make_unique<ParameterSet>(ctx, act)) {
  // Under RoPE the attention rotates q and k by position: no learned position table.
  embed_ = std::make_unique<Embedding>("embed", cfg.vocab_size, cfg.d_model, cfg.seq_len,
                                       params_.get(), cfg.position == PositionKind::kLearned);
  stats_offsets_.push_back(0);
  for (size_t b = 0; b < cfg.blocks.size(); ++b) {
    blocks_.push_back(std::make_unique<TransformerBlock>(static_cast<int>(b), cfg, cfg.blocks[b],
                                                         num_moe_layers(), params_.get(), ep_comm));
    if (cfg.blocks[b].moe) {
      const int64_t experts = cfg.blocks[b].moe_cfg.num_experts;
      moe_experts_.push_back(experts);
      stats_offsets_.push_back(stats_offsets_.back() + RouterStatsLayout(experts).size());
    }
  }
  if (cfg.block_style == BlockStyle::kPreLn) {
    final_ln_ =
        std::make_unique<LayerNorm>("final_ln", cfg.d_model, params_.get(), cfg.norm_eps, cfg.norm);
  }
  head_ =
      std::make_unique<OutputHead>("head", cfg.vocab_size, cfg.d_model,
                                   cfg.tie_embeddings ? &embed_->tokens() : nullptr, params_.get());
}

StatusOr<std::unique_ptr<TransformerLM>> TransformerLM::create(const ModelConfig& cfg, Context* ctx,
                                                               DType act,
                                                               comm::Communicator* ep_comm) {
  std::unique_ptr<TransformerLM> model(new TransformerLM(cfg, ctx, act, ep_comm));
  MOE_RETURN_IF_ERROR(model->params_->allocate());
  return model;
}

Status TransformerLM::update_score_biases(bool apply) {
  for (const auto& b : blocks_) {
    if (b->is_moe()) MOE_RETURN_IF_ERROR(b->moe()->update_score_bias(apply));
  }
  return Status::OK();
}

Status TransformerLM::init_parameters(uint64_t seed) {
  // The CPU reference draws every parameter on the host and the values are copied to the model's
  // context: a run starts from the same bits on every device (a GPU's log and cos may differ
  // from glibc's in the last bit, which would make GPU and CPU runs diverge from step 0).
  // The values do not depend on the threads; a GPU rank's context has none, and every rank of a
  // node initialises at once: a few each.
  ContextOptions options;
  options.threads = ctx_.thread_pool() != nullptr ? ctx_.threads() : std::min(4, available_cores());
  for (ParamKind kind : {ParamKind::kDense, ParamKind::kExpert}) {
    if (params_->masters_sharded(kind)) {
      return failed_precondition_error(
          "init_parameters: the masters are sharded (core/optim/state_sharding.h): initialise "
          "the parameters before sharding the optimizer state");
    }
  }
  const std::unique_ptr<Context> host = Context::host(options);
  for (const auto& p : params_->all()) {
    MOE_ASSIGN_OR_RETURN(Tensor values, host->empty(p->shape, params_->master_dtype()));
    const std::string& n = p->name;
    const std::string leaf = n.substr(n.rfind('.') + 1);
    if (leaf == "gamma" || leaf == "omega") {
      MOE_RETURN_IF_ERROR(kernels::init_constant(*host, values, 1.0));
    } else if (leaf[0] == 'b' || leaf == "score_bias") {
      // beta, b_qkv, b_o, b1, b2, b_router; loss-free balancing's bias
      MOE_RETURN_IF_ERROR(kernels::init_constant(*host, values, 0.0));
    } else {
      // One stream per parameter name; an expert shard draws its slice of the global tensor.
      const CounterRng rng{seed, make_stream(RngTag::kInit, 0, fnv1a64(n))};
      const uint64_t first =
          p->kind == ParamKind::kExpert
              ? static_cast<uint64_t>(p->first_expert * (p->numel() / p->shape[0]))
              : 0;
      MOE_RETURN_IF_ERROR(kernels::init_normal(*host, values, cfg_.init_std, rng, first));
    }
    MOE_RETURN_IF_ERROR(ctx_.copy(values, p->master));
  }
  return params_->refresh_working();
}

StatusOr<Tensor> TransformerLM::embedding_dropout(const StepContext& ctx, const Tensor& h,
                                                  bool backward) {
  if (!ctx.training || cfg_.dropout <= 0) return h;
  MOE_ASSIGN_OR_RETURN(Tensor y, ctx_.empty_like(h));
  const CounterRng rng = ctx.rng(RandomSite::kEmbedding, 0);
  const float p = static_cast<float>(cfg_.dropout);
  MOE_RETURN_IF_ERROR(backward
                          ? kernels::dropout_backward(ctx_, h, {}, ctx.token_offset(), rng, p, y)
                          : kernels::dropout_forward(ctx_, h, {}, ctx.token_offset(), rng, p, y));
  return y;
}

Status TransformerLM::forward_impl(const TensorView& inputs, const TensorView& targets,
                                   const StepContext& ctx, Activations* acts,
                                   const TensorView& sums, const TensorView& stats,
                                   std::vector<Tensor>* top1s) {
  if (inputs.ndim() != 2 || inputs.dim(1) != cfg_.seq_len || inputs.dtype() != DType::kI32) {
    return invalid_argument_error("model: inputs ", inputs.to_string(), " are not i32 [B, ",
                                  cfg_.seq_len, "]");
  }
  if (targets.shape() != inputs.shape() || targets.dtype() != DType::kI32) {
    return invalid_argument_error("model: targets ", targets.to_string(), " do not match inputs ",
                                  inputs.to_string());
  }
  if (sums.numel() > 0 && (sums.dtype() != DType::kF64 || sums.numel() != kLossSlots)) {
    return invalid_argument_error("model: loss sums ", sums.to_string(), " are not f64[",
                                  static_cast<int64_t>(kLossSlots), "]");
  }
  if (stats.numel() > 0 && (stats.dtype() != DType::kF64 || stats.numel() != stats_size())) {
    return invalid_argument_error("model: statistics ", stats.to_string(), " are not f64[",
                                  stats_size(), "]");
  }
  acts->ctx = ctx;
  MOE_ASSIGN_OR_RETURN(acts->inputs, ctx_.upload(inputs));
  MOE_ASSIGN_OR_RETURN(acts->targets, ctx_.upload(targets));
  const bool full = ctx.recompute_blocks();
  acts->blocks.clear();
  acts->blocks.resize(full ? 0 : blocks_.size());
  acts->block_inputs.clear();

  MOE_ASSIGN_OR_RETURN(Tensor h, embed_->forward(acts->inputs));
  MOE_ASSIGN_OR_RETURN(h, embedding_dropout(ctx, h, false));
  MoeState state;
  int moe = 0;
  for (size_t b = 0; b < blocks_.size(); ++b) {
    TensorView block_stats;
    if (blocks_[b]->is_moe() && stats.numel() > 0) {
      block_stats = stats.rows(stats_offsets_[moe], stats_offsets_[moe + 1]);
    }
    // FULL: the block's Saved lives for this iteration only; its input and state are kept.
    TransformerBlock::Saved transient;
    TransformerBlock::Saved* saved = full ? &transient : &acts->blocks[b];
    if (full) acts->block_inputs.push_back({h, state});
    MOE_ASSIGN_OR_RETURN(h, blocks_[b]->forward(ctx, h, &state, saved, block_stats));
    if (blocks_[b]->is_moe()) {
      if (sums.numel() > 0) {
        MOE_RETURN_IF_ERROR(
            kernels::axpy(ctx_, 1.0, saved->moe.aux.rows(2, 3), sums.rows(kAuxLoss, kAuxLoss + 1)));
      }
      if (top1s != nullptr) top1s->push_back(state.top1);
      ++moe;
    }
  }
  if (final_ln_ != nullptr) {
    MOE_ASSIGN_OR_RETURN(h, final_ln_->forward(h, &acts->final_ln));
  }
  acts->h_final = h;
  if (top1s != nullptr) return Status::OK();
  MOE_ASSIGN_OR_RETURN(Tensor scratch, ctx_.zeros({2}, DType::kF64));
  return loss_forward(acts,
                      sums.numel() > 0 ? sums.rows(kLossSum, kLossTokens + 1) : scratch.view());
}

namespace {

// Rows per loss chunk of a micro-batch of n rows.
int64_t loss_chunk_rows(const StepContext& ctx, int64_t n) {
  return ctx.loss_chunk_tokens > 0 ? std::min(n, ctx.loss_chunk_tokens) : n;
}

}  // namespace

Status TransformerLM::loss_forward(Activations* acts, const TensorView& ce_sums) {
  const StepContext& ctx = acts->ctx;
  const int64_t n = acts->h_final.dim(0), chunk = loss_chunk_rows(ctx, n);
  const bool keep = ctx.training && (ctx.recompute == Recompute::kNone || chunk == n);
  MOE_ASSIGN_OR_RETURN(acts->lse, ctx_.empty({n}, compute_dtype(params_->act_dtype())));
  const TensorView targets = acts->targets.view().reshape({n});
  acts->logits.clear();
  for (int64_t r0 = 0; r0 < n; r0 += chunk) {
    const int64_t r1 = std::min(n, r0 + chunk);
    MOE_ASSIGN_OR_RETURN(Tensor logits, head_->forward(acts->h_final.view().rows(r0, r1)));
    MOE_RETURN_IF_ERROR(kernels::cross_entropy_forward(ctx_, logits, targets.rows(r0, r1),
                                                       acts->lse.view().rows(r0, r1), ce_sums));
    if (keep) acts->logits.push_back(std::move(logits));
  }
  return Status::OK();
}

StatusOr<Tensor> TransformerLM::loss_backward(Activations* acts, double ce_scale) {
  const int64_t n = acts->h_final.dim(0), chunk = loss_chunk_rows(acts->ctx, n);
  const DType act = params_->act_dtype();
  const bool in_place = compute_dtype(act) == act;  // the gradient over the logits
  const TensorView targets = acts->targets.view().reshape({n});
  MOE_ASSIGN_OR_RETURN(Tensor dh, ctx_.empty({n, cfg_.d_model}, act));
  const bool kept = !acts->logits.empty();
  for (int64_t r0 = 0, c = 0; r0 < n; r0 += chunk, ++c) {
    const int64_t r1 = std::min(n, r0 + chunk);
    const TensorView h = acts->h_final.view().rows(r0, r1);
    Tensor logits, d_logits;
    if (kept) {
      logits = std::move(acts->logits[c]);  // freed with this chunk
    } else {
      MOE_ASSIGN_OR_RETURN(logits, head_->forward(h));
    }
    if (!in_place) {
      MOE_ASSIGN_OR_RETURN(d_logits, ctx_.empty(logits.shape(), act));
    }
    const TensorView dl = in_place ? logits.view() : d_logits.view();
    MOE_RETURN_IF_ERROR(kernels::cross_entropy_backward(
        ctx_, logits, targets.rows(r0, r1), acts->lse.view().rows(r0, r1), ce_scale, dl));
    MOE_RETURN_IF_ERROR(head_->backward_into(h, dl, dh.view().rows(r0, r1)));
  }
  acts->logits.clear();
  return dh;
}

Status TransformerLM::forward(const TensorView& inputs, const TensorView& targets,
                              const StepContext& ctx, Activations* acts, const TensorView& sums,
                              const TensorView& stats) {
  return forward_impl(inputs, targets, ctx, acts, sums, stats, nullptr);
}

Status TransformerLM::backward(Activations* acts, double ce_scale, double aux_scale) {
  MOE_ASSIGN_OR_RETURN(Tensor dh, loss_backward(acts, ce_scale));
  acts->h_final = Tensor();
  if (final_ln_ != nullptr) {
    MOE_ASSIGN_OR_RETURN(dh, final_ln_->backward(dh, acts->final_ln));
    acts->final_ln = LayerNorm::Saved();
  }
  MoeStateGrad state_grad;
  const bool full = !acts->block_inputs.empty();
  for (size_t b = blocks_.size(); b-- > 0;) {
    TransformerBlock::Saved replayed;  // FULL: this block's only, freed before the next
    if (full) MOE_RETURN_IF_ERROR(replay_block(*acts, b, &replayed));
    MOE_ASSIGN_OR_RETURN(dh, blocks_[b]->backward(acts->ctx, full ? replayed : acts->blocks[b],
                                                  aux_scale, dh, &state_grad));
    if (full) {
      acts->block_inputs[b] = BlockInput();
    } else {
      acts->blocks[b] = TransformerBlock::Saved();
    }
  }
  MOE_ASSIGN_OR_RETURN(dh, embedding_dropout(acts->ctx, dh, true));
  return embed_->backward(acts->inputs, dh);
}

Status TransformerLM::replay_block(const Activations& acts, size_t b,
                                   TransformerBlock::Saved* saved) {
  StepContext replay = acts.ctx;
  replay.replay = true;
  MoeState state = acts.block_inputs[b].state;  // the block updates its own copy
  // No statistics block, and the aux losses in saved->moe.aux are not added to the sums again.
  return blocks_[b]->forward(replay, acts.block_inputs[b].h, &state, saved, {}).status();
}

Status TransformerLM::evaluate(const TensorView& inputs, const TensorView& targets,
                               const StepContext& ctx, const TensorView& sums,
                               const TensorView& stats, std::vector<RoutingDecisions>* routing) {
  StepContext eval = ctx;
  eval.training = false;
  Activations acts;
  MOE_RETURN_IF_ERROR(forward_impl(inputs, targets, eval, &acts, sums, stats, nullptr));
  if (routing == nullptr) return Status::OK();
  for (size_t b = 0; b < blocks_.size(); ++b) {
    if (!blocks_[b]->is_moe()) continue;
    const MoeLayerSaved& saved = acts.blocks[b].moe;
    routing->push_back({saved.router.idx, saved.plan.slot, saved.router.mask});
  }
  return Status::OK();
}

StatusOr<Tensor> TransformerLM::logits(const TensorView& inputs, const StepContext& ctx) {
  StepContext eval = ctx;
  eval.training = false;
  Activations acts;
  // Given a list of the MoE layers' routing, forward_impl stops before the head and the loss
  // (inputs stand in for the unused targets).
  std::vector<Tensor> unused_top1s;
  MOE_RETURN_IF_ERROR(forward_impl(inputs, inputs, eval, &acts, {}, {}, &unused_top1s));
  return head_->forward(acts.h_final);
}

StatusOr<std::vector<Tensor>> TransformerLM::route_probe(const TensorView& inputs,
                                                         const StepContext& ctx) {
  StepContext eval = ctx;
  eval.training = false;
  eval.training_capacity = true;
  Activations acts;
  std::vector<Tensor> top1s;
  MOE_RETURN_IF_ERROR(forward_impl(inputs, inputs, eval, &acts, {}, {}, &top1s));
  return top1s;
}

}  // namespace moe
