#include "core/train/evaluator.h"

#include <algorithm>
#include <cmath>

#include "core/data/batch_scheduler.h"

namespace moe {

double EvalResult::perplexity() const { return std::exp(mean_loss()); }

StatusOr<EvalResult> evaluate_perplexity(TransformerLM* model, const data::SequenceSet& set,
                                         int64_t batch, int64_t max_sequences, uint64_t seed,
                                         comm::Communicator* world) {
  const int ranks = world == nullptr ? 1 : world->world_size();
  const int rank = world == nullptr ? 0 : world->rank();
  const int64_t total = max_sequences > 0 ? std::min(max_sequences, set.size()) : set.size();
  const int64_t s = set.seq_len();
  const int64_t chunk = batch * ranks;  // sequences per collective round
  EvalResult result;
  Tensor inputs = Tensor::empty({batch, s}, DType::kI32);
  Tensor targets = Tensor::empty({batch, s}, DType::kI32);
  for (int64_t start = 0; start < total; start += chunk) {
    std::vector<int64_t> ids;
    for (int64_t i = start; i < std::min(total, start + chunk); ++i) ids.push_back(i);
    std::vector<int64_t> mine = data::split_balanced_for_rank(ids, ranks, rank);
    const int64_t real = static_cast<int64_t>(mine.size());
    // Pad with copies of sequence 0 whose targets are ignored, so every rank runs a full batch.
    while (static_cast<int64_t>(mine.size()) < batch) mine.push_back(0);
    MOE_RETURN_IF_ERROR(set.fill(mine, inputs, targets));
    for (int64_t i = real * s; i < batch * s; ++i) targets.data<int32_t>()[i] = -1;
    StepContext ctx;
    ctx.batch = batch;
    ctx.seq_len = s;
    ctx.sequence_offset = start + static_cast<int64_t>(rank) * batch;
    ctx.seed = seed;
    ctx.training = false;
    ctx.stats_comm = world;
    MOE_ASSIGN_OR_RETURN(LossResult loss, model->evaluate(inputs, targets, ctx, nullptr));
    result.loss_sum += loss.loss_sum;
    result.tokens += loss.tokens;
  }
  if (world != nullptr && ranks > 1) {
    Tensor sums = Tensor::from_vector<double>({2}, {result.loss_sum, static_cast<double>(result.tokens)});
    MOE_RETURN_IF_ERROR(world->all_reduce(sums, sums, comm::ReduceOp::kSum));
    result.loss_sum = sums.data<double>()[0];
    result.tokens = static_cast<int64_t>(std::llround(sums.data<double>()[1]));
  }
  return result;
}

}  // namespace moe
