// The fused attention kernels (kernels/cuda/flash_attention_kernels.cuh), their own text, run on
// the CPU through the warp emulator (tests/testing/warp_emulator.h): every output within the
// derived error bound of exact attention (tests/testing/attention_bound.h), as the GPU test
// (CudaKernelTest.Bf16RoundingAttentionWithinDerivedBound) checks on a device, for the same
// shapes: odd head widths, sequences that end inside a tile, dropout. This checks the kernels'
// tiling, fragment addressing, causal rule, dropout orientation and rounding points on every
// CPU; the GPU run still checks the instructions and their timing.
// The emulator itself is checked first: a product through ldmatrix and mma against a plain one,
// and the faults it reports.
#include "tests/testing/warp_emulator.h"

namespace moe::kernels::cuda::flash {
using namespace moe::testing::emu;  // NOLINT: the primitives the kernels' text calls
}  // namespace moe::kernels::cuda::flash

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda/flash_attention_kernels.cuh"
#include "tests/testing/attention_bound.h"
#include "tests/testing/gradient_check.h"

namespace moe::kernels::cuda::flash {
namespace {

namespace emu = moe::testing::emu;

// --- The emulator ---

// x [16 x 32] y [16 x 32]^T (16 x 16) and then times z [16 x 32], the way the kernels address
// their tiles (ld 40), by one warp.
TEST(WarpEmulator, LdmatrixAndMmaComposeIntoMatrixProducts) {
  constexpr int kLd = 40;
  std::vector<float> x(16 * 32), y(16 * 32), z(16 * 32);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<float>((i * 7) % 13) - 6.f;
    y[i] = static_cast<float>((i * 5) % 11) - 5.f;
    z[i] = static_cast<float>((i * 3) % 7) - 3.f;
  }
  std::vector<float> s_all(32 * 8), o_all(32 * 16);
  const std::string fault = emu::run_grid({1, 1}, 32, 3 * 16 * kLd * 2, [&] {
    bf16* tiles = reinterpret_cast<bf16*>(dynamic_shared());
    const int lane = thread_x(), g = lane >> 2, t = lane & 3;
    for (int i = lane; i < 16 * 32; i += 32) {
      tiles[(i / 32) * kLd + i % 32] = bf16(x[i]);
      tiles[16 * kLd + (i / 32) * kLd + i % 32] = bf16(y[i]);
      tiles[32 * kLd + (i / 32) * kLd + i % 32] = bf16(z[i]);
    }
    block_sync();
    // s = x y^T: two 16 x 8 blocks, k over 32 columns.
    float s[2][4] = {};
    for (int k = 0; k < 32; k += 16) {
      uint32_t a[4], b[4];
      ldmatrix_x4(a, shared_address(tiles + (lane & 15) * kLd + k + (lane >> 4) * 8));
      ldmatrix_x4(b, shared_address(tiles + 16 * kLd + ((lane & 7) + (lane >> 4) * 8) * kLd + k +
                                    ((lane >> 3) & 1) * 8));
      mma(s[0], a, b[0], b[1]);
      mma(s[1], a, b[2], b[3]);
    }
    // o = s z: s as the A operand (its accumulator layout), z read transposed.
    uint32_t p[4] = {pack_bf16(s[0][0], s[0][1]), pack_bf16(s[0][2], s[0][3]),
                     pack_bf16(s[1][0], s[1][1]), pack_bf16(s[1][2], s[1][3])};
    float o[4][4] = {};
    for (int n = 0; n < 4; n += 2) {
      uint32_t b[4];
      ldmatrix_x4_trans(
          b, shared_address(tiles + 32 * kLd + (lane & 15) * kLd + (n + (lane >> 4)) * 8));
      mma(o[n], p, b[0], b[1]);
      mma(o[n + 1], p, b[2], b[3]);
    }
    for (int e = 0; e < 4; ++e) {
      for (int n = 0; n < 2; ++n)
        s_all[(g + (e >> 1) * 8) * 16 + n * 8 + 2 * t + (e & 1)] = s[n][e];
      for (int n = 0; n < 4; ++n)
        o_all[(g + (e >> 1) * 8) * 32 + n * 8 + 2 * t + (e & 1)] = o[n][e];
    }
  });
  ASSERT_EQ(fault, "");
  // Small integers: every product and sum is exact in f32 and, for s, in bf16.
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) {
      float want = 0.f;
      for (int k = 0; k < 32; ++k) want += x[i * 32 + k] * y[j * 32 + k];
      ASSERT_EQ(s_all[i * 16 + j], want) << "s at " << i << ", " << j;
    }
    for (int c = 0; c < 32; ++c) {
      double want = 0;
      for (int j = 0; j < 16; ++j) {
        want += static_cast<double>(static_cast<float>(bf16(s_all[i * 16 + j]))) * z[j * 32 + c];
      }
      ASSERT_EQ(o_all[i * 32 + c], static_cast<float>(want)) << "o at " << i << ", " << c;
    }
  }
}

