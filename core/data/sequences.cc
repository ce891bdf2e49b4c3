#include "core/data/sequences.h"

#include <algorithm>

#include "base/check.h"
#include "core/data/dataset.h"

namespace moe::data {

StatusOr<int64_t> count_sequences(int64_t num_tokens, int64_t seq_len, const std::string& source) {
  if (seq_len < 1) {
    return invalid_argument_error("sequence length S = ", seq_len, " must be >= 1 (for ", source,
                                  ")");
  }
  if (num_tokens < seq_len + 1) {
    return invalid_argument_error(source, " has ", num_tokens,
                                  " tokens, fewer than sequence length S + 1 = ", seq_len + 1,
                                  " (S = ", seq_len, ")");
  }
  return (num_tokens - 1) / seq_len;
}

StatusOr<SequenceSet> SequenceSet::create(const TokenSplit& split, int64_t seq_len) {
  const std::string source =
      split.source.empty() ? str_cat("the ", split.name, " split") : split.source;
  MOE_ASSIGN_OR_RETURN(const int64_t n, count_sequences(split.size(), seq_len, source));
  SequenceSet set;
  set.tokens_ = split.ids.data();
  set.shards_ = split.shards;
  if (split.stats.words > 0) {
    set.tokens_per_word_ =
        static_cast<double>(split.size()) / static_cast<double>(split.stats.words);
  }
  if (split.stats.words > 0 || split.stats.bytes > 0) {
    set.unknown_fraction_ =
        static_cast<double>(split.stats.unknown) / static_cast<double>(split.size());
  }
  if (split.stats.bytes > 0) {
    set.tokens_per_byte_ =
        static_cast<double>(split.size()) / static_cast<double>(split.stats.bytes);
  }
  set.num_tokens_ = split.size();
  set.seq_len_ = seq_len;
  set.num_sequences_ = n;
  set.source_ = source;
  return set;
}

StatusOr<std::vector<int32_t>> SequenceSet::leading_tokens(int64_t sequences) const {
  if (sequences < 1 || sequences > num_sequences_) {
    return invalid_argument_error("SequenceSet::leading_tokens: ", sequences,
                                  " sequences, outside [1, ", num_sequences_, "] for ", source_);
  }
  const int64_t n = sequences * seq_len_ + 1;
  if (shards_ == nullptr) return std::vector<int32_t>(tokens_, tokens_ + n);
  std::vector<int32_t> out(static_cast<size_t>(n));
  MOE_RETURN_IF_ERROR(shards_->read(0, n, out.data()));
  return out;
}

Status SequenceSet::fill(const std::vector<int64_t>& ids, const TensorView& inputs,
                         const TensorView& targets) const {
  const int64_t b = static_cast<int64_t>(ids.size());
  const Shape want{b, seq_len_};
  for (const auto& [name, view] :
       {std::pair<const char*, const TensorView*>{"inputs", &inputs}, {"targets", &targets}}) {
    if (view->dtype() != DType::kI32 || view->shape() != want || !view->is_host()) {
      return invalid_argument_error("SequenceSet::fill: ", name, " is ", view->to_string(),
                                    ", expected i32", want.to_string(), "@host");
    }
  }
  int32_t* in = inputs.data<int32_t>();
  int32_t* out = targets.data<int32_t>();
  std::vector<int32_t> buffer(shards_ != nullptr ? static_cast<size_t>(seq_len_ + 1) : 0);
  for (int64_t r = 0; r < b; ++r) {
    const int64_t id = ids[static_cast<size_t>(r)];
    if (id < 0 || id >= num_sequences_) {
      return invalid_argument_error("SequenceSet::fill: sequence id ", id, " outside [0, ",
                                    num_sequences_, ") for ", source_);
    }
    const int32_t* seq = tokens_ + id * seq_len_;  // [S + 1]
    if (shards_ != nullptr) {
      MOE_RETURN_IF_ERROR(shards_->read(id * seq_len_, seq_len_ + 1, buffer.data()));
      seq = buffer.data();
    }
    for (int64_t t = 0; t < seq_len_; ++t) {
      in[r * seq_len_ + t] = seq[t];
      out[r * seq_len_ + t] = seq[t + 1];
    }
  }
  return Status::OK();
}

int64_t num_eval_batches(int64_t num_sequences, int64_t batch) {
  MOE_CHECK(batch >= 1 && num_sequences >= 0, "num_eval_batches(", num_sequences, ", ", batch, ")");
  return (num_sequences + batch - 1) / batch;
}

std::vector<int64_t> eval_batch_ids(int64_t num_sequences, int64_t batch, int64_t b) {
  MOE_CHECK(b >= 0 && b < num_eval_batches(num_sequences, batch), "eval batch ", b, " of ",
            num_eval_batches(num_sequences, batch));
  const int64_t begin = b * batch;
  const int64_t end = std::min(begin + batch, num_sequences);
  std::vector<int64_t> ids;
  ids.reserve(static_cast<size_t>(end - begin));
  for (int64_t i = begin; i < end; ++i) ids.push_back(i);
  return ids;
}

}  // namespace moe::data
