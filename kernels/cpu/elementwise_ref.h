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
// The number of non-finite x[i].
template <typename T>
int64_t count_nonfinite(const T* x, int64_t n);

}  // namespace moe::kernels::ref
