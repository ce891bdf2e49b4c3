// Launches the fused attention kernels of flash_attention_kernels.cuh (their algorithm and
// arithmetic are described there) on the context's stream.
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/flash_attention.h"
#include "kernels/cuda/warp_mma.cuh"
// After the primitives it is written against.
#include "kernels/cuda/flash_attention_kernels.cuh"

namespace moe::kernels::cuda {
namespace {

using flash::FlashParams;
using flash::kFlashThreads;
using flash::kTile;

// Launches kernel over (B*H, S / 64 tiles) with `bytes` of shared memory.
template <typename Kernel>
Status launch(Context& ctx, const char* op, Kernel kernel, size_t bytes, const FlashParams& f) {
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(bytes));
  if (err != cudaSuccess) {
    return internal_error("cuda: ", op, ": cannot reserve ", bytes,
                          " bytes of shared memory: ", cudaGetErrorString(err));
  }
  const dim3 grid(static_cast<unsigned>(f.a.batch * f.a.heads),
                  static_cast<unsigned>((f.a.seq_len + kTile - 1) / kTile));
  kernel<<<grid, kFlashThreads, bytes, stream_of(ctx)>>>(f);
  return launch_status(op);
}

Status check_launchable(const char* op, const AttentionArgs& a, int64_t dh) {
  if (dh < 1 || dh > kFusedAttentionMaxHeadDim) {
    return invalid_argument_error(op, ": the fused kernels take heads of 1 to ",
                                  kFusedAttentionMaxHeadDim, " columns, got ", dh);
  }
  if (a.batch * a.heads > int64_t{0x7fffffff} || (a.seq_len + kTile - 1) / kTile > kMaxGridY) {
    return invalid_argument_error(op, ": ", a.batch, " x ", a.heads, " heads of ", a.seq_len,
                                  " positions exceed the fused kernels' grid");
  }
  return Status::OK();
}

}  // namespace

Status fused_attention_forward(Context& ctx, const AttentionArgs& a, const TensorView& qkv,
                               const TensorView& out, const TensorView& lse) {
  constexpr const char* kOp = "attention_forward (fused)";
  const int64_t dh = qkv.dim(1) / 3 / a.heads;
  MOE_RETURN_IF_ERROR(check_launchable(kOp, a, dh));
  FlashParams f = flash::params_of(a, dh);
  f.qkv = qkv.data<bf16>();
  f.out = out.data<bf16>();
  f.lse = lse.data<float>();
  f.words = flash::copies_words(dh, {f.qkv});
  return flash::with_head_width(dh, [&](auto hd) {
    constexpr int HD = decltype(hd)::value;
    return launch(ctx, kOp, flash::flash_forward_kernel<HD>, flash::ForwardSmem<HD>::kBytes, f);
  });
}

Status fused_attention_backward(Context& ctx, const AttentionArgs& a, const TensorView& d_out,
                                const TensorView& qkv, const TensorView& out, const TensorView& lse,
                                const TensorView& d_qkv) {
  constexpr const char* kOp = "attention_backward (fused)";
  const int64_t dh = qkv.dim(1) / 3 / a.heads;
  MOE_RETURN_IF_ERROR(check_launchable(kOp, a, dh));
  // D_i per row, from the dq kernel to the dkv kernel (stream order between them).
  MOE_ASSIGN_OR_RETURN(Tensor dsum, ctx.empty({a.batch, a.heads, a.seq_len}, DType::kF32));
  FlashParams f = flash::params_of(a, dh);
  f.qkv = qkv.data<bf16>();
  f.d_out = d_out.data<bf16>();
  f.out = out.data<bf16>();  // read: D_i = d_out_i . out_i
  f.lse = lse.data<float>();
  f.dsum = dsum.data<float>();
  f.d_qkv = d_qkv.data<bf16>();
  f.words = flash::copies_words(dh, {f.qkv, f.d_out, f.out});
  return flash::with_head_width(dh, [&](auto hd) -> Status {
    constexpr int HD = decltype(hd)::value;
    MOE_RETURN_IF_ERROR(
        launch(ctx, kOp, flash::flash_backward_dq_kernel<HD>, flash::DqSmem<HD>::kBytes, f));
    return launch(ctx, kOp, flash::flash_backward_dkv_kernel<HD>, flash::DkvSmem<HD>::kBytes, f);
  });
}

}  // namespace moe::kernels::cuda
