// Helpers shared by the dense layer tests: random parameters, one finite-difference target per
// parameter, naive row-major products.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "core/layers/parameters.h"
#include "tests/testing/gradient_check.h"
#include "tests/testing/status_expect.h"

namespace moe::testing {

// Central differences in f64 with a tight tolerance (h, atol, rtol).
inline const GradCheckOptions kFiniteDiff{1e-6, 1e-8, 1e-6};

// Allocates the set (if needed), fills parameter k's master with uniform values in [lo, hi) from
// seed + k, refreshes the working copies, and zeroes every gradient. The host test context's
// memory is readable by the tests.
void randomize_parameters(ParameterSet* params, uint64_t seed, double lo = -0.5, double hi = 0.5);
// One target per parameter: the value perturbed, the accumulated gradient compared.
std::vector<GradTarget> parameter_targets(const ParameterSet& params);

// Naive c [M, N] = a [M, K] b [K, N] (b_transposed: b is [N, K]) + bias [N] (empty: none).
std::vector<double> naive_matmul(const std::vector<double>& a, const std::vector<double>& b,
                                 int64_t m, int64_t k, int64_t n, bool b_transposed,
                                 const std::vector<double>& bias = {});

}  // namespace moe::testing
