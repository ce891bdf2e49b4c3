// Data movement of the MoE layer: row gathers into capacity/expert buffers, the deterministic
// scatter-add that is their backward, and the gate-weighted combine with its backward.
// No atomics: every accumulation runs in a fixed order, so outputs are bit-reproducible.
#pragma once

#include "core/base/device.h"
#include "core/base/tensor.h"

namespace moe::kernels {

// dst[i, :] = src[index[i], :], or zeros where index[i] < 0 (empty capacity slot).
//   src [N, D]; index [M] i32; dst [M, D] (overwritten). Any dtype.
Status gather_rows(const TensorView& src, const TensorView& index, const TensorView& dst,
                   Stream stream = {});
// dst[index[i], :] += src[i, :] for i = 0, 1, ... in order, skipping index[i] < 0.
//   src [M, D]; index [M] i32; dst [N, D] (accumulated). Float dtypes.
Status scatter_add_rows(const TensorView& src, const TensorView& index, const TensorView& dst,
                        Stream stream = {});

// u[t, :] = sum_k gate[t, k] * (omega ⊙ y[row[t, k], :]), summed in k order; rows < 0 (dropped)
// contribute nothing. omega [D] may be empty (all ones).
//   y [M, D]; row [T, K] i32; gate [T, K]; u [T, D] (overwritten).
Status combine(const TensorView& y, const TensorView& row, const TensorView& gate,
               const TensorView& omega, const TensorView& u, Stream stream = {});
// Backward of combine:
//   dy[row[t, k], :] = gate[t, k] * omega ⊙ du[t, :]   (overwritten; unreferenced rows zeroed)
//   d_gate[t, k] = <du[t, :], omega ⊙ y[row[t, k], :]>   (overwritten; 0 for dropped slots)
//   d_omega += sum_{t, k} gate[t, k] * y[row[t, k], :] ⊙ du[t, :]   (accumulated, if given)
Status combine_backward(const TensorView& du, const TensorView& y, const TensorView& row,
                        const TensorView& gate, const TensorView& omega, const TensorView& dy,
                        const TensorView& d_gate, const TensorView& d_omega, Stream stream = {});

}  // namespace moe::kernels
