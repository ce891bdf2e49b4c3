// Softmax cross-entropy over a vocabulary, with log-sum-exp stabilisation.
#pragma once

#include "core/base/device.h"
#include "core/base/tensor.h"

namespace moe::kernels {

struct CrossEntropyResult {
  double loss_sum = 0;  // sum over counted rows of -log softmax(logits)[target]
  int64_t count = 0;    // rows with target >= 0
};

// logits [N, V]; targets i32 [N] (-1 = ignored, otherwise in [0, V)). lse [N] (optional, same
// dtype as logits) receives each row's logsumexp for the backward.
StatusOr<CrossEntropyResult> cross_entropy_forward(const TensorView& logits,
                                                   const TensorView& targets,
                                                   const TensorView& lse = {});
// d_logits = scale * (softmax(logits) - onehot(target)) for counted rows, 0 for ignored rows,
// with softmax = exp(logits - lse) from the forward's lse. Overwrites d_logits (may alias
// logits). For the gradient of the mean loss use scale = 1 / count.
Status cross_entropy_backward(const TensorView& logits, const TensorView& targets,
                              const TensorView& lse, double scale, const TensorView& d_logits,
                              Stream stream = {});

}  // namespace moe::kernels
