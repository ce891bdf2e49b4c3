// MoE data movement (kernels/moe_dispatch.h) on hand-computed cases: the layout step's capacity
// slots in the stable order (first choices before second choices, then token order), send rows,
// loads and keys in capacity and dropless mode; its deduplication per destination rank (unique
// rows, their counts and each send row's index, the counters); the filled-prefix counts of a padded
// receive buffer; row gathers (empty slots zeroed); the gather-sum dispatch backward; combine and
// its backward against central finite differences in f64; bf16 rows with fp32 gates; argument
// errors.
#include "kernels/moe_dispatch.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/row_copy.h"
#include "tests/testing/gradient_check.h"
#include "tests/testing/status_expect.h"

namespace moe::kernels {
namespace {

using moe::testing::check_gradients;
using moe::testing::dot;
using moe::testing::expect_invalid;
using moe::testing::fill_uniform;

Context& ctx() { return testing::host_context(); }

struct Layout {
  Tensor slot, row, load, kept, send_token, send_key, drops;
  Layout(int64_t tokens, int64_t k, int64_t experts, int64_t send_rows)
      : slot(Tensor::empty({tokens, k}, DType::kI32)),
        row(Tensor::empty({tokens, k}, DType::kI32)),
        load(Tensor::empty({experts}, DType::kI64)),
        kept(Tensor::empty({experts}, DType::kI64)),
        send_token(Tensor::empty({send_rows}, DType::kI32)),
        send_key(Tensor::empty({send_rows}, DType::kI64)),
        drops(Tensor::zeros({2}, DType::kF64)) {}
  Status run(const LayoutArgs& a, const Tensor& idx) {
    return moe_layout(ctx(), a, idx, {slot, row, load, kept, send_token, send_key, drops});
  }
};

TEST(MoeLayoutTest, CapacityFirstChoicesBeforeSecondChoicesThenTokenOrder) {
  // 4 tokens, K = 2, 3 experts, capacity 2.
  //   t0: (0, 1)  t1: (0, 2)  t2: (0, 1)  t3: (1, 0)
  // First choices in token order: e0 <- t0 (slot 0), t1 (slot 1), t2 (dropped); e1 <- t3 (0).
  // Second choices: e1 <- t0 (1); e2 <- t1 (0); e1 <- t2 (dropped); e0 <- t3 (dropped).
  Tensor idx = Tensor::from_vector<int32_t>({4, 2}, {0, 1, 0, 2, 0, 1, 1, 0});
  Layout l(4, 2, 3, 6);
  ASSERT_TRUE(l.run({3, 2, 100}, idx).ok());
  EXPECT_EQ(to_vector<int32_t>(l.slot), (std::vector<int32_t>{0, 1, 1, 0, -1, -1, 0, -1}));
  EXPECT_EQ(to_vector<int64_t>(l.load), (std::vector<int64_t>{4, 3, 1}));
  EXPECT_EQ(to_vector<int64_t>(l.kept), (std::vector<int64_t>{2, 2, 1}));
  // Send rows: expert e's block at e * C.
  EXPECT_EQ(to_vector<int32_t>(l.row), (std::vector<int32_t>{0, 3, 1, 4, -1, -1, 2, -1}));
  EXPECT_EQ(to_vector<int32_t>(l.send_token), (std::vector<int32_t>{0, 1, 3, 0, 1, -1}));
  // Keys: (token_offset + t) * K + choice.
  EXPECT_EQ(to_vector<int64_t>(l.send_key), (std::vector<int64_t>{200, 202, 206, 201, 203, -1}));
  EXPECT_EQ(to_vector<double>(l.drops), (std::vector<double>{3, 1}));  // t2 lost both choices
}

TEST(MoeLayoutTest, DroplessBlocksAtPrefixSumsOfLoads) {
  Tensor idx = Tensor::from_vector<int32_t>({4, 2}, {0, 1, 0, 2, 0, 1, 1, 0});
  Layout l(4, 2, 3, 8);
  ASSERT_TRUE(l.run({3, -1, 0}, idx).ok());
  EXPECT_EQ(to_vector<int32_t>(l.slot), (std::vector<int32_t>{0, 1, 1, 0, 2, 2, 0, 3}));
  EXPECT_EQ(to_vector<int64_t>(l.kept), (std::vector<int64_t>{4, 3, 1}));
  // Blocks: e0 rows [0, 4), e1 [4, 7), e2 [7, 8).
  EXPECT_EQ(to_vector<int32_t>(l.row), (std::vector<int32_t>{0, 5, 1, 7, 2, 6, 4, 3}));
  EXPECT_EQ(to_vector<int32_t>(l.send_token), (std::vector<int32_t>{0, 1, 2, 3, 3, 0, 2, 1}));
  EXPECT_EQ(to_vector<double>(l.drops), (std::vector<double>{0, 0}));
  Tensor bad = Tensor::from_vector<int32_t>({1, 1}, {3});
  Layout one(1, 1, 3, 1);
  expect_invalid(one.run({3, -1, 0}, bad), "expert index 3");
  expect_invalid(moe_layout(ctx(), {3, 2, 0}, idx,
                            {one.slot, l.row, l.load, l.kept, l.send_token, l.send_key, {}}),
                 "slot");
}

// moe_dedup_layout's outputs and counters.
struct Dedup {
  Tensor uniq_token, uniq_counts, send_uniq, stats;
  Dedup(int64_t unique_rows, int64_t ranks, int64_t send_rows)
      : uniq_token(Tensor::empty({unique_rows}, DType::kI32)),
        uniq_counts(Tensor::empty({ranks}, DType::kI64)),
        send_uniq(Tensor::empty({send_rows}, DType::kI32)),
        stats(Tensor::zeros({2}, DType::kF64)) {}
  Status run(const DedupArgs& a, const Tensor& idx, const Tensor& row) {
    return moe_dedup_layout(ctx(), a, idx, row, {uniq_token, uniq_counts, send_uniq, stats});
  }
};

TEST(MoeDedupLayoutTest, CapacityUniqueRowsPerPeerRankInTokenOrder) {
  // 4 tokens, K = 3, 6 experts on 3 ranks (E_l = 2: rank r owns 2r, 2r + 1), capacity 2, seen
  // from rank 1 (experts 2 and 3 are mine: never deduplicated, never sent).
  //   t0: (0, 1, 4) -> ranks 0, 0, 2      t1: (2, 0, 5) -> 1, 0 (dropped), 2
  //   t2: (0, 4, 5) -> ranks 0, 2, 2      t3: (1, 3, 0) -> 0, 1, 0 (dropped)
  // Send rows e * C + slot (slots: first choices in token order, then second, then third).
  Tensor idx = Tensor::from_vector<int32_t>({4, 3}, {0, 1, 4, 2, 0, 5, 0, 4, 5, 1, 3, 0});
  const std::vector<int32_t> rows = {0, 3, 9, 4, -1, 10, 1, 8, 11, 2, 6, -1};
  Layout l(4, 3, 6, 12);
  ASSERT_TRUE(l.run({6, 2, 0}, idx).ok());
  ASSERT_EQ(to_vector<int32_t>(l.row), rows);  // the hand-computed layout
  Dedup d(4 * 2, 3, 12);
  ASSERT_TRUE(d.run({6, 2, 3, 1}, idx, l.row).ok());
  // Rank 0 receives t0 (two experts: one row), t2 (one), t3 (one); rank 2 t0, t1, t2 (two: one).
  EXPECT_EQ(to_vector<int64_t>(d.uniq_counts), (std::vector<int64_t>{3, 0, 3}));
  EXPECT_EQ(to_vector<int32_t>(d.uniq_token), (std::vector<int32_t>{0, 2, 3, 0, 1, 2, -1, -1}));
  // Send rows 0..3 go to rank 0 (t0, t2, t3, t0), 4..7 are mine or empty, 8..11 go to rank 2
  // (t2, t0, t1, t2).
  EXPECT_EQ(to_vector<int32_t>(d.send_uniq),
            (std::vector<int32_t>{0, 1, 2, 0, -1, -1, -1, -1, 2, 0, 1, 2}));
  // 8 kept peer assignments (3 + 1 + 3 + 1) travel as 6 rows (2 + 1 + 2 + 1).
  EXPECT_EQ(to_vector<double>(d.stats), (std::vector<double>{8, 6}));
}

TEST(MoeDedupLayoutTest, DroplessFromEitherRankAndCountersAccumulate) {
  // 3 tokens, K = 2, 4 experts on 2 ranks: t0 (2, 3), t1 (0, 2), t2 (3, 1). Blocks: e0 [0, 1),
  // e1 [1, 2), e2 [2, 4), e3 [4, 6).
  Tensor idx = Tensor::from_vector<int32_t>({3, 2}, {2, 3, 0, 2, 3, 1});
  Layout l(3, 2, 4, 6);
  ASSERT_TRUE(l.run({4, -1, 0}, idx).ok());
  ASSERT_EQ(to_vector<int32_t>(l.row), (std::vector<int32_t>{2, 5, 0, 3, 4, 1}));
  Dedup d(3, 2, 6);
  // Rank 0 sends to rank 1: t0 once for its two experts there, t1 and t2 once each.
  ASSERT_TRUE(d.run({4, -1, 2, 0}, idx, l.row).ok());
  EXPECT_EQ(to_vector<int64_t>(d.uniq_counts), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(to_vector<int32_t>(d.uniq_token), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(to_vector<int32_t>(d.send_uniq), (std::vector<int32_t>{-1, -1, 0, 1, 2, 0}));
  EXPECT_EQ(to_vector<double>(d.stats), (std::vector<double>{4, 3}));
  // The same routing on rank 1: t1 and t2 each reach one expert of rank 0.
  ASSERT_TRUE(d.run({4, -1, 2, 1}, idx, l.row).ok());
  EXPECT_EQ(to_vector<int64_t>(d.uniq_counts), (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(to_vector<int32_t>(d.uniq_token), (std::vector<int32_t>{1, 2, -1}));
  EXPECT_EQ(to_vector<int32_t>(d.send_uniq), (std::vector<int32_t>{0, 1, -1, -1, -1, -1}));
  EXPECT_EQ(to_vector<double>(d.stats), (std::vector<double>{4 + 2, 3 + 2}));
}

TEST(MoeDedupLayoutTest, OneRankSendsNothingAndBadArgumentsAreRefused) {
  Tensor idx = Tensor::from_vector<int32_t>({2, 2}, {0, 1, 1, 0});
  Tensor row = Tensor::from_vector<int32_t>({2, 2}, {0, 2, 3, 1});
  Dedup one(0, 1, 4);
  ASSERT_TRUE(one.run({2, 2, 1, 0}, idx, row).ok());
  EXPECT_EQ(to_vector<int64_t>(one.uniq_counts), (std::vector<int64_t>{0}));
  EXPECT_EQ(to_vector<int32_t>(one.send_uniq), (std::vector<int32_t>{-1, -1, -1, -1}));
  EXPECT_EQ(to_vector<double>(one.stats), (std::vector<double>{0, 0}));
  Dedup two(2, 2, 4);
  expect_invalid(two.run({2, 2, 2, 2}, idx, row), "rank 2");
  expect_invalid(two.run({3, 2, 2, 0}, idx, row), "R dividing E");
  expect_invalid(two.run({2, 3, 2, 0}, idx, row), "send_uniq");  // S = 6
  expect_invalid(one.run({2, 2, 2, 0}, idx, row), "uniq_token");
  expect_invalid(two.run({2, 2, 2, 0}, idx, Tensor::from_vector<int32_t>({2, 2}, {0, 4, 3, 1})),
                 "row[1] = 4");
  expect_invalid(two.run({2, 2, 2, 0}, Tensor::from_vector<int32_t>({2, 2}, {0, 2, 1, 0}), row),
                 "expert index 2");
}

TEST(MoeLayoutTest, BlockFillCounts) {
  Tensor keys = Tensor::from_vector<int64_t>({3, 3}, {5, 9, -1, -1, -1, -1, 0, 1, 2});
  Tensor filled = Tensor::empty({3}, DType::kI32);
  ASSERT_TRUE(block_fill_counts(ctx(), keys, filled).ok());
  EXPECT_EQ(to_vector<int32_t>(filled), (std::vector<int32_t>{2, 0, 3}));
  expect_invalid(block_fill_counts(ctx(), keys, Tensor::empty({2}, DType::kI32)), "filled");
}

TEST(GatherTest, GatherRowsAndGatherSum) {
  Tensor src = Tensor::from_vector<float>({3, 2}, {1, 2, 3, 4, 5, 6});
  Tensor dst = Tensor::from_vector<float>({4, 2}, {9, 9, 9, 9, 9, 9, 9, 9});
  ASSERT_TRUE(gather_rows(ctx(), src, Tensor::from_vector<int32_t>({4}, {2, -1, 0, 2}), dst).ok());
  EXPECT_EQ(to_vector<float>(dst), (std::vector<float>{5, 6, 0, 0, 1, 2, 5, 6}));
  expect_invalid(gather_rows(ctx(), src, Tensor::from_vector<int32_t>({4}, {0, 3, 0, 0}), dst),
                 "index[1] = 3");
  // dx[t] = sum over k of src[rows[t, k]] (dropped choices skipped), overwriting dx.
  Tensor dx = Tensor::from_vector<float>({2, 2}, {7, 7, 7, 7});
  ASSERT_TRUE(
      gather_sum_rows(ctx(), src, Tensor::from_vector<int32_t>({2, 2}, {0, 2, -1, 1}), dx).ok());
  EXPECT_EQ(to_vector<float>(dx), (std::vector<float>{6, 8, 3, 4}));
  // bf16 rows: summed in float, rounded once.
  Tensor s16 = Tensor::empty({2, 1}, DType::kBF16), d16 = Tensor::empty({1, 1}, DType::kBF16);
  s16.data<bf16>()[0] = bf16(1.f);
  s16.data<bf16>()[1] = bf16(1.f / 256);
  ASSERT_TRUE(
      gather_sum_rows(ctx(), s16, Tensor::from_vector<int32_t>({1, 3}, {1, 0, 1}), d16).ok());
  EXPECT_EQ(static_cast<float>(d16.data<bf16>()[0]), 1.f + 1.f / 128);  // 1 + 2/256 exactly
}

// A destination of at least kStreamingStoreBytes is written with streaming stores: the same
// bytes as row copies, empty slots zero, on 1 and 3 threads, f32 and bf16 rows, also when the
// source rows start unaligned (a view one element into its buffer).
TEST(GatherTest, LargeDestinationsTakeStreamingStoresAndCopyTheSameBytes) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const int64_t d = dtype == DType::kF32 ? 256 : 520, n = 301;
    const int64_t row_bytes = d * static_cast<int64_t>(dtype_size(dtype));
    const int64_t m = static_cast<int64_t>(ref::kStreamingStoreBytes) / row_bytes + 7;
    Tensor src_all = Tensor::empty({n * d + 1}, dtype);
    for (size_t i = 0; i < src_all.nbytes(); ++i)
      static_cast<unsigned char*>(src_all.raw())[i] = static_cast<unsigned char>((i * 7 + 3) % 251);
    const TensorView src = src_all.view().rows(1, n * d + 1).reshape({n, d});  // one element in
    Tensor index = Tensor::empty({m}, DType::kI32);
    for (int64_t i = 0; i < m; ++i)
      index.data<int32_t>()[i] = i % 5 == 3 ? -1 : static_cast<int32_t>((i * 37) % n);
    Tensor dst = Tensor::empty({m, d}, dtype);
#if defined(__x86_64__)
    ASSERT_TRUE(ref::use_streaming_stores(dst.raw(), static_cast<size_t>(row_bytes),
                                          dst.nbytes()));  // the path under test
#endif
    for (int threads : {1, 3}) {
      ContextOptions o;
      o.threads = threads;
      o.fine_grained_parallelism = true;
      std::unique_ptr<Context> c = Context::host(o);
      std::memset(dst.raw(), 0x5a, dst.nbytes());
      ASSERT_TRUE(gather_rows(*c, src, index, dst).ok());
      const size_t rb = static_cast<size_t>(row_bytes);
      const std::vector<unsigned char> zero(rb, 0);
      for (int64_t i = 0; i < m; ++i) {
        const int32_t t = index.data<int32_t>()[i];
        const void* want = t < 0 ? static_cast<const void*>(zero.data())
                                 : static_cast<const char*>(src.raw()) + t * rb;
        ASSERT_EQ(std::memcmp(static_cast<const char*>(dst.raw()) + i * rb, want, rb), 0)
            << dtype_name(dtype) << " row " << i << " threads " << threads;
      }
    }
  }
}

TEST(RowCopyTest, StreamingStoresNeedLargeAlignedRows) {
  alignas(64) static unsigned char buffer[256];
  const size_t big = ref::kStreamingStoreBytes;
  EXPECT_FALSE(ref::use_streaming_stores(buffer, 64, big - 1));  // small: ordinary stores
  EXPECT_FALSE(ref::use_streaming_stores(buffer, 24, big));      // rows not 16-byte multiples
  EXPECT_FALSE(ref::use_streaming_stores(buffer + 8, 64, big));  // unaligned start
#if defined(__x86_64__)
  EXPECT_TRUE(ref::use_streaming_stores(buffer, 64, big));
#endif
  // stream_row: a copy, or zeros from a null source, of exactly `bytes`.
  unsigned char src[96];
  for (int i = 0; i < 96; ++i) src[i] = static_cast<unsigned char>(i + 1);
  std::memset(buffer, 0xff, sizeof(buffer));
  ref::stream_row(buffer, src + 1, 80);  // 5 lanes: one 4-lane step and a remainder
  ref::stream_row(buffer + 128, nullptr, 48);
  ref::stream_fence();
  EXPECT_EQ(std::memcmp(buffer, src + 1, 80), 0);
  EXPECT_EQ(buffer[80], 0xff);
  for (int i = 128; i < 176; ++i) ASSERT_EQ(buffer[i], 0) << i;
  EXPECT_EQ(buffer[176], 0xff);
}

TEST(CombineTest, HandValuesAndBackwardMatchesFiniteDifferences) {
  // u[t] = sum_k gate[t, k] omega * y[row[t, k]]; row -1 is dropped.
  Tensor y = Tensor::from_vector<double>({3, 2}, {1, 2, 3, 4, 5, 6});
  Tensor row = Tensor::from_vector<int32_t>({2, 2}, {2, 0, -1, 1});
  Tensor gate = Tensor::from_vector<double>({2, 2}, {0.5, 0.25, 0.9, 2.0});
  Tensor omega = Tensor::from_vector<double>({2}, {1.0, 10.0});
  Tensor u = Tensor::empty({2, 2}, DType::kF64);
  ASSERT_TRUE(combine(ctx(), y, row, gate, omega, u).ok());
  EXPECT_EQ(to_vector<double>(u), (std::vector<double>{2.75, 35, 6, 80}));
  ASSERT_TRUE(combine(ctx(), y, row, gate, TensorView(), u).ok());
  EXPECT_EQ(to_vector<double>(u), (std::vector<double>{2.75, 3.5, 6, 8}));

  // Finite differences through y, the gates and omega.
  Tensor w = Tensor::empty({2, 2}, DType::kF64);
  fill_uniform(w, 3);
  auto loss = [&]() {
    EXPECT_TRUE(combine(ctx(), y, row, gate, omega, u).ok());
    return dot(u, w);
  };
  Tensor dy = Tensor::empty({3, 2}, DType::kF64), d_gate = Tensor::empty({2, 2}, DType::kF64);
  fill_uniform(dy, 4);  // overwritten (unreferenced rows zeroed)
  Tensor d_omega = Tensor::zeros({2}, DType::kF64);
  ASSERT_TRUE(combine_backward(ctx(), w, y, row, gate, omega, {dy, d_gate, d_omega}).ok());
  for (const auto& f :
       check_gradients(loss, {{"y", y, dy}, {"gate", gate, d_gate}, {"omega", omega, d_omega}})) {
    ADD_FAILURE() << f;
  }
  EXPECT_EQ(d_gate.data<double>()[2], 0.0);  // dropped choice
}

TEST(CombineTest, Bf16RowsWithF32Gates) {
  Tensor yf = Tensor::empty({3, 4}, DType::kF32), y16 = Tensor::empty({3, 4}, DType::kBF16);
  fill_uniform(y16, 5);
  for (int i = 0; i < 12; ++i) yf.data<float>()[i] = static_cast<float>(y16.data<bf16>()[i]);
  Tensor row = Tensor::from_vector<int32_t>({2, 2}, {2, 0, 1, -1});
  Tensor gate = Tensor::from_vector<float>({2, 2}, {0.7f, 0.3f, 1.f, 0.f});
  Tensor uf = Tensor::empty({2, 4}, DType::kF32), u16 = Tensor::empty({2, 4}, DType::kBF16);
  ASSERT_TRUE(combine(ctx(), yf, row, gate, TensorView(), uf).ok());
  ASSERT_TRUE(combine(ctx(), y16, row, gate, TensorView(), u16).ok());
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(static_cast<float>(u16.data<bf16>()[i]),
              static_cast<float>(bf16(uf.data<float>()[i])));
  }
  // Gates must be F (f32 for bf16 rows).
  expect_invalid(combine(ctx(), y16, row, Tensor::zeros({2, 2}, DType::kBF16), TensorView(), u16),
                 "gate");
  expect_invalid(combine(ctx(), yf, Tensor::from_vector<int32_t>({2, 2}, {3, 0, 0, 0}), gate,
                         TensorView(), uf),
                 "row[0] = 3");
}

}  // namespace
}  // namespace moe::kernels
