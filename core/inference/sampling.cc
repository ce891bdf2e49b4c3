#include "core/inference/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace moe {

Status validate(const SamplingOptions& options) {
  if (!(options.temperature >= 0.0 && std::isfinite(options.temperature))) {
    return invalid_argument_error("--temperature ", options.temperature,
                                  " must be >= 0 (0: greedy)");
  }
  if (options.top_k < 0) {
    return invalid_argument_error("--top-k ", options.top_k, " must be >= 0 (0: off)");
  }
  if (!(options.top_p > 0.0 && options.top_p <= 1.0)) {
    return invalid_argument_error("--top-p ", options.top_p, " must be in (0, 1] (1: off)");
  }
  return Status::OK();
}

StatusOr<int32_t> sample_token(const std::vector<double>& logits, const SamplingOptions& options,
                               double u) {
  if (logits.empty()) return invalid_argument_error("sample_token: no logits");
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!std::isfinite(logits[i])) {
      return data_loss_error("the logit of token ", i, " is ", logits[i],
                             ": the checkpoint's weights are not finite (did training diverge?)");
    }
  }
  // Highest logit first, ties by lowest id: a total order, so the result is the same everywhere.
  const auto before = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  const int64_t v = static_cast<int64_t>(logits.size());
  if (options.temperature == 0.0 || options.top_k == 1) {
    int32_t best = 0;
    for (int32_t i = 1; i < v; ++i) {
      if (before(i, best)) best = i;
    }
    return best;
  }
  std::vector<int32_t> order(static_cast<size_t>(v));
  std::iota(order.begin(), order.end(), 0);
  const int64_t keep = options.top_k > 0 ? std::min(options.top_k, v) : v;
  std::partial_sort(order.begin(), order.begin() + keep, order.end(), before);
  order.resize(static_cast<size_t>(keep));
  const double max = logits[order[0]];
  std::vector<double> weight(order.size());
  double total = 0.0;
  for (size_t i = 0; i < order.size(); ++i) {
    weight[i] = std::exp((logits[order[i]] - max) / options.temperature);
    total += weight[i];
  }
  size_t kept = order.size();
  if (options.top_p < 1.0) {
    // The shortest prefix whose mass reaches top_p of the total (at least the first id).
    double mass = 0.0;
    for (size_t i = 0; i < order.size(); ++i) {
      mass += weight[i];
      if (mass >= options.top_p * total) {
        kept = i + 1;
        break;
      }
    }
    total = std::accumulate(weight.begin(), weight.begin() + static_cast<int64_t>(kept), 0.0);
  }
  const double target = u * total;
  double cumulative = 0.0;
  for (size_t i = 0; i < kept; ++i) {
    cumulative += weight[i];
    if (cumulative > target) return order[i];
  }
  // u * total rounded up to the total: the last kept token that has any weight.
  for (size_t i = kept; i-- > 0;) {
    if (weight[i] > 0) return order[i];
  }
  return order[0];
}

}  // namespace moe
