// The training step (Trainer::step): the batch staged on the host, the device work (recorded as
// a CUDA graph under train.cuda_graphs: step_graph.h), the one read back, the statistics and the
// update. The rest of the Trainer is in trainer.cc.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>

#include "base/logging.h"
#include "base/process_memory.h"
#include "core/train/grad_sync.h"
#include "core/train/trainer.h"
#include "kernels/moe_stats.h"

namespace moe {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

StatusOr<int64_t> Trainer::probe_flips(const TensorView& flips) {
  const TrainConfig& t = cfg_.train;
  if (t.probe_every <= 0 || model_->num_moe_layers() == 0) return 0;
  if (steps_done() % t.probe_every != 0) return 0;
  // The probe: the first probe_sequences validation (else training) sequences, the same on
  // every rank, routed in evaluation mode.
  const data::SequenceSet& set = data_->valid ? *data_->valid : *data_->train;
  const int64_t n = std::min<int64_t>(t.probe_sequences, set.size());
  std::vector<int64_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = i;
  Tensor inputs = Tensor::empty({n, cfg_.model.seq_len}, DType::kI32);
  Tensor targets = Tensor::empty({n, cfg_.model.seq_len}, DType::kI32);
  MOE_RETURN_IF_ERROR(set.fill(ids, inputs, targets));
  StepContext ctx;
  ctx.batch = n;
  ctx.seq_len = cfg_.model.seq_len;
  ctx.seed = t.seed;
  ctx.stats_comm = world_;
  MOE_ASSIGN_OR_RETURN(std::vector<Tensor> top1s, model_->route_probe(inputs, ctx));
  if (previous_probe_.size() == top1s.size()) {
    for (size_t l = 0; l < top1s.size(); ++l) {
      MOE_RETURN_IF_ERROR(
          kernels::count_mismatches(*ctx_, top1s[l], previous_probe_[l], flips.rows(l, l + 1)));
    }
  }
  previous_probe_ = std::move(top1s);
  return n * cfg_.model.seq_len;
}

StatusOr<StepStatsInfo> Trainer::step() {
  if (!watchdog_) return step_impl();
  watchdog_->arm(str_cat("step ", steps_done()));
  StatusOr<StepStatsInfo> r = step_impl();
  watchdog_->disarm();
  return r;
}

StatusOr<StepStatsInfo> Trainer::step_impl() {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t step = steps_done();
  start_step_memory();
  const StepBuffer slots(model_->num_moe_layers());
  MOE_RETURN_IF_ERROR(ctx_->zero(step_buffer_));
  MOE_ASSIGN_OR_RETURN(const int64_t probe_tokens, probe_flips(slots.flips(step_buffer_)));

  // The step's phases are timed from here (the probe above and evaluations are not part of them).
  struct TimerOnContext {
    Context* ctx;
    ~TimerOnContext() { ctx->set_phase_timer(nullptr); }
  } timer_on_context{ctx_.get()};
  ctx_->set_phase_timer(phase_timer_.get());
  scheduler_batch_ = scheduler_->next();
  MOE_RETURN_IF_ERROR(run_device_work(step, slots));
  MOE_RETURN_IF_ERROR(share_step_buffer(slots));
  MOE_ASSIGN_OR_RETURN(Tensor host, ctx_->read_back(step_buffer_));  // the step's one wait
  std::vector<double> flips;
  StepStatsInfo stats = read_step_stats(step, slots, host.data<double>(), probe_tokens, &flips);
  MOE_RETURN_IF_ERROR(apply_update(stats));
  // Never waits: on a GPU, phases the stream has not reached yet (the optimizer) come with a
  // later step. Timing never fails a step (the update is applied already): a timing error is
  // logged once and the step's record has no phases.
  if (StatusOr<PhaseSecondsArray> phases = phase_timer_->collect(); phases.ok()) {
    stats.phases = *phases;
  } else if (!phase_timing_failed_) {
    phase_timing_failed_ = true;
    log_warning(phases.status().to_string(), " (steps are not timed by phase from here)");
  }
  record_step_memory(&stats);
  stats.step_seconds = seconds_since(t0);
  stats.tokens_per_second = static_cast<double>(stats.tokens) / std::max(1e-9, stats.step_seconds);
  coordinator_->set_evaluation_eta(evaluation_eta(stats.step, stats.step_seconds));
  return coordinator_->report_step(stats, flips, cfg_.train.steps);
}

void Trainer::start_step_memory() {
  ctx_->allocator().reset_peak();
  const bool ranks_are_threads =
      world_ != nullptr && world_->world_size() > 1 && world_->ranks_are_threads();
  if (resident_peak_resets_ && !ranks_are_threads) resident_peak_resets_ = reset_resident_peak();
}

void Trainer::record_step_memory(StepStatsInfo* stats) const {
  // The allocator's counters are host-side: reading them never waits for the device.
  size_t peak = ctx_->allocator().stats().peak_bytes_in_use;
  // A replayed step allocates the recording's memory without the allocator seeing it.
  if (step_graph_ != nullptr && step_graph_->replayed_last()) {
    peak = std::max(peak, step_graph_->recorded_peak_bytes());
  }
  stats->peak_tensor_bytes = static_cast<int64_t>(peak);
  if (const int64_t rss = resident_peak_bytes(); rss >= 0) stats->peak_rss_bytes = rss;
}

double Trainer::loss_share() const {
  const TrainConfig& t = cfg_.train;
  const int ranks = world_ == nullptr ? 1 : world_->world_size();
  // The objective is the mean over the global batch: each micro-batch's share, on each rank.
  const double scale = 1.0 / static_cast<double>(ranks * t.grad_accum);
  return scale;
}

StatusOr<double> Trainer::stage_micro_batch(int64_t a) {
  const auto data_start = std::chrono::steady_clock::now();
  const int ranks = world_ == nullptr ? 1 : world_->world_size();
  const int rank = world_ == nullptr ? 0 : world_->rank();
  const int64_t micro = cfg_.train.micro_batch(), m = micro_batch_per_rank_;
  const std::vector<int64_t> micro_ids(scheduler_batch_.begin() + a * micro,
                                       scheduler_batch_.begin() + (a + 1) * micro);
  MOE_ASSIGN_OR_RETURN(std::vector<int64_t> mine, data::split_for_rank(micro_ids, ranks, rank));
  const Tensor inputs = batch_inputs_.rows(a * m, (a + 1) * m);
  const Tensor targets = batch_targets_.rows(a * m, (a + 1) * m);
  MOE_RETURN_IF_ERROR(data_->train->fill(mine, inputs, targets));
  // The loss is the mean over this micro-batch's counted targets (host data, counted here).
  int64_t counted = 0;
  for (int64_t i = 0; i < targets.numel(); ++i) counted += targets.data<int32_t>()[i] >= 0;
  phase_timer_->add_host_seconds(Phase::kData, seconds_since(data_start));
  return counted > 0 ? loss_share() / static_cast<double>(counted) : 0.0;
}

Status Trainer::run_device_work(int64_t step, const StepBuffer& slots) {
  // The step's random keys (device_work copies them to the device first).
  step_keys_staged_.data<int64_t>()[0] = step;
  step_keys_staged_.data<int64_t>()[1] = step * cfg_.train.batch_size;
  if (step_graph_ == nullptr) {
    // Each micro-batch staged right before its forward: the host reads the next one while the
    // device computes this one.
    return device_work(step, slots, [this](int64_t a) { return stage_micro_batch(a); });
  }
  // A graph's key is the whole batch's loss scales: every micro-batch staged first.
  std::vector<double> scales(cfg_.train.grad_accum);
  for (int64_t a = 0; a < cfg_.train.grad_accum; ++a) {
    MOE_ASSIGN_OR_RETURN(scales[a], stage_micro_batch(a));
  }
  const auto work = [&] {
    return device_work(step, slots, [&](int64_t a) -> StatusOr<double> { return scales[a]; });
  };
  // A recorded or replayed step is one launch: its phases are not timed (step_graph.h).
  if (!step_graph_->runs_eagerly(scales)) ctx_->set_phase_timer(nullptr);
  const Status done = step_graph_->run(*ctx_, scales, work);
  ctx_->set_phase_timer(phase_timer_.get());
  return done;
}

Status Trainer::device_work(int64_t step, const StepBuffer& slots,
                            const std::function<StatusOr<double>(int64_t)>& stage) {
  const TrainConfig& t = cfg_.train;
  const int rank = world_ == nullptr ? 0 : world_->rank();
  const int64_t m = micro_batch_per_rank_;
  MOE_RETURN_IF_ERROR(ctx_->copy(step_keys_staged_, step_keys_));
  MOE_RETURN_IF_ERROR(model_->params().zero_grads());
  for (int64_t a = 0; a < t.grad_accum; ++a) {
    MOE_ASSIGN_OR_RETURN(const double ce_scale, stage(a));
    StepContext ctx;
    ctx.batch = m;
    ctx.seq_len = cfg_.model.seq_len;
    // The sequence's position in the global step order keys every random draw: the step's part
    // (its first sequence, step x batch_size) and the step itself come from the device, so that
    // a recorded step replays with the current ones (or from the host: host_step_keys).
    ctx.sequence_offset = a * t.micro_batch() + rank * m;
    if (opts_.host_step_keys) {
      ctx.sequence_offset += step * t.batch_size;
      ctx.step = step;
    } else {
      ctx.device_step = device_step_;
    }
    ctx.seed = t.seed;
    ctx.training = true;
    ctx.stats_comm = world_;
    ctx.recompute = t.recompute;
    ctx.loss_chunk_tokens = t.loss_chunk_tokens;
    TransformerLM::Activations acts;
    {
      ScopedPhase phase(*ctx_, Phase::kForward);
      MOE_RETURN_IF_ERROR(model_->forward(
          batch_inputs_.rows(a * m, (a + 1) * m), batch_targets_.rows(a * m, (a + 1) * m), ctx,
          &acts, slots.loss_sums(step_buffer_), slots.stats(step_buffer_)));
    }
    ScopedPhase phase(*ctx_, Phase::kBackward);
    MOE_RETURN_IF_ERROR(model_->backward(&acts, ce_scale, loss_share()));
  }
  ScopedPhase phase(*ctx_, Phase::kGradSync);
  MOE_RETURN_IF_ERROR(reduce_gradients(
      &model_->params(), world_, has_groups_ ? groups_.dp.get() : nullptr, optimizer_->sharding()));
  return gradient_squares(&model_->params(), optimizer_->sharding(),
                          step_buffer_.view().rows(StepBuffer::kGradSq, StepBuffer::kGradSq + 2));
}

Status Trainer::share_step_buffer(const StepBuffer& slots) {
  ScopedPhase phase(*ctx_, Phase::kGradSync);
  const TensorView b = step_buffer_.view();
  using S = StepBuffer;
  // Every rank must agree on skipping: the global loss and the global norm decide. Expert shards
  // count once per EP group; dense gradients are already identical everywhere.
  // A stop request rides on the same reduction: the sum counts the ranks that were asked.
  if (opts_.stop_requested) stop_local_ = opts_.stop_requested();
  // So does a checkpoint by time, on rank 0's clock alone (ranks' clocks differ).
  const double minutes = cfg_.train.checkpoint_minutes;
  const bool save = (world_ == nullptr || world_->rank() == 0) && minutes > 0 &&
                    seconds_since(last_save_time_) >= 60 * minutes;
  // Staging memory, as the batch's: the host writes it again only after the step's sync.
  step_flags_.data<double>()[0] = stop_local_ != 0 ? 1.0 : 0.0;
  step_flags_.data<double>()[1] = save ? 1.0 : 0.0;
  MOE_RETURN_IF_ERROR(ctx_->copy(step_flags_, b.rows(S::kStop, S::kSave + 1)));
  MOE_RETURN_IF_ERROR(
      ctx_->copy(b.rows(S::kLoss, S::kLoss + 1), b.rows(S::kGlobalLoss, S::kGlobalLoss + 1)));
  if (world_ != nullptr && world_->world_size() > 1) {
    const TensorView global = b.rows(S::kGlobalLoss, S::kSave + 1);
    MOE_RETURN_IF_ERROR(world_->all_reduce(global, global, comm::ReduceOp::kSum, ctx_->stream()));
  }
  if (has_groups_ && groups_.ep->world_size() > 1) {
    const TensorView expert = b.rows(S::kGradSq + 1, S::kGradSq + 2);
    MOE_RETURN_IF_ERROR(
        groups_.ep->all_reduce(expert, expert, comm::ReduceOp::kSum, ctx_->stream()));
  }
  return Status::OK();
}

StepStatsInfo Trainer::read_step_stats(int64_t step, const StepBuffer& slots, const double* v,
                                       int64_t probe_tokens, std::vector<double>* flips) {
  using S = StepBuffer;
  const int layers = model_->num_moe_layers();
  StepStatsInfo stats;
  stats.step = step + 1;  // steps done once this one is (README, "One step numbering")
  stats.rank = world_ == nullptr ? 0 : world_->rank();
  stats.learning_rate = cfg_.train.learning_rate(step);
  stats.tokens = static_cast<int64_t>(std::llround(v[S::kLoss + TransformerLM::kLossTokens]));
  stats.loss = stats.tokens > 0
                   ? v[S::kLoss + TransformerLM::kLossSum] / static_cast<double>(stats.tokens)
                   : 0.0;
  stats.aux_loss =
      v[S::kLoss + TransformerLM::kAuxLoss] / static_cast<double>(cfg_.train.grad_accum);
  stats.grad_norm = std::sqrt(v[S::kGradSq] + v[S::kGradSq + 1]);
  stop_agreed_ = v[S::kStop] > 0;
  save_due_ = v[S::kSave] > 0;
  stats.skipped = !std::isfinite(v[S::kGlobalLoss]) || !std::isfinite(stats.grad_norm);
  stats.layers.resize(layers);
  for (int l = 0; l < layers; ++l) {
    RouterStatsInfo& info = stats.layers[l];
    RouterStatsLayout(model_->moe_experts(l))
        .read(v + slots.stats_at + model_->stats_offset(l), &info);
    info.moe_index = l;
  }
  int moe = 0;
  for (const auto& b : model_->blocks()) {
    if (b->is_moe()) stats.layers[moe++].block = b->moe()->block();
  }
  if (probe_tokens > 0) {
    for (int l = 0; l < layers; ++l) {
      flips->push_back(v[S::kFlips + l] / static_cast<double>(probe_tokens));
    }
  }
  return stats;
}

Status Trainer::apply_update(const StepStatsInfo& stats) {
  skipped_streak_ = stats.skipped ? skipped_streak_ + 1 : 0;
  // Loss-free balancing's biases move after every applied step (identically on every rank: the
  // loads are global); a skipped step's loads are forgotten.
  if (stats.skipped) return model_->update_score_biases(false);
  const double clip = cfg_.train.grad_clip, norm = stats.grad_norm;
  const double grad_scale = (clip > 0 && norm > clip) ? clip / norm : 1.0;
  ScopedPhase phase(*ctx_, Phase::kOptimizer);
  MOE_RETURN_IF_ERROR(model_->update_score_biases(true));
  MOE_RETURN_IF_ERROR(optimizer_->step(stats.learning_rate, updates_, grad_scale));
  ++updates_;
  return Status::OK();
}

}  // namespace moe
