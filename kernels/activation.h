// Elementwise activations, bias addition and dropout on row blocks. "Grouped" ops take G+1 row
// offsets so that one call covers every local expert (group g owns rows offsets[g]..offsets[g+1]).
#pragma once

#include <vector>

#include "core/base/device.h"
#include "core/base/rng.h"
#include "core/base/tensor.h"

namespace moe::kernels {

enum class Activation {
  kRelu,      // max(x, 0); derivative 0 at x = 0
  kGelu,      // x * Phi(x), the exact (erf) form
  kGeluTanh,  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), GPT-2's approximation
};
const char* activation_name(Activation act);

// y = act(x). x, y: same shape and float dtype; y may alias x.
Status activation_forward(Activation act, const TensorView& x, const TensorView& y,
                          Stream stream = {});
// dx = act'(x) * dy, where x is the pre-activation input. dx may alias dy. Overwrites dx.
Status activation_backward(Activation act, const TensorView& x, const TensorView& dy,
                           const TensorView& dx, Stream stream = {});

// x[rows of g, :] += bias[g, :]. x: [M, N]; bias: [G, N]; in place.
Status add_bias_grouped(const TensorView& x, const TensorView& bias,
                        const std::vector<int64_t>& offsets, Stream stream = {});
// dbias[g, :] += sum over rows of g of dy[row, :]. Accumulates.
Status bias_grad_grouped(const TensorView& dy, const TensorView& dbias,
                         const std::vector<int64_t>& offsets, Stream stream = {});

// Inverted dropout with a counter-based mask: keep(r, j) = u >= p, u the 24-bit uniform from lane
// j % 4 of rng.block(key(r) * ceil(N / 4) + j / 4) (four elements per Philox draw),
// y = keep ? x / (1 - p) : 0. key(r) = row_keys[r] (i64 [M]) when given, else r. Keying rows by a
// global token id makes the mask independent of where the row sits in a buffer (EP layout).
// x, y: [M, N] (y may alias x). p in [0, 1).
Status dropout_forward(const TensorView& x, const TensorView& row_keys, CounterRng rng, float p,
                       const TensorView& y, Stream stream = {});
// dx = keep ? dy / (1 - p) : 0, redrawing the same mask. dx may alias dy.
Status dropout_backward(const TensorView& dy, const TensorView& row_keys, CounterRng rng, float p,
                        const TensorView& dx, Stream stream = {});

}  // namespace moe::kernels
