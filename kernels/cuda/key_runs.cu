#include <cub/device/device_radix_sort.cuh>
#include <limits>

#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/key_runs.h"

namespace moe::kernels::cuda {
namespace {

__global__ void iota_kernel(int64_t n, int32_t* out) {
  MOE_GRID_LOOP(i, n) { out[i] = static_cast<int32_t>(i); }
}

}  // namespace

StatusOr<KeyRuns> sort_rows_by_key(Context& ctx, const TensorView& keys) {
  const int64_t n = keys.numel();
  if (n > std::numeric_limits<int32_t>::max()) {
    return invalid_argument_error("sort_rows_by_key: ", n, " rows do not fit int32 row indices");
  }
  KeyRuns out;
  MOE_ASSIGN_OR_RETURN(out.keys, ctx.empty({std::max<int64_t>(n, 1)}, DType::kI32));
  MOE_ASSIGN_OR_RETURN(out.rows, ctx.empty({std::max<int64_t>(n, 1)}, DType::kI32));
  if (n == 0) return out;
  MOE_ASSIGN_OR_RETURN(Tensor rows_in, ctx.empty({n}, DType::kI32));
  cudaStream_t s = stream_of(ctx);
  iota_kernel<<<grid_for(n), kThreads, 0, s>>>(n, rows_in.data<int32_t>());
  MOE_RETURN_IF_ERROR(launch_status("sort_rows_by_key"));
  // An LSD radix sort is stable: equal keys keep their rows' ascending order.
  const int items = static_cast<int>(n);
  size_t temp_bytes = 0;
  cudaError_t err = cub::DeviceRadixSort::SortPairs(
      nullptr, temp_bytes, keys.data<int32_t>(), out.keys.data<int32_t>(), rows_in.data<int32_t>(),
      out.rows.data<int32_t>(), items, 0, 32, s);
  if (err != cudaSuccess) {
    return internal_error("cuda: sort_rows_by_key (size query): ", cudaGetErrorString(err));
  }
  MOE_ASSIGN_OR_RETURN(
      Tensor temp, ctx.empty({std::max<int64_t>(1, static_cast<int64_t>(temp_bytes))}, DType::kU8));
  err = cub::DeviceRadixSort::SortPairs(temp.raw(), temp_bytes, keys.data<int32_t>(),
                                        out.keys.data<int32_t>(), rows_in.data<int32_t>(),
                                        out.rows.data<int32_t>(), items, 0, 32, s);
  note_captured("sort_rows_by_key (CUB)");
  if (err != cudaSuccess) {
    return internal_error("cuda: sort_rows_by_key: ", cudaGetErrorString(err));
  }
  return out;
}

}  // namespace moe::kernels::cuda
