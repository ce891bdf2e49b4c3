#include "core/train/gemm_rate.h"

#include <algorithm>
#include <chrono>

#include "kernels/gemm.h"

namespace moe {

StatusOr<double> measure_gemm_rate(Context& ctx, DType dtype, int64_t n, int repeats) {
  if (n < 1 || repeats < 1) {
    return invalid_argument_error("measure_gemm_rate: n = ", n, ", repeats = ", repeats);
  }
  MOE_ASSIGN_OR_RETURN(Tensor a, ctx.zeros({n, n}, dtype));
  MOE_ASSIGN_OR_RETURN(Tensor b, ctx.zeros({n, n}, dtype));
  MOE_ASSIGN_OR_RETURN(Tensor c, ctx.empty({n, n}, dtype));
  MOE_RETURN_IF_ERROR(kernels::gemm(ctx, a, false, b, true, c));  // warm-up (library set-up)
  MOE_RETURN_IF_ERROR(ctx.synchronize());
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    MOE_RETURN_IF_ERROR(kernels::gemm(ctx, a, false, b, true, c));
    MOE_RETURN_IF_ERROR(ctx.synchronize());
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * static_cast<double>(n) * static_cast<double>(n) *
                              static_cast<double>(n) / std::max(seconds, 1e-12));
  }
  return best;
}

}  // namespace moe
