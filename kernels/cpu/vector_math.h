// Call-free elementwise math for the host backend's hot loops (written so that the compiler can
// vectorise them; the kernels library is built with -fno-trapping-math so that GCC if-converts
// the final select): shared by the cross-entropy and the attention softmax.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace moe::kernels::ref {

// Cephes' expf: range reduction by ln 2 in two parts, a degree-6 polynomial, the exponent by bit
// shift; within 2 ulp of std::exp on [-87, 88]. Inputs below -87 flush to 0, above 88 saturate.
// The double overload is std::exp (f64 is the gradient-check precision).
inline float vector_exp(float x) {
  x = std::max(x, -87.0f);
  x = std::min(x, 88.0f);
  // Round to nearest by adding and subtracting 1.5 * 2^23 (no call, unlike std::floor on SSE2).
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return x <= -87.0f ? 0.0f : e * scale;
}
inline double vector_exp(double x) { return std::exp(x); }

}  // namespace moe::kernels::ref