TEST(WarpEmulator, ReportsDivergenceBadAddressesAndMissedBarriers) {
  const std::string divergent = emu::run_grid({1, 1}, 32, 0, [] {
    if (thread_x() < 16) shfl_xor(1.f, 1);
  });
  EXPECT_NE(divergent.find("no thread can go on"), std::string::npos) << divergent;
  const std::string mixed = emu::run_grid({1, 1}, 32, 256, [] {
    uint32_t r[4];
    if (thread_x() == 3) {
      shfl_xor(1.f, 1);
    } else {
      ldmatrix_x4(r, 0);
    }
  });
  EXPECT_NE(mixed.find("divergent collective"), std::string::npos) << mixed;
  const std::string misaligned = emu::run_grid({1, 1}, 32, 256, [] {
    uint32_t r[4];
    ldmatrix_x4(r, thread_x() == 5 ? 8 : 0);
  });
  EXPECT_NE(misaligned.find("not a 16-byte row"), std::string::npos) << misaligned;
  const std::string outside = emu::run_grid({1, 1}, 32, 256, [] {
    uint32_t r[4];
    ldmatrix_x4(r, 256);
  });
  EXPECT_NE(outside.find("not a 16-byte row"), std::string::npos) << outside;
  const std::string barrier = emu::run_grid({2, 1}, 64, 0, [] {
    if (thread_x() >= 32) block_sync();
  });
  EXPECT_NE(barrier.find("exited while"), std::string::npos) << barrier;
  EXPECT_EQ(emu::run_grid({2, 3}, 64, 0, [] { block_sync(); }), "");
}

// Between barriers warps run at different rates: in block 0 warp 0, after 8 collectives, reads
// what warp 3 has counted so far (shared memory without a barrier between) and finds it behind;
// in block 1 the order is reversed. After the barrier, every warp sees all 8.
TEST(WarpEmulator, WarpsDriftApartBetweenBarriers) {
  int early[2][2] = {{-1, -1}, {-1, -1}}, late = -1;
  const std::string fault = emu::run_grid({2, 1}, 128, 16, [&] {
    volatile int* cell = reinterpret_cast<int*>(dynamic_shared());
    const int me = thread_x() == 0 ? 0 : 1, other = thread_x() == 0 ? 96 : 0;
    if (thread_x() == 0) cell[0] = cell[1] = 0;
    block_sync();
    for (int i = 1; i <= 8; ++i) {
      shfl_xor(0.f, 1);
      if (thread_x() == 0 || thread_x() == 96) cell[me] = i;
    }
    if (thread_x() == 0 || thread_x() == 96) early[block_x()][me] = cell[other == 0 ? 0 : 1];
    block_sync();
    if (thread_x() == 0) late = cell[1];
  });
  ASSERT_EQ(fault, "");
  EXPECT_LT(early[0][0], 4) << "block 0: warp 0 ahead of warp 3";
  EXPECT_EQ(early[0][1], 8) << "block 0: warp 3 behind warp 0";
  EXPECT_EQ(early[1][0], 8) << "block 1: warp 0 behind warp 3";
  EXPECT_LT(early[1][1], 4) << "block 1: warp 3 ahead of warp 0";
  EXPECT_EQ(late, 8);
}

