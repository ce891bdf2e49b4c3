// Finite-difference gradient checks for tests (double precision). A check perturbs every element
// of every named tensor by +-h, re-evaluates the scalar loss, and compares the central difference
// with the analytic gradient: |analytic - fd| <= atol + rtol * max(|analytic|, |fd|).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "base/context.h"
#include "base/rng.h"
#include "base/tensor.h"

namespace moe::testing {

// A process-wide host context whose tensors tests may read directly (unguarded).
Context& host_context();
// Copies a host view into a new tensor of `ctx` (stream-ordered; the host context copies now).
Tensor to_device(Context& ctx, const TensorView& host);

struct GradTarget {
  std::string name;
  TensorView value;     // f64, perturbed in place (restored afterwards)
  TensorView analytic;  // f64, same shape
};

struct GradCheckOptions {
  double h = 1e-6;
  double atol = 1e-7;
  double rtol = 1e-5;
  int max_failures_reported = 8;
};

// Returns a description of every mismatch (empty when all elements agree).
std::vector<std::string> check_gradients(const std::function<double()>& loss,
                                         const std::vector<GradTarget>& targets,
                                         const GradCheckOptions& options = {});

// Fills a float tensor (f32, f64 or bf16) with uniform values in [lo, hi) from a counter RNG.
void fill_uniform(const TensorView& t, uint64_t seed, double lo = -1.0, double hi = 1.0);
// sum(a * b) over elements, in double.
double dot(const TensorView& a, const TensorView& b);
// Largest |a - b| over elements; NaN when either side has a NaN (so `<= tol` fails). The shapes
// must match (checked: a programmer error). Cross-path comparisons use cross_path.h.
double max_abs_diff(const TensorView& a, const TensorView& b);
// True when the two tensors have the same dtype, shape and bytes.
bool bitwise_equal(const TensorView& a, const TensorView& b);

}  // namespace moe::testing
