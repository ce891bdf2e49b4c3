// Rotary position embeddings (kernels/rope.h): hand values (the rotate_half pairing, the head
// layout), a double-precision computation for awkward shapes and every dtype, the properties
// that make it RoPE (each pair's norm kept, position 0 the identity, q.k depending on the
// relative position only, v untouched, in place the same as out of place), the backward against
// central finite differences in f64 and as the inverse of the forward, and argument errors.
#include "kernels/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/testing/gradient_check.h"
#include "tests/testing/status_expect.h"

namespace moe::kernels {
namespace {

using moe::testing::bitwise_equal;
using moe::testing::check_gradients;
using moe::testing::dot;
using moe::testing::expect_invalid;
using moe::testing::fill_uniform;

Context& ctx() { return testing::host_context(); }

struct Case {
  int64_t batch, seq, heads, head_dim;
  double base;
  int64_t d() const { return heads * head_dim; }
  int64_t rows() const { return batch * seq; }
  RopeArgs args() const { return {batch, seq, heads, base}; }
};
std::string name(const Case& c) {
  return str_cat("B", c.batch, "_S", c.seq, "_H", c.heads, "_Dh", c.head_dim, "_base", c.base);
}

// The relative rounding error of the activations, and of the cos and sin table (F).
double act_unit(DType dt) {
  return dt == DType::kF64 ? 0x1p-53 : dt == DType::kF32 ? 0x1p-24 : 0x1p-8;
}
double table_unit(DType dt) { return dt == DType::kF64 ? 0x1p-53 : 0x1p-24; }

double at(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kF64:
      return t.data<double>()[i];
    case DType::kF32:
      return t.data<float>()[i];
    default:
      return static_cast<float>(t.data<bf16>()[i]);
  }
}

// The rotation by explicit loops in double, written from the convention (sign -1: backward).
std::vector<double> naive_rope(const Tensor& qkv, const Case& c, double sign) {
  const int64_t D = c.d(), half = c.head_dim / 2;
  std::vector<double> y(static_cast<size_t>(c.rows() * 3 * D));
  for (int64_t i = 0; i < c.rows() * 3 * D; ++i) y[i] = at(qkv, i);
  for (int64_t r = 0; r < c.rows(); ++r) {
    const double pos = static_cast<double>(r % c.seq);
    for (int64_t block = 0; block < 2; ++block) {
      for (int64_t h = 0; h < c.heads; ++h) {
        const int64_t col = r * 3 * D + block * D + h * c.head_dim;
        for (int64_t i = 0; i < half; ++i) {
          const double theta = pos / std::pow(c.base, 2.0 * i / c.head_dim);
          const double x0 = at(qkv, col + i), x1 = at(qkv, col + i + half);
          y[col + i] = x0 * std::cos(theta) - sign * x1 * std::sin(theta);
          y[col + i + half] = x1 * std::cos(theta) + sign * x0 * std::sin(theta);
        }
      }
    }
  }
  return y;
}

// One head of width 4 at positions 0 and 1, base 100: pairs (0, 2) turn by s * 1 and (1, 3) by
// s * 100^(-1/2) = s / 10. cos and sin of 1 and 0.1 written out.
TEST(RopeTest, HandValuesPairTheHalves) {
  const double c1 = 0.54030230586813977, s1 = 0.84147098480789651;
  const double c01 = 0.99500416527802577, s01 = 0.099833416646828155;
  Tensor qkv = Tensor::from_vector<double>(
      {2, 12}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 1, 2, 3, 4, -1, 0, 2, 0.5, 9, 10, 11, 12});
  Tensor y = Tensor::empty({2, 12}, DType::kF64);
  ASSERT_TRUE(rope_forward(ctx(), {1, 2, 1, 100.0}, qkv, y).ok());
  const std::vector<double> want = {1,
                                    2,
                                    3,
                                    4,
                                    5,
                                    6,
                                    7,
                                    8,
                                    9,
                                    10,
                                    11,
                                    12,  // position 0: the identity
                                    1 * c1 - 3 * s1,
                                    2 * c01 - 4 * s01,
                                    3 * c1 + 1 * s1,
                                    4 * c01 + 2 * s01,  // q
                                    -1 * c1 - 2 * s1,
                                    0 * c01 - 0.5 * s01,
                                    2 * c1 + -1 * s1,
                                    0.5 * c01 + 0 * s01,  // k
                                    9,
                                    10,
                                    11,
                                    12};  // v
  for (int i = 0; i < 24; ++i) EXPECT_NEAR(y.data<double>()[i], want[i], 4e-15) << i;
}

