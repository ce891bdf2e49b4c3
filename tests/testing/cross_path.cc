#include "tests/testing/cross_path.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "base/dtype.h"

namespace moe::testing {

ForwardDepth forward_depth(const ModelConfig& cfg) {
  ForwardDepth d;
  int depth = ForwardStages::kEmbedding;
  for (const BlockPlan& b : cfg.blocks) {
    depth += ForwardStages::kAttention;
    if (b.moe) {
      d.routers.push_back(depth + ForwardStages::kMoeToRouter);
      depth += ForwardStages::kMoeToRouter + ForwardStages::kMoeAfterRouter;
    } else {
      depth += ForwardStages::kDense;
    }
  }
  d.total = depth + ForwardStages::kHead;
  return d;
}

double rounding_tolerance(double eps, double depth, double scale) {
  return eps * depth * std::max(1.0, std::fabs(scale));
}

double loss_tolerance(double eps, double depth, double nll) {
  return eps * (depth + std::fabs(nll));
}

double bf16_backward_bound(int depth, int bf16_paths) {
  return 8 * 0x1p-8 * std::sqrt(2.0 * depth * bf16_paths);
}

namespace {

int64_t int_at(const TensorView& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kI32:
      return t.data<int32_t>()[i];
    case DType::kI64:
      return t.data<int64_t>()[i];
    case DType::kU8:
      return t.data<uint8_t>()[i];
    default:
      break;
  }
  MOE_CHECK(false, "decisions must be i32, i64 or u8, got ", t.to_string());
  return 0;
}

double float_at(const TensorView& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kF64:
      return t.data<double>()[i];
    case DType::kF32:
      return t.data<float>()[i];
    case DType::kBF16:
      return static_cast<float>(t.data<bf16>()[i]);
    default:
      break;
  }
  MOE_CHECK(false, "values must be f64, f32 or bf16, got ", t.to_string());
  return 0;
}

}  // namespace

std::string DecisionFlips::to_string() const {
  std::string s = str_cat(flipped, " of ", rows, " rows differ");
  if (first >= 0) s += str_cat(" (first: row ", first, ")");
  return s;
}

DecisionFlips count_flips(const TensorView& a, const TensorView& b) {
  MOE_CHECK(a.shape() == b.shape() && a.ndim() >= 1, "count_flips: ", a.to_string(), " vs ",
            b.to_string());
  DecisionFlips f;
  f.rows = a.numel() == 0 ? 0 : a.dim(0);
  const int64_t per_row = f.rows == 0 ? 0 : a.numel() / f.rows;
  for (int64_t r = 0; r < f.rows; ++r) {
    for (int64_t j = 0; j < per_row; ++j) {
      if (int_at(a, r * per_row + j) != int_at(b, r * per_row + j)) {
        if (f.first < 0) f.first = r;
        ++f.flipped;
        break;
      }
    }
  }
  return f;
}

::testing::AssertionResult same_decisions(const std::string& what, const TensorView& a,
                                          const TensorView& b) {
  if (a.shape() != b.shape()) {
    return ::testing::AssertionFailure()
           << what << ": decisions " << a.to_string() << " and " << b.to_string();
  }
  const DecisionFlips f = count_flips(a, b);
  if (f.flipped == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << f.to_string();
}

std::string ValueDiff::to_string() const {
  if (shape_mismatch) return "the shapes differ";
  std::string s = str_cat("max |a - b| ", max_abs);
  if (worst >= 0) s += str_cat(" at element ", worst, " (", a_worst, " vs ", b_worst, ")");
  if (nans > 0) s += str_cat("; ", nans, " NaN elements");
  return s;
}

ValueDiff value_diff(const TensorView& a, const TensorView& b) {
  ValueDiff d;
  if (a.shape() != b.shape()) {
    d.shape_mismatch = true;
    return d;
  }
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = float_at(a, i), y = float_at(b, i);
    if (std::isnan(x) || std::isnan(y)) {
      ++d.nans;
      continue;
    }
    const double diff = std::fabs(x - y);  // inf - inf is NaN: counted below as a mismatch
    if (!(diff <= d.max_abs)) {
      d.max_abs = std::isnan(diff) ? std::numeric_limits<double>::infinity() : diff;
      d.worst = i;
      d.a_worst = x;
      d.b_worst = y;
    }
  }
  return d;
}

namespace {
::testing::AssertionResult verdict(const std::string& what, const ValueDiff& d, double tol) {
  if (!d.shape_mismatch && d.nans == 0 && d.max_abs <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << d.to_string() << " (bound " << tol << ")";
}
}  // namespace

::testing::AssertionResult values_within(const std::string& what, const TensorView& a,
                                         const TensorView& b, double tol) {
  return verdict(what, value_diff(a, b), tol);
}

::testing::AssertionResult values_within(const std::string& what, const std::vector<double>& a,
                                         const std::vector<double>& b, double tol) {
  const TensorView va(const_cast<double*>(a.data()), DType::kF64,
                      Shape({static_cast<int64_t>(a.size())}));
  const TensorView vb(const_cast<double*>(b.data()), DType::kF64,
                      Shape({static_cast<int64_t>(b.size())}));
  return verdict(what, value_diff(va, vb), tol);
}

}  // namespace moe::testing
