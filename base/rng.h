// Counter-based random numbers (Philox4x32-10, Salmon et al. 2011, as in Random123 and cuRAND).
// A draw is a pure function of (seed, stream, index), so the CPU reference and a CUDA kernel that
// include this header produce the same numbers, in any order, on any rank, and a backward pass or
// a recomputation can redraw exactly what the forward drew.
//
// Streams name a purpose: make_stream(RngTag::kDropout, layer, step). The 64-bit stream packs
// tag (8 bits) | layer (16 bits) | step (40 bits). Indices are element or token ids.
#pragma once

#include <cmath>
#include <cstdint>

#include "base/dtype.h"  // MOE_HOST_DEVICE

namespace moe {

struct Philox4x32x10 {
  static constexpr uint32_t kMul0 = 0xD2511F53u;
  static constexpr uint32_t kMul1 = 0xCD9E8D57u;
  static constexpr uint32_t kWeyl0 = 0x9E3779B9u;
  static constexpr uint32_t kWeyl1 = 0xBB67AE85u;

  // out = Philox4x32-10(ctr, key).
  MOE_HOST_DEVICE static void generate(const uint32_t ctr_in[4], const uint32_t key_in[2],
                                       uint32_t out[4]) {
    uint32_t c0 = ctr_in[0], c1 = ctr_in[1], c2 = ctr_in[2], c3 = ctr_in[3];
    uint32_t k0 = key_in[0], k1 = key_in[1];
    for (int round = 0; round < 10; ++round) {
      if (round > 0) {
        k0 += kWeyl0;
        k1 += kWeyl1;
      }
      const uint64_t p0 = static_cast<uint64_t>(kMul0) * c0;
      const uint64_t p1 = static_cast<uint64_t>(kMul1) * c2;
      const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
      const uint32_t n1 = static_cast<uint32_t>(p1);
      const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
      const uint32_t n3 = static_cast<uint32_t>(p0);
      c0 = n0;
      c1 = n1;
      c2 = n2;
      c3 = n3;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
  }
};

enum class RngTag : uint8_t {
  kInit = 1,         // parameter initialisation (stream layer = parameter id)
  kDropout = 2,      // dropout masks
  kSparseMixer = 3,  // SparseMixer Gumbel sample and midpoint coin
  kDataShuffle = 4,  // corpus shuffling
  kAttack = 5,       // word-swap attack
  kTest = 6,         // tests
  kSampling = 7,     // text generation (momoe-generate; index = the token's position)
};

MOE_HOST_DEVICE inline uint64_t make_stream(RngTag tag, uint64_t layer, uint64_t step) {
  return (static_cast<uint64_t>(tag) << 56) | ((layer & 0xFFFFull) << 40) |
         (step & 0xFFFFFFFFFFull);
}

// The step of draws recorded in a CUDA graph, kept in device memory so that each replay reads
// the current one: keys[0] is the step, keys[1] the step's first global sequence (written before
// each step). Null: the draws carry the host's step (eager launches).
struct DeviceStep {
  const int64_t* keys = nullptr;

  // make_stream's step field (its low 40 bits) of the current step; 0 when null.
  MOE_HOST_DEVICE uint64_t step_bits() const {
    return keys != nullptr ? static_cast<uint64_t>(keys[0]) & 0xFFFFFFFFFFull : 0;
  }
  // The step's first global sequence; 0 when null.
  MOE_HOST_DEVICE int64_t first_sequence() const { return keys != nullptr ? keys[1] : 0; }
};

// One random stream. Cheap to copy; safe to use from any thread.
struct CounterRng {
  MOE_HOST_DEVICE CounterRng() {}
  MOE_HOST_DEVICE CounterRng(uint64_t seed_, uint64_t stream_) : seed(seed_), stream(stream_) {}

  uint64_t seed = 0;
  uint64_t stream = 0;
  // A stream at a step in device memory: `stream` holds step 0 and the kernel that draws takes
  // at_step(), whose stream has the step's bits; keys the kernel derives from a host offset move
  // by key_shift() = the step's first sequence x keys_per_sequence (the site's keys per
  // sequence: its tokens, or 1 for keys counted in sequences). The same draws as a stream made
  // with the step on the host and offsets that include the shift.
  DeviceStep device_step;
  int64_t keys_per_sequence = 0;

  MOE_HOST_DEVICE CounterRng at_step() const {
    return CounterRng(seed, stream | device_step.step_bits());
  }
  MOE_HOST_DEVICE int64_t key_shift() const {
    return device_step.first_sequence() * keys_per_sequence;
  }

  // Four independent 32-bit words for `index`.
  MOE_HOST_DEVICE void block(uint64_t index, uint32_t out[4]) const {
    const uint32_t ctr[4] = {static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                             static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)};
    const uint32_t key[2] = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
    Philox4x32x10::generate(ctr, key, out);
  }
  MOE_HOST_DEVICE uint32_t u32(uint64_t index, int lane = 0) const {
    uint32_t out[4];
    block(index, out);
    return out[lane & 3];
  }
  // Uniform in [0, 1) with 24 random bits (exactly representable in f32).
  MOE_HOST_DEVICE float uniform(uint64_t index, int lane = 0) const {
    return static_cast<float>(u32(index, lane) >> 8) * (1.0f / 16777216.0f);
  }
  // Uniform in [0, 1) with 53 random bits (lanes 0 and 1; exactly representable in f64).
  MOE_HOST_DEVICE double uniform_f64(uint64_t index) const {
    uint32_t out[4];
    block(index, out);
    const uint64_t bits = (static_cast<uint64_t>(out[0] >> 5) << 26) | (out[1] >> 6);
    return static_cast<double>(bits) * (1.0 / 9007199254740992.0);
  }
  // Uniform in (0, 1): never 0, so log() is finite.
  MOE_HOST_DEVICE float uniform_open(uint64_t index, int lane = 0) const {
    return (static_cast<float>(u32(index, lane) >> 8) + 0.5f) * (1.0f / 16777216.0f);
  }
  // Standard normal by Box-Muller on lanes 0 and 1 of the block.
  MOE_HOST_DEVICE float normal(uint64_t index) const {
    uint32_t out[4];
    block(index, out);
    const float u1 = (static_cast<float>(out[0] >> 8) + 0.5f) * (1.0f / 16777216.0f);
    const float u2 = static_cast<float>(out[1] >> 8) * (1.0f / 16777216.0f);
    return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853071795864769f * u2);
  }
  // Gumbel(0, 1) = -log(-log(U)), U in (0, 1).
  MOE_HOST_DEVICE float gumbel(uint64_t index, int lane = 0) const {
    return -std::log(-std::log(uniform_open(index, lane)));
  }
};

}  // namespace moe
