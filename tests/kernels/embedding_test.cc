// Embedding lookup (kernels/embedding.h): forward against a plain gather, backward as an in-order
// accumulation (repeated ids add up; existing gradient is kept), against finite differences in
// f64, and errors for out-of-range ids and bad shapes or dtypes.
#include "kernels/embedding.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/testing/gradient_check.h"
#include "tests/testing/status_expect.h"

namespace moe::kernels {
namespace {

using moe::testing::check_gradients;
using moe::testing::dot;
using moe::testing::expect_invalid;
using moe::testing::fill_uniform;

Context& ctx() { return testing::host_context(); }

TEST(EmbeddingTest, LookupAndAccumulatingBackward) {
  Tensor table = Tensor::from_vector<float>({3, 2}, {1, 2, 3, 4, 5, 6});
  Tensor ids = Tensor::from_vector<int32_t>({4}, {2, 0, 2, 1});
  Tensor out = Tensor::empty({4, 2}, DType::kF32);
  ASSERT_TRUE(embedding_forward(ctx(), ids, table, {}, 1, out).ok());
  EXPECT_EQ(to_vector<float>(out), (std::vector<float>{5, 6, 1, 2, 5, 6, 3, 4}));
  Tensor d_table = Tensor::from_vector<float>({3, 2}, {100, 100, 0, 0, -1, 0});
  Tensor d_out = Tensor::from_vector<float>({4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  ASSERT_TRUE(embedding_backward(ctx(), ids, d_out, d_table, {}, 1).ok());
  // Row 0 (id 0 at position 1) keeps its 100s; row 2 gets positions 0 and 2 on top of -1, 0.
  EXPECT_EQ(to_vector<float>(d_table), (std::vector<float>{103, 104, 7, 8, 5, 8}));
}

TEST(EmbeddingTest, AwkwardShapesAgainstGatherAndFiniteDifferences) {
  struct Case {
    int64_t n, v, d;
  };
  for (const Case c : {Case{1, 1, 1}, Case{5, 3, 1}, Case{7, 3, 5}, Case{9, 11, 6}}) {
    SCOPED_TRACE(str_cat("N ", c.n, " V ", c.v, " D ", c.d));
    Tensor ids = Tensor::empty({c.n}, DType::kI32);
    for (int64_t i = 0; i < c.n; ++i)
      ids.data<int32_t>()[i] = static_cast<int32_t>((i * 7 + 2) % c.v);
    Tensor table = Tensor::empty({c.v, c.d}, DType::kF64);
    fill_uniform(table, 3);
    Tensor out = Tensor::empty({c.n, c.d}, DType::kF64);
    ASSERT_TRUE(embedding_forward(ctx(), ids, table, {}, 1, out).ok());
    for (int64_t i = 0; i < c.n; ++i) {
      for (int64_t j = 0; j < c.d; ++j) {
        EXPECT_EQ(out.data<double>()[i * c.d + j],
                  table.data<double>()[ids.data<int32_t>()[i] * c.d + j]);
      }
    }
    Tensor w = Tensor::empty({c.n, c.d}, DType::kF64);
    fill_uniform(w, 4);
    auto loss = [&]() {
      EXPECT_TRUE(embedding_forward(ctx(), ids, table, {}, 1, out).ok());
      return dot(out, w);
    };
    Tensor d_table = Tensor::zeros({c.v, c.d}, DType::kF64);
    ASSERT_TRUE(embedding_backward(ctx(), ids, w, d_table, {}, 1).ok());
    for (const auto& f : check_gradients(loss, {{"table", table, d_table}}, {1e-6, 1e-8, 1e-6})) {
      ADD_FAILURE() << f;
    }
  }
}

// Learned positions fused into the lookup: out[n] = table[ids[n]] + positions[n % S]; the
// backward adds each row's gradient to its token's and its position's rows.
TEST(EmbeddingTest, PositionsAndBf16Table) {
  Tensor table = Tensor::from_vector<float>({3, 2}, {1, 2, 3, 4, 5, 6});
  Tensor pos = Tensor::from_vector<float>({4, 2}, {10, 20, 30, 40, 50, 60, 70, 80});  // S_max 4
  Tensor ids = Tensor::from_vector<int32_t>({4}, {2, 0, 1, 1});  // B = 2 sequences of S = 2
  Tensor out = Tensor::empty({4, 2}, DType::kF32);
  ASSERT_TRUE(embedding_forward(ctx(), ids, table, pos, 2, out).ok());
  EXPECT_EQ(to_vector<float>(out), (std::vector<float>{15, 26, 31, 42, 13, 24, 33, 44}));
  Tensor d_table = Tensor::zeros({3, 2}, DType::kF32), d_pos = Tensor::zeros({4, 2}, DType::kF32);
  Tensor d_out = Tensor::from_vector<float>({4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  ASSERT_TRUE(embedding_backward(ctx(), ids, d_out, d_table, d_pos, 2).ok());
  EXPECT_EQ(to_vector<float>(d_table), (std::vector<float>{3, 4, 12, 14, 1, 2}));
  EXPECT_EQ(to_vector<float>(d_pos), (std::vector<float>{6, 8, 10, 12, 0, 0, 0, 0}));
  // A bf16 working table into bf16 activations (positions f32, the sum rounded once).
  Tensor table16 = Tensor::empty({3, 2}, DType::kBF16);
  for (int i = 0; i < 6; ++i) table16.data<bf16>()[i] = bf16(table.data<float>()[i]);
  Tensor out16 = Tensor::empty({4, 2}, DType::kBF16);
  ASSERT_TRUE(embedding_forward(ctx(), ids, table16, pos, 2, out16).ok());
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(static_cast<float>(out16.data<bf16>()[i]), out.data<float>()[i]);
  expect_invalid(embedding_forward(ctx(), ids, table, pos, 3, out), "positions");  // 4 % 3 != 0
}

TEST(EmbeddingTest, BadArgumentsAreInvalidArgument) {
  Tensor table = Tensor::zeros({3, 2}, DType::kF32);
  Tensor out = Tensor::from_vector<float>({3, 2}, {9, 9, 9, 9, 9, 9});
  Tensor high = Tensor::from_vector<int32_t>({3}, {2, 3, 0});
  Status s = embedding_forward(ctx(), high, table, {}, 1, out);
  expect_invalid(s, "id 3 at position 1");
  EXPECT_EQ(to_vector<float>(out), std::vector<float>(6, 9.f));  // untouched on error
  expect_invalid(
      embedding_forward(ctx(), Tensor::from_vector<int32_t>({3}, {0, 1, -1}), table, {}, 1, out),
      "id -1 at position 2");
  Tensor ids = Tensor::from_vector<int32_t>({3}, {0, 1, 2});
  expect_invalid(
      embedding_forward(ctx(), Tensor::from_vector<int64_t>({3}, {0, 1, 2}), table, {}, 1, out),
      "ids");
  expect_invalid(embedding_forward(ctx(), ids.view().reshape({3, 1}), table, {}, 1, out), "ids");
  expect_invalid(embedding_forward(ctx(), ids, Tensor::zeros({3, 2}, DType::kI32), {}, 1, out),
                 "table");
  expect_invalid(embedding_forward(ctx(), ids, Tensor::zeros({6}, DType::kF32), {}, 1, out),
                 "table");
  expect_invalid(embedding_forward(ctx(), ids, table, {}, 1, Tensor::zeros({3, 3}, DType::kF32)),
                 "out");
  expect_invalid(embedding_forward(ctx(), ids, table, {}, 1, Tensor::zeros({3, 2}, DType::kF64)),
                 "table has dtype f32, expected f64");
  Tensor d_table = Tensor::zeros({3, 2}, DType::kF32);
  expect_invalid(embedding_backward(ctx(), ids, Tensor::zeros({2, 2}, DType::kF32), d_table, {}, 1),
                 "d_out");
  expect_invalid(embedding_backward(ctx(), high, out, d_table, {}, 1), "id 3 at position 1");
  expect_invalid(embedding_backward(ctx(), ids, out, Tensor::zeros({3, 2}, DType::kI32), {}, 1),
                 "d_table");
}

}  // namespace
}  // namespace moe::kernels
