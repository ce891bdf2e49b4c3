#include "core/train/evaluator.h"

#include <algorithm>
#include <cmath>

#include "core/data/batch_scheduler.h"

namespace moe {

double EvalResult::perplexity() const { return std::exp(mean_loss()); }

std::optional<double> EvalResult::word_perplexity() const {
  if (!(tokens_per_word > 0)) return std::nullopt;
  return std::exp(mean_loss() * tokens_per_word);
}

std::optional<double> EvalResult::bits_per_byte() const {
  if (!(tokens_per_byte > 0)) return std::nullopt;
  return mean_loss() * tokens_per_byte / std::log(2.0);
}

namespace {

// The <unk> share of the first `sequences` sequences' tokens (-1 without an <unk> id).
StatusOr<double> subset_unknown_fraction(const data::SequenceSet& set, int64_t sequences,
                                         const EvalOptions& options) {
  if (options.unk_id < 0 || sequences < 1) return -1.0;
  MOE_ASSIGN_OR_RETURN(const std::vector<int32_t> tokens, set.leading_tokens(sequences));
  const auto unknown = std::count(tokens.begin(), tokens.end(), options.unk_id);
  return static_cast<double>(unknown) / static_cast<double>(tokens.size());
}

}  // namespace

StatusOr<EvalResult> evaluate_perplexity(TransformerLM* model, const data::SequenceSet& set,
                                         const EvalOptions& options) {
  const int64_t batch = options.batch, max_sequences = options.max_sequences;
  const uint64_t seed = options.seed;
  comm::Communicator* world = options.world;
  const std::function<bool()>& stop = options.stop;
  const std::function<void(int64_t, int64_t)>& progress = options.progress;
  std::vector<RoutingDecisions>* routing = options.routing;
  const int ranks = world == nullptr ? 1 : world->world_size();
  const int rank = world == nullptr ? 0 : world->rank();
  const int64_t total = max_sequences > 0 ? std::min(max_sequences, set.size()) : set.size();
  const int64_t s = set.seq_len();
  const int64_t chunk = batch * ranks;  // sequences per collective round
  Context& ctx = model->context();
  MOE_ASSIGN_OR_RETURN(Tensor sums, ctx.zeros({TransformerLM::kLossSlots}, DType::kF64));
  Tensor inputs = Tensor::empty({batch, s}, DType::kI32);
  Tensor targets = Tensor::empty({batch, s}, DType::kI32);
  for (int64_t start = 0; start < total; start += chunk) {
    if (stop) {
      Tensor asked = Tensor::from_vector<double>({1}, {stop() ? 1.0 : 0.0});
      if (world != nullptr && ranks > 1) {
        MOE_RETURN_IF_ERROR(world->all_reduce(asked, asked, comm::ReduceOp::kSum));
      }
      if (asked.data<double>()[0] > 0) {
        EvalResult stopped;
        stopped.stopped = true;
        return stopped;
      }
    }
    std::vector<int64_t> ids;
    for (int64_t i = start; i < std::min(total, start + chunk); ++i) ids.push_back(i);
    std::vector<int64_t> mine = data::split_balanced_for_rank(ids, ranks, rank);
    const int64_t real = static_cast<int64_t>(mine.size());
    // Pad with copies of sequence 0 whose targets are ignored, so every rank runs a full batch.
    while (static_cast<int64_t>(mine.size()) < batch) mine.push_back(0);
    MOE_RETURN_IF_ERROR(set.fill(mine, inputs, targets));
    for (int64_t i = real * s; i < batch * s; ++i) targets.data<int32_t>()[i] = -1;
    StepContext step;
    step.batch = batch;
    step.seq_len = s;
    step.sequence_offset = start + static_cast<int64_t>(rank) * batch;
    step.seed = seed;
    step.training = false;
    step.stats_comm = world;
    MOE_RETURN_IF_ERROR(model->evaluate(inputs, targets, step, sums, {}, routing));
    if (progress) progress(std::min(total, start + chunk), total);
  }
  if (world != nullptr && ranks > 1) {
    MOE_RETURN_IF_ERROR(world->all_reduce(sums, sums, comm::ReduceOp::kSum, ctx.stream()));
  }
  MOE_ASSIGN_OR_RETURN(Tensor host, ctx.read_back(sums));  // one wait per evaluation
  EvalResult result;
  result.loss_sum = host.data<double>()[TransformerLM::kLossSum];
  result.tokens =
      static_cast<int64_t>(std::llround(host.data<double>()[TransformerLM::kLossTokens]));
  result.tokens_per_word = set.tokens_per_word();
  result.unknown_fraction = set.unknown_fraction();
  result.tokens_per_byte = set.tokens_per_byte();
  result.subset = total < set.size();
  if (result.subset) {
    MOE_ASSIGN_OR_RETURN(result.unknown_fraction, subset_unknown_fraction(set, total, options));
  }
  return result;
}

}  // namespace moe
