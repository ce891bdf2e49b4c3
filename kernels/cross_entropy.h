// Softmax cross-entropy over a vocabulary: loss_n = lse_n - logits[n, t_n], with
// lse_n = logsumexp(logits[n, :]) taken after subtracting the row maximum (exponentials in the
// working precision, sums in double), so large logits do not overflow. Rows whose target is -1
// are ignored (no loss, zero gradient). Logits are F (f32, or f64 in gradient tests): the loss is
// always full precision. The forward saves each row's lse so that the backward does not
// recompute it, and adds its sums into device accumulators (no host value).
#pragma once

#include "base/context.h"
#include "base/tensor.h"

namespace moe::kernels {

// [in] logits [N, V] F; [in] targets i32 [N], each -1 (ignored) or in [0, V).
// [out] lse [N] F: each counted row's logsumexp, 0 for ignored rows.
// [in,out] sums f64 [2]: sums[0] += the loss over counted rows, sums[1] += the counted rows.
// [out, optional] row_loss [N] F: each row's loss, 0 for ignored rows (skipped when empty).
// A target outside [-1, V) is kInvalidArgument naming it (nothing written).
Status cross_entropy_forward(Context& ctx, const TensorView& logits, const TensorView& targets,
                             const TensorView& lse, const TensorView& sums,
                             const TensorView& row_loss = {});
// d_logits = scale * (softmax(logits) - onehot(target)) for counted rows, 0 for ignored rows,
// with softmax = exp(logits - lse) from the forward's lse [N].
// [out] d_logits [N, V] act (the dtype of the head's activations; may alias logits when it has
// their dtype), overwritten. For the gradient of the mean loss pass scale = 1 / counted rows.
Status cross_entropy_backward(Context& ctx, const TensorView& logits, const TensorView& targets,
                              const TensorView& lse, double scale, const TensorView& d_logits);

}  // namespace moe::kernels