// Two heads of width 2 (one pair each, turning by s radians): pairs stay inside their head.
TEST(RopeTest, HandValuesKeepPairsInsideTheirHead) {
  Tensor qkv = Tensor::zeros({3, 12}, DType::kF64);
  for (int64_t r = 0; r < 3; ++r) {
    for (int64_t j = 0; j < 8; ++j) qkv.data<double>()[r * 12 + j] = j % 2 == 0 ? 1.0 : 0.0;
  }
  Tensor y = Tensor::empty({3, 12}, DType::kF64);
  ASSERT_TRUE(rope_forward(ctx(), {1, 3, 2, 10000.0}, qkv, y).ok());
  const double cos_s[3] = {1, 0.54030230586813977, -0.41614683654714241};
  const double sin_s[3] = {0, 0.84147098480789651, 0.90929742682568170};
  for (int64_t r = 0; r < 3; ++r) {
    for (int64_t j = 0; j < 8; j += 2) {  // (1, 0) turned by r radians, in q and k of each head
      EXPECT_NEAR(y.data<double>()[r * 12 + j], cos_s[r], 4e-16) << r << " " << j;
      EXPECT_NEAR(y.data<double>()[r * 12 + j + 1], sin_s[r], 4e-16) << r << " " << j;
    }
  }
}

const Case kCases[] = {{1, 1, 1, 2, 10000.0},
                       {2, 3, 2, 4, 10000.0},
                       {3, 5, 3, 6, 500.0},
                       {1, 17, 1, 8, 1e6},
                       {2, 9, 4, 2, 10.0}};

TEST(RopeTest, ForwardMatchesDoublePrecisionInEveryDtype) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(name(c));
    for (DType dt : {DType::kF64, DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(dtype_name(dt));
      Tensor qkv = Tensor::empty({c.rows(), 3 * c.d()}, dt), y = Tensor::empty(qkv.shape(), dt);
      fill_uniform(qkv, 1, -2, 2);
      ASSERT_TRUE(rope_forward(ctx(), c.args(), qkv, y).ok());
      const std::vector<double> want = naive_rope(qkv, c, 1.0);
      // cos and sin rounded to F and the result to act, and the angle (< S) off by a few ulps:
      // |error| <= (|x0| + |x1|) (u_F + angle error) + |y| u_act, with |y| <= |x0| + |x1| <= 4.
      const double angle_error = 4 * static_cast<double>(c.seq) * 0x1p-53;
      const double tol = 4 * (table_unit(dt) + act_unit(dt) + angle_error) * 1.01;
      for (int64_t i = 0; i < y.numel(); ++i) EXPECT_NEAR(at(y, i), want[i], tol) << i;
    }
  }
}

// bf16 activations use the f32 table and arithmetic: the result is the f32 one rounded once.
TEST(RopeTest, Bf16IsTheF32ResultRounded) {
  const Case c{2, 6, 2, 8, 10000.0};
  Tensor xb = Tensor::empty({c.rows(), 3 * c.d()}, DType::kBF16);
  fill_uniform(xb, 3, -3, 3);
  Tensor xf = Tensor::empty(xb.shape(), DType::kF32);
  for (int64_t i = 0; i < xb.numel(); ++i) xf.data<float>()[i] = at(xb, i);
  Tensor yb = Tensor::empty(xb.shape(), DType::kBF16), yf = Tensor::empty(xb.shape(), DType::kF32);
  ASSERT_TRUE(rope_forward(ctx(), c.args(), xb, yb).ok());
  ASSERT_TRUE(rope_forward(ctx(), c.args(), xf, yf).ok());
  for (int64_t i = 0; i < yb.numel(); ++i) {
    EXPECT_EQ(at(yb, i), static_cast<float>(bf16(yf.data<float>()[i]))) << i;
  }
}