// cp.async: the destination is NaN from the start of a copy until the thread's wait covers its
// group; copy_async_wait<1> leaves the newest group in flight; a misaligned copy is a fault.
TEST(WarpEmulator, AsyncCopiesLandAtTheirWait) {
  alignas(16) static float src[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  float seen[3][2] = {};
  const std::string fault = emu::run_grid({1, 1}, 32, 64, [&] {
    float* dst = reinterpret_cast<float*>(dynamic_shared());
    if (thread_x() != 0) return;
    dst[0] = dst[4] = -1.f;
    copy_async_16(dst, src);
    copy_async_commit();
    copy_async_16(dst + 4, src + 4);
    copy_async_commit();
    seen[0][0] = dst[0], seen[0][1] = dst[4];
    copy_async_wait<1>();
    seen[1][0] = dst[0], seen[1][1] = dst[4];
    copy_async_wait<0>();
    seen[2][0] = dst[0], seen[2][1] = dst[4];
  });
  ASSERT_EQ(fault, "");
  EXPECT_TRUE(std::isnan(seen[0][0]) && std::isnan(seen[0][1])) << "in flight: neither landed";
  EXPECT_EQ(seen[1][0], 1.f);
  EXPECT_TRUE(std::isnan(seen[1][1])) << "wait<1>: the newest group still in flight";
  EXPECT_EQ(seen[2][0], 1.f);
  EXPECT_EQ(seen[2][1], 5.f);
  const std::string misaligned = emu::run_grid({1, 1}, 32, 64, [&] {
    if (thread_x() == 0) copy_async_16(dynamic_shared() + 8, src);
  });
  EXPECT_NE(misaligned.find("copy_async_16"), std::string::npos) << misaligned;
}

// --- The kernels ---

struct Case {
  int64_t batch, seq, heads, head_dim;
  float dropout;
};

// A tensor of NaNs (an output entry the kernels leave unwritten fails the bound).
Tensor nan_filled(Shape shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  const int64_t n = t.numel();
  if (dtype == DType::kBF16) {
    for (int64_t i = 0; i < n; ++i) t.data<bf16>()[i] = bf16(NAN);
  } else {
    for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = NAN;
  }
  return t;
}

class FusedAttentionEmulation : public ::testing::TestWithParam<Case> {
 protected:
  // Forward and backward through the emulated kernels; `words` false forces the element copies.
  void run(const AttentionArgs& a, int64_t dh, const Tensor& qkv, const Tensor& dout, bool words,
           Tensor* out, Tensor* lse, Tensor* dqkv) {
    const int64_t rows = a.batch * a.seq_len, d = a.heads * dh;
    *out = nan_filled({rows, d}, DType::kBF16);
    *lse = nan_filled({a.batch, a.heads, a.seq_len}, DType::kF32);
    *dqkv = nan_filled({rows, 3 * d}, DType::kBF16);
    Tensor dsum = nan_filled({a.batch, a.heads, a.seq_len}, DType::kF32);
    FlashParams f = params_of(a, dh);
    f.qkv = qkv.data<bf16>();
    f.d_out = dout.data<bf16>();
    f.out = out->data<bf16>();
    f.lse = lse->data<float>();
    f.dsum = dsum.data<float>();
    f.d_qkv = dqkv->data<bf16>();
    f.words = words && copies_words(dh, {f.qkv, f.d_out, f.out});
    EXPECT_EQ(f.words, words && dh % 8 == 0);
    const emu::Grid grid{static_cast<int>(a.batch * a.heads),
                         static_cast<int>((a.seq_len + kTile - 1) / kTile)};
    with_head_width(dh, [&](auto hd) {
      constexpr int HD = decltype(hd)::value;
      ASSERT_EQ(emu::run_grid(grid, kFlashThreads, ForwardSmem<HD>::kBytes,
                              [&] { flash_forward_kernel<HD>(f); }),
                "");
      ASSERT_EQ(emu::run_grid(grid, kFlashThreads, DqSmem<HD>::kBytes,
                              [&] { flash_backward_dq_kernel<HD>(f); }),
                "");
      ASSERT_EQ(emu::run_grid(grid, kFlashThreads, DkvSmem<HD>::kBytes,
                              [&] { flash_backward_dkv_kernel<HD>(f); }),
                "");
    });
  }
};

TEST_P(FusedAttentionEmulation, WithinTheDerivedBoundOfExactAttention) {
  const Case c = GetParam();
  const AttentionArgs a{
      c.batch, c.seq, c.heads, c.dropout, CounterRng{9, make_stream(RngTag::kDropout, 3, 2)}, 5};
  const int64_t rows = c.batch * c.seq, d = c.heads * c.head_dim;
  Tensor qkv = Tensor::empty({rows, 3 * d}, DType::kBF16);
  Tensor dout = Tensor::empty({rows, d}, DType::kBF16);
  testing::fill_uniform(qkv, 11, -1.5, 1.5);
  testing::fill_uniform(dout, 12);
  Tensor out, lse, dqkv;
  run(a, c.head_dim, qkv, dout, /*words=*/true, &out, &lse, &dqkv);
  // The kernels form D_i from the output they stored: the bound takes that output's D.
  const TensorView used = out.view();
  const testing::AttentionWithBound exact = testing::exact_attention(a, qkv, dout, &used);
  EXPECT_TRUE(testing::within_bound("fused out", out, exact.out, exact.out_bound));
  EXPECT_TRUE(testing::within_bound("fused lse", lse, exact.lse, exact.lse_bound));
  EXPECT_TRUE(testing::within_bound("fused d_qkv", dqkv, exact.d_qkv, exact.d_qkv_bound));
  double part[3];
  for (int x = 0; x < 3; ++x) {
    part[x] = testing::worst_part_error_over_bound(dqkv, exact.d_qkv, exact.d_qkv_bound, x);
  }
  std::printf("worst error / bound: out %.3f, lse %.3f, dq %.3f, dk %.3f, dv %.3f\n",
              testing::worst_error_over_bound(out, exact.out, exact.out_bound),
              testing::worst_error_over_bound(lse, exact.lse, exact.lse_bound), part[0], part[1],
              part[2]);
  if (c.seq > 1) {  // not loose: each part's roundings reach a tenth of its bound somewhere
    for (int x = 0; x < 3; ++x) EXPECT_GT(part[x], 0.1) << "d_qkv part " << x;
  }
  if (c.head_dim % 8 == 0) {  // the 16-byte copies and the element copies: the same tiles
    Tensor out2, lse2, dqkv2;
    run(a, c.head_dim, qkv, dout, /*words=*/false, &out2, &lse2, &dqkv2);
    EXPECT_TRUE(testing::bitwise_equal(out, out2));
    EXPECT_TRUE(testing::bitwise_equal(lse, lse2));
    EXPECT_TRUE(testing::bitwise_equal(dqkv, dqkv2));
  }
}

std::string name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return str_cat("B", c.batch, "_S", c.seq, "_H", c.heads, "_Dh", c.head_dim, "_p",
                 static_cast<int>(c.dropout * 100));
}

// The GPU test's shapes (tests/kernels/cuda_kernels_test.cc), some smaller (the emulation takes
// one fiber switch per lane per instruction): every padded width (32, 64, 128), widths
// that are not multiples of 8 (element copies), sequences of 1 and ending inside a tile, more
// than one tile, dropout.
INSTANTIATE_TEST_SUITE_P(Shapes, FusedAttentionEmulation,
                         ::testing::Values(Case{1, 1, 1, 4, 0.f}, Case{2, 37, 3, 8, 0.f},
                                           Case{3, 64, 4, 16, 0.1f}, Case{1, 130, 2, 5, 0.25f},
                                           Case{2, 200, 2, 64, 0.f}, Case{1, 129, 1, 64, 0.f},
                                           Case{1, 70, 1, 128, 0.1f}, Case{1, 70, 2, 33, 0.f},
                                           Case{1, 65, 1, 32, 0.1f}),
                         name);

}  // namespace
}  // namespace moe::kernels::cuda::flash
