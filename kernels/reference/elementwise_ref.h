// Plain C++ elementwise loops (the CPU backend); see kernels/elementwise.h. T = float or double.
#pragma once

#include <cstdint>

namespace moe::kernels::ref {

// out[i] = a[i] + b[i]; out may alias a or b.
template <typename T>
void add(const T* a, const T* b, int64_t n, T* out);
// y[i] += alpha * x[i].
template <typename T>
void axpy(double alpha, const T* x, int64_t n, T* y);
// x[i] *= alpha.
template <typename T>
void scale(double alpha, int64_t n, T* x);
// Whether every x[i] is finite.
template <typename T>
bool all_finite(const T* x, int64_t n);

}  // namespace moe::kernels::ref
