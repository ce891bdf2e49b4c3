// Division of non-negative 64-bit indices by a divisor fixed before a kernel starts, by one
// multiply-high, an add and a shift instead of a division. On a GPU a 64-bit integer division is
// a subroutine of about 70 instructions: CUDA kernels that map a flat element index i to
// (row i / d, column i % d) spent more time dividing than moving bytes (window 1's profile of
// the MoE layer: combine's backward, the dispatch gather). The host computes the magic number
// once (FastDivmod(d)); the same struct divides on the host (tests/base/fast_divmod_test.cc
// checks it against `/` there) and in device code.
//
// Method (Granlund and Montgomery, "Division by invariant integers using multiplication", 1994,
// Theorem 4.2, N = 64): with l = ceil(log2 d) and m' = floor(2^(64 + l) / d) + 1, which satisfies
// 2^(64 + l) < m' d <= 2^(64 + l) + 2^l, floor(n / d) = floor(n m' / 2^(64 + l)) for every
// 0 <= n < 2^64. m' has 65 bits: m' = 2^64 + magic, so n m' / 2^64 = n + mulhi(n, magic) (up to
// the fraction, which the shift by l drops), and that sum cannot overflow because n < 2^63 here.
#pragma once

#include <cstdint>

#include "base/dtype.h"  // MOE_HOST_DEVICE

namespace moe {

class FastDivmod {
 public:
  FastDivmod() = default;
  // d >= 1 (a divisor below 1 is treated as 1: kernels never divide by an empty extent).
  explicit FastDivmod(int64_t d) {
    d_ = d < 1 ? 1 : d;
    const uint64_t ud = static_cast<uint64_t>(d_);
    shift_ = 0;
    while (shift_ < 63 && (uint64_t{1} << shift_) < ud) ++shift_;
    // floor(2^(64 + l) / d) + 1 - 2^64, in 128-bit arithmetic (the host builds it).
    const unsigned __int128 m = ((static_cast<unsigned __int128>(1) << (64 + shift_)) / ud) + 1;
    magic_ = static_cast<uint64_t>(m);  // the low 64 bits: m' - 2^64
  }

  MOE_HOST_DEVICE int64_t divisor() const { return d_; }

  // floor(n / d) for 0 <= n < 2^63.
  MOE_HOST_DEVICE int64_t div(int64_t n) const {
    const uint64_t un = static_cast<uint64_t>(n);
    return static_cast<int64_t>((mulhi(un, magic_) + un) >> shift_);
  }
  // n = q d + r with 0 <= r < d.
  MOE_HOST_DEVICE void divmod(int64_t n, int64_t* q, int64_t* r) const {
    *q = div(n);
    *r = n - *q * d_;
  }

 private:
  MOE_HOST_DEVICE static uint64_t mulhi(uint64_t a, uint64_t b) {
#if defined(__CUDA_ARCH__)
    return __umul64hi(a, b);
#else
    return static_cast<uint64_t>((static_cast<unsigned __int128>(a) * b) >> 64);
#endif
  }

  int64_t d_ = 1;
  uint64_t magic_ = 1;  // d = 1: l = 0, m' = 2^64 + 1
  int shift_ = 0;
};

}  // namespace moe
