// Softmax cross-entropy over a vocabulary: loss_n = lse_n - logits[n, t_n], with
// lse_n = logsumexp(logits[n, :]) taken after subtracting the row maximum (exponentials in the
// working precision, sums in double), so large logits do not overflow. Rows whose target is -1
// are ignored (no loss, zero gradient). The forward can save each row's lse so that the backward
// does not recompute it.
#pragma once

#include "core/base/device.h"
#include "core/base/tensor.h"

namespace moe::kernels {

struct CrossEntropyResult {
  double loss_sum = 0;  // sum over counted rows of -log softmax(logits)[target]
  int64_t count = 0;    // rows with target >= 0
  // The mean over counted rows (0 when no row counts).
  double mean() const { return count > 0 ? loss_sum / static_cast<double>(count) : 0.0; }
};

// [in] logits [N, V] (f32|f64); [in] targets i32 [N], each -1 (ignored) or in [0, V).
// [out, optional] lse [N]: each counted row's logsumexp, 0 for ignored rows (for the backward).
// [out, optional] row_loss [N]: each row's loss, 0 for ignored rows.
// Optional outputs have logits' dtype and are skipped when passed as empty views.
StatusOr<CrossEntropyResult> cross_entropy_forward(const TensorView& logits,
                                                   const TensorView& targets,
                                                   const TensorView& lse = {},
                                                   const TensorView& row_loss = {});
// d_logits = scale * (softmax(logits) - onehot(target)) for counted rows, 0 for ignored rows,
// with softmax = exp(logits - lse) from the forward's lse [N].
// [out] d_logits [N, V], overwritten (may alias logits). For the gradient of the mean loss pass
// scale = 1 / count (CrossEntropyResult::count).
Status cross_entropy_backward(const TensorView& logits, const TensorView& targets,
                              const TensorView& lse, double scale, const TensorView& d_logits,
                              Stream stream = {});

}  // namespace moe::kernels
