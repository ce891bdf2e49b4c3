#include "tests/testing/gradient_check.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

namespace moe::testing {
namespace {
double load(const TensorView& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kF64:
      return t.data<double>()[i];
    case DType::kBF16:
      return static_cast<float>(t.data<bf16>()[i]);
    default:
      return t.data<float>()[i];
  }
}
}  // namespace

Context& host_context() {
  static std::unique_ptr<Context> ctx = Context::host();
  return *ctx;
}

Tensor to_device(Context& ctx, const TensorView& host) {
  StatusOr<Tensor> t = ctx.upload(host);
  MOE_CHECK(t.ok(), t.status().to_string());
  return std::move(t).value();
}

std::vector<std::string> check_gradients(const std::function<double()>& loss,
                                         const std::vector<GradTarget>& targets,
                                         const GradCheckOptions& options) {
  std::vector<std::string> failures;
  int reported = 0;
  for (const GradTarget& target : targets) {
    double* v = target.value.data<double>();
    const double* a = target.analytic.data<double>();
    for (int64_t i = 0; i < target.value.numel(); ++i) {
      const double saved = v[i];
      v[i] = saved + options.h;
      const double plus = loss();
      v[i] = saved - options.h;
      const double minus = loss();
      v[i] = saved;
      const double fd = (plus - minus) / (2 * options.h);
      const double tol = options.atol + options.rtol * std::max(std::fabs(a[i]), std::fabs(fd));
      if (!(std::fabs(a[i] - fd) <= tol)) {
        if (reported++ < options.max_failures_reported) {
          std::ostringstream os;
          os.precision(10);
          os << target.name << "[" << i << "]: analytic " << a[i] << " vs finite difference " << fd;
          failures.push_back(os.str());
        } else if (reported == options.max_failures_reported + 1) {
          failures.push_back("... more mismatches");
        }
      }
    }
  }
  return failures;
}

void fill_uniform(const TensorView& t, uint64_t seed, double lo, double hi) {
  CounterRng rng{seed, make_stream(RngTag::kTest, 0, 0)};
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double v = lo + (hi - lo) * rng.uniform(static_cast<uint64_t>(i));
    if (t.dtype() == DType::kF64) {
      t.data<double>()[i] = v;
    } else if (t.dtype() == DType::kBF16) {
      t.data<bf16>()[i] = bf16(static_cast<float>(v));
    } else {
      t.data<float>()[i] = static_cast<float>(v);
    }
  }
}

double dot(const TensorView& a, const TensorView& b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += load(a, i) * load(b, i);
  return s;
}

double max_abs_diff(const TensorView& a, const TensorView& b) {
  MOE_CHECK(a.shape() == b.shape(), "max_abs_diff: ", a.to_string(), " vs ", b.to_string());
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d = std::fabs(load(a, i) - load(b, i));
    if (std::isnan(d)) return d;  // a NaN on either side fails every `<= tol`
    m = std::max(m, d);
  }
  return m;
}

bool bitwise_equal(const TensorView& a, const TensorView& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

}  // namespace moe::testing
