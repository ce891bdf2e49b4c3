// Loss-free balancing's bias update on the GPU: one thread runs the CPU reference's loop
// (kernels/cpu/load_balance_ref.h), so the sum, the mean and every update are the same doubles
// as on the CPU. E is the number of experts of one layer: a few hundred at most.
#include "kernels/cpu/load_balance_ref.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/load_balance.h"

namespace moe::kernels::cuda {
namespace {

template <typename T>
__global__ void score_bias_update_kernel(const double* load, int64_t n, double rate, T* bias) {
  if (blockIdx.x == 0 && threadIdx.x == 0) ref::score_bias_update<T>(load, n, rate, bias);
}

}  // namespace

Status score_bias_update(Context& ctx, const TensorView& load, double rate,
                         const TensorView& bias) {
  const int64_t n = load.numel();
  if (bias.dtype() == DType::kF64) {
    score_bias_update_kernel<double>
        <<<1, 1, 0, stream_of(ctx)>>>(load.data<double>(), n, rate, bias.data<double>());
  } else {
    score_bias_update_kernel<float>
        <<<1, 1, 0, stream_of(ctx)>>>(load.data<double>(), n, rate, bias.data<float>());
  }
  return launch_status("score_bias_update");
}

}  // namespace moe::kernels::cuda
