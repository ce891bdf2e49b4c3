#include "comm/host_reduce.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "base/check.h"

namespace moe::comm {
namespace {

// The type a reduction accumulates in: bf16 in f32, everything else in itself.
template <typename T>
struct AccOf {
  using type = T;
};
template <>
struct AccOf<bf16> {
  using type = float;
};

template <typename T>
typename AccOf<T>::type load(T v) {
  if constexpr (std::is_same_v<T, bf16>) {
    return static_cast<float>(v);
  } else {
    return v;
  }
}

template <typename T, typename A>
T store(A v) {
  if constexpr (std::is_same_v<T, bf16>) {
    return bf16(v);
  } else {
    return v;
  }
}

template <typename A>
A combine(A a, A b, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      if constexpr (std::is_integral_v<A>) {
        using U = std::make_unsigned_t<A>;
        return static_cast<A>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
      } else {
        return a + b;
      }
    case ReduceOp::kMax:
      return b > a ? b : a;
    case ReduceOp::kMin:
      return b < a ? b : a;
  }
  return a;
}

// Block by block (every source's elements of a block combined in rank order, then stored), so
// that the accumulator stays small and in cache whatever n is; dst may alias a source, whose
// later blocks are not yet written.
template <typename T>
void rank_order(const std::vector<const void*>& srcs, size_t n, ReduceOp op, void* dst) {
  using A = typename AccOf<T>::type;
  constexpr size_t kBlock = 2048;
  A acc[kBlock];
  T* out = static_cast<T*>(dst);
  for (size_t b = 0; b < n; b += kBlock) {
    const size_t m = std::min(kBlock, n - b);
    const T* first = static_cast<const T*>(srcs[0]) + b;
    for (size_t i = 0; i < m; ++i) acc[i] = load(first[i]);
    for (size_t r = 1; r < srcs.size(); ++r) {
      const T* src = static_cast<const T*>(srcs[r]) + b;
      for (size_t i = 0; i < m; ++i) acc[i] = combine<A>(acc[i], load(src[i]), op);
    }
    for (size_t i = 0; i < m; ++i) out[b + i] = store<T, A>(acc[i]);
  }
}

template <typename T>
void pair(const void* in, void* inout, size_t n, ReduceOp op) {
  using A = typename AccOf<T>::type;
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (size_t i = 0; i < n; ++i) b[i] = store<T, A>(combine<A>(load(b[i]), load(a[i]), op));
}

}  // namespace

void reduce_in_rank_order(const std::vector<const void*>& srcs, DType dtype, size_t n, ReduceOp op,
                          void* dst) {
  MOE_CHECK(!srcs.empty(), "reduce_in_rank_order needs at least one source");
  switch (dtype) {
    case DType::kF32:
      return rank_order<float>(srcs, n, op, dst);
    case DType::kF64:
      return rank_order<double>(srcs, n, op, dst);
    case DType::kBF16:
      return rank_order<bf16>(srcs, n, op, dst);
    case DType::kI32:
      return rank_order<int32_t>(srcs, n, op, dst);
    case DType::kI64:
      return rank_order<int64_t>(srcs, n, op, dst);
    case DType::kU8:
      return rank_order<uint8_t>(srcs, n, op, dst);
  }
  MOE_CHECK(false, "reduce_in_rank_order: unknown dtype");
}

void reduce_pair(const void* in, void* inout, size_t n, DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::kF32:
      return pair<float>(in, inout, n, op);
    case DType::kF64:
      return pair<double>(in, inout, n, op);
    case DType::kBF16:
      return pair<bf16>(in, inout, n, op);
    case DType::kI32:
      return pair<int32_t>(in, inout, n, op);
    case DType::kI64:
      return pair<int64_t>(in, inout, n, op);
    case DType::kU8:
      return pair<uint8_t>(in, inout, n, op);
  }
  MOE_CHECK(false, "reduce_pair: unknown dtype");
}

}  // namespace moe::comm
