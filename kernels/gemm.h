// Matrix products on views: cuBLAS on the GPU (CUDA backend), CBLAS on the host.
//
// All matrices are row-major. `trans_x` means the stored matrix is the transpose of the operand.
// Outputs are C = alpha * op(A) op(B) + beta * C: beta = 0 overwrites, beta = 1 accumulates.
#pragma once

#include "core/base/device.h"
#include "core/base/tensor.h"

namespace moe::kernels {

// a: [M, K] or [K, M] (trans_a); b: [K, N] or [N, K] (trans_b); c: [M, N]. One float dtype.
Status gemm(const TensorView& a, bool trans_a, const TensorView& b, bool trans_b,
            const TensorView& c, double alpha = 1.0, double beta = 0.0, Stream stream = {});

// Grouped product over G groups of rows, the shape of expert computation:
//   for g in [0, G): c[offsets[g]:offsets[g+1], :] = alpha * a[rows of g] op(b[g]) + beta * c[...]
// a: [M_total, K]; b: [G, K, N] (or [G, N, K] with trans_b); c: [M_total, N];
// offsets: G+1 row offsets, non-decreasing, offsets[0] = 0, offsets[G] = M_total.
Status grouped_gemm(const TensorView& a, const TensorView& b, bool trans_b, const TensorView& c,
                    const std::vector<int64_t>& offsets, double alpha = 1.0, double beta = 0.0,
                    Stream stream = {});

// Grouped weight gradient: for each g, c[g] = alpha * a[rows of g]^T d[rows of g] + beta * c[g].
// a: [M_total, K]; d: [M_total, N]; c: [G, K, N].
Status grouped_gemm_wgrad(const TensorView& a, const TensorView& d, const TensorView& c,
                          const std::vector<int64_t>& offsets, double alpha = 1.0,
                          double beta = 0.0, Stream stream = {});

}  // namespace moe::kernels
