// Plain C++ elementwise loops (the CPU backend); see kernels/elementwise.h. T, X, Y = float,
// double or bf16 (arithmetic in float for bf16, in T's precision otherwise, except axpy: double).
#pragma once

#include <cstdint>

namespace moe::kernels::ref {

// out[i] = a[i] + b[i]; out may alias a or b.
template <typename T>
void add(const T* a, const T* b, int64_t n, T* out);
// y[i] += alpha * x[i], in double.
template <typename X, typename Y>
void axpy(double alpha, const X* x, int64_t n, Y* y);
// x[i] *= alpha, in double.
template <typename T>
void scale(double alpha, int64_t n, T* x);
// dst[i] = src[i] converted.
template <typename S, typename D>
void convert(const S* src, int64_t n, D* dst);
// dst[r * dst_cols + dst_col + j] = src[r * src_cols + src_col + j] for r < rows, j < width.
template <typename T>
void copy_columns(const T* src, int64_t src_cols, int64_t src_col, T* dst, int64_t dst_cols,
                  int64_t dst_col, int64_t rows, int64_t width);
// The number of non-finite x[i].
template <typename T>
int64_t count_nonfinite(const T* x, int64_t n);

}  // namespace moe::kernels::ref
