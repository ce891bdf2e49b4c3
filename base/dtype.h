// Element types. f32 is the FP32 training type, f64 the finite-difference type, bf16 the BF16
// activation type (CPU and GPU), i32/i64 indices and token ids, u8 raw bytes.
//
// Kernels name two float roles per argument: "act" (the activation dtype: f32, f64 or bf16) and
// "F" = compute_dtype(act) (f64 for f64 activations, else f32): the dtype of master weights,
// gradients, optimizer state, router logits, softmax, losses, the momentum state and layer-norm
// statistics, which stay in full precision whatever the activations are.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define MOE_HOST_DEVICE __host__ __device__
#else
#define MOE_HOST_DEVICE
#endif

namespace moe {

enum class DType : uint8_t { kF32 = 0, kF64, kBF16, kI32, kI64, kU8 };

size_t dtype_size(DType dtype);
// "f32", "f64", "bf16", "i32", "i64", "u8"; also the safetensors names via dtype_safetensors_name.
const char* dtype_name(DType dtype);
// "F32", "F64", "BF16", "I32", "I64", "U8" (the safetensors header spelling).
const char* dtype_safetensors_name(DType dtype);
bool dtype_is_floating(DType dtype);
// The full-precision partner of an activation dtype: f64 for f64, f32 for f32 and bf16.
DType compute_dtype(DType act);

// bfloat16 as raw bits (the top half of an IEEE f32). Conversion from float rounds to nearest
// even (explicit); NaN stays NaN. Conversion to float is exact and implicit, so a reference loop
// reads bf16 like float (arithmetic happens in float) and stores with an explicit bf16(...).
struct bf16 {
  uint16_t bits = 0;
  bf16() = default;
  MOE_HOST_DEVICE explicit bf16(float f) : bits(from_float(f)) {}
  MOE_HOST_DEVICE operator float() const { return to_float(bits); }  // NOLINT: exact

  MOE_HOST_DEVICE static uint16_t from_float(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof(u));
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) {
      return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
    }
    const uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>((u + rounding_bias) >> 16);
  }
  MOE_HOST_DEVICE static float to_float(uint16_t b) {
    uint32_t u = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, sizeof(f));
    return f;
  }
};

template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kF32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::kF64;
};
template <>
struct DTypeOf<bf16> {
  static constexpr DType value = DType::kBF16;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::kI32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::kI64;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::kU8;
};
template <typename T>
inline constexpr DType dtype_of = DTypeOf<T>::value;

// The type a kernel accumulates T in: float for bf16, T otherwise.
template <typename T>
struct AccumOf {
  using type = T;
};
template <>
struct AccumOf<bf16> {
  using type = float;
};
template <typename T>
using accum_t = typename AccumOf<T>::type;

}  // namespace moe