// Each pair keeps its norm; position 0 and v come out bit for bit; in place gives the same bits.
TEST(RopeTest, KeepsPairNormsPositionZeroAndV) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(name(c));
    for (DType dt : {DType::kF64, DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(dtype_name(dt));
      const int64_t D = c.d(), half = c.head_dim / 2;
      Tensor qkv = Tensor::empty({c.rows(), 3 * D}, dt), y = Tensor::empty(qkv.shape(), dt);
      fill_uniform(qkv, 5, -1, 1);
      ASSERT_TRUE(rope_forward(ctx(), c.args(), qkv, y).ok());
      // |x| <= 1: each element off by <= 2 u_F + sqrt 2 u_act (the test above), the norm by
      // <= sqrt 2 times that, and each hypot by an ulp of its <= sqrt 2.
      const double tol = 8 * (table_unit(dt) + act_unit(dt));
      for (int64_t r = 0; r < c.rows(); ++r) {
        for (int64_t j = 0; j < 3 * D; ++j) {
          const int64_t i = r * 3 * D + j;
          if (j >= 2 * D || r % c.seq == 0) {
            EXPECT_EQ(at(y, i), at(qkv, i)) << r << " " << j;
          }
          if (j >= 2 * D || j % c.head_dim >= half) continue;
          const double n_in = std::hypot(at(qkv, i), at(qkv, i + half));
          const double n_out = std::hypot(at(y, i), at(y, i + half));
          EXPECT_NEAR(n_out, n_in, tol) << r << " " << j;
        }
      }
      Tensor in_place = Tensor::copy_of(qkv);
      ASSERT_TRUE(rope_forward(ctx(), c.args(), in_place, in_place).ok());
      EXPECT_TRUE(bitwise_equal(in_place, y));
    }
  }
}

// The same q and k at every position: the rotated q at s dotted with the rotated k at s', per
// head, depends on s - s' only (and does depend on it).
TEST(RopeTest, ScoresDependOnTheRelativePositionOnly) {
  const int64_t S = 12, H = 2, Dh = 6, D = H * Dh;
  Tensor one = Tensor::empty({1, 3 * D}, DType::kF64);
  fill_uniform(one, 7);
  Tensor qkv = Tensor::empty({S, 3 * D}, DType::kF64);
  for (int64_t r = 0; r < S; ++r) {
    for (int64_t j = 0; j < 3 * D; ++j) qkv.data<double>()[r * 3 * D + j] = at(one, j);
  }
  ASSERT_TRUE(rope_forward(ctx(), {1, S, H, 100.0}, qkv, qkv).ok());
  const double* y = qkv.data<double>();
  auto score = [&](int64_t h, int64_t s_q, int64_t s_k) {
    double sum = 0;
    for (int64_t k = 0; k < Dh; ++k)
      sum += y[s_q * 3 * D + h * Dh + k] * y[s_k * 3 * D + D + h * Dh + k];
    return sum;
  };
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t delta = -(S - 1); delta < S; ++delta) {
      const int64_t s0 = std::max<int64_t>(0, delta);  // the first (s_q, s_q - delta) in range
      const double first = score(h, s0, s0 - delta);
      for (int64_t s_q = s0 + 1; s_q < S && s_q - delta < S; ++s_q) {
        EXPECT_NEAR(score(h, s_q, s_q - delta), first, 1e-12) << h << " " << delta << " " << s_q;
      }
      if (delta != 0) {
        EXPECT_GT(std::fabs(first - score(h, 0, 0)), 1e-6) << h << " " << delta;
      }
    }
  }
}

