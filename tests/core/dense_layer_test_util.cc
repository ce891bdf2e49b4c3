#include "tests/core/dense_layer_test_util.h"

#include <gtest/gtest.h>

namespace moe::testing {

void randomize_parameters(ParameterSet* params, uint64_t seed, double lo, double hi) {
  if (!params->allocated()) {
    ASSERT_TRUE(params->allocate().ok());
  }
  uint64_t k = 0;
  for (const auto& p : params->all()) fill_uniform(p->master, seed + k++, lo, hi);
  ASSERT_TRUE(params->refresh_working().ok());
  ASSERT_TRUE(params->zero_grads().ok());
}

std::vector<GradTarget> parameter_targets(const ParameterSet& params) {
  std::vector<GradTarget> targets;
  for (const auto& p : params.all()) targets.push_back({p->name, p->master, p->grad});
  return targets;
}

std::vector<double> naive_matmul(const std::vector<double>& a, const std::vector<double>& b,
                                 int64_t m, int64_t k, int64_t n, bool b_transposed,
                                 const std::vector<double>& bias) {
  std::vector<double> c(m * n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = bias.empty() ? 0.0 : bias[j];
      for (int64_t x = 0; x < k; ++x)
        s += a[i * k + x] * (b_transposed ? b[j * k + x] : b[x * n + j]);
      c[i * n + j] = s;
    }
  }
  return c;
}

}  // namespace moe::testing