TEST(RopeTest, BackwardMatchesFiniteDifferencesAndInvertsTheForward) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(name(c));
    Tensor x = Tensor::empty({c.rows(), 3 * c.d()}, DType::kF64);
    Tensor y = Tensor::empty(x.shape(), DType::kF64), w = Tensor::empty(x.shape(), DType::kF64);
    fill_uniform(x, 11, -2, 2);
    fill_uniform(w, 12);
    auto loss = [&]() {
      EXPECT_TRUE(rope_forward(ctx(), c.args(), x, y).ok());
      return dot(y, w);
    };
    Tensor dx = Tensor::empty(x.shape(), DType::kF64);
    fill_uniform(dx, 13);  // overwritten
    ASSERT_TRUE(rope_backward(ctx(), c.args(), w, dx).ok());
    for (const auto& f : check_gradients(loss, {{"qkv", x, dx}})) ADD_FAILURE() << f;
    // The explicit transpose (to the angles' few ulps, as above), and in place the same bits.
    const std::vector<double> want = naive_rope(w, c, -1.0);
    for (int64_t i = 0; i < dx.numel(); ++i) EXPECT_NEAR(dx.data<double>()[i], want[i], 1e-13);
    Tensor in_place = Tensor::copy_of(w);
    ASSERT_TRUE(rope_backward(ctx(), c.args(), in_place, in_place).ok());
    EXPECT_TRUE(bitwise_equal(in_place, dx));
    // A rotation's transpose is its inverse.
    ASSERT_TRUE(rope_forward(ctx(), c.args(), x, y).ok());
    ASSERT_TRUE(rope_backward(ctx(), c.args(), y, y).ok());
    EXPECT_LT(moe::testing::max_abs_diff(y, x), 1e-14);
  }
}

TEST(RopeTest, BadArgumentsAreInvalidArgument) {
  Tensor qkv = Tensor::zeros({6, 12}, DType::kF32), out = Tensor::zeros({6, 12}, DType::kF32);
  const RopeArgs good{2, 3, 2, 10000.0};
  ASSERT_TRUE(rope_forward(ctx(), good, qkv, out).ok());
  ASSERT_TRUE(rope_backward(ctx(), good, qkv, out).ok());
  // D = 4 over H = 4 heads: width 1, odd.
  expect_invalid(rope_forward(ctx(), {2, 3, 4, 10000.0}, qkv, out), {"head width", "odd"});
  Tensor odd = Tensor::zeros({6, 18}, DType::kF32);  // D = 6, H = 2: width 3
  expect_invalid(rope_forward(ctx(), good, odd, odd), {"head width D / H = 3", "odd"});
  expect_invalid(rope_forward(ctx(), {2, 3, 5, 10000.0}, qkv, out), {"qkv", "divisible by H = 5"});
  expect_invalid(rope_forward(ctx(), {2, 2, 2, 10000.0}, qkv, out), {"qkv", "[4, 3*D]"});
  expect_invalid(rope_forward(ctx(), good, qkv.view().reshape({72}), out), "qkv");
  expect_invalid(rope_forward(ctx(), good, Tensor::zeros({6, 12}, DType::kI32), out), "qkv");
  expect_invalid(rope_forward(ctx(), good, qkv, Tensor::zeros({6, 12}, DType::kF64)), "out");
  expect_invalid(rope_forward(ctx(), good, qkv, Tensor::zeros({3, 24}, DType::kF32)), "out");
  expect_invalid(rope_forward(ctx(), {0, 3, 2, 10000.0}, qkv, out), "batch");
  expect_invalid(rope_forward(ctx(), {2, 3, 2, 0.0}, qkv, out), "base");
  expect_invalid(rope_forward(ctx(), {2, 3, 2, std::nan("")}, qkv, out), "base");
  expect_invalid(rope_backward(ctx(), good, Tensor::zeros({6, 8}, DType::kF32), out), "d_out");
  expect_invalid(rope_backward(ctx(), good, qkv, Tensor::zeros({6, 6}, DType::kF32)), "d_qkv");
}

}  // namespace
}  // namespace moe::kernels
