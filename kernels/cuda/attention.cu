// Causal multi-head attention on the GPU, the CPU reference's algorithm (kernels/cpu/
// attention_ref.cc): per sequence, strided-batched cuBLAS products over the heads for the scores
// and the values, and one block per score row for the masked softmax (max, exponentials, the sum
// in double, the saved logsumexp) and its backward. P is recomputed in the backward from the
// scores and the logsumexp, and the dropout mask is redrawn from the same Philox counters
// (ref::attention_keep's key). bf16 activations are widened to f32 once, computed in f32 (as the
// CPU does) and rounded once on output. Scores take B*H*S*S floats of scratch. This is the f32
// path and MOMOE_ATTENTION=gemm's; bf16 attention goes by default to the fused kernels of
// flash_attention.cu, or to attention_bf16.cu (the same products on bf16 operands) for heads
// wider than 128 (kernels/attention.h's cuda_attention).
#include <cmath>

#include "kernels/common.h"
#include "kernels/cpu/attention_ref.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_bf16.h"
#include "kernels/cuda/attention_heads.cuh"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/flash_attention.h"

namespace moe::kernels::cuda {
namespace {

constexpr int kRowThreads = 128;

__device__ __forceinline__ float dev_exp(float x) { return expf(x); }
__device__ __forceinline__ double dev_exp(double x) { return exp(x); }

// Block (b h, i): row i of the scores of head (b, h) in p [B*H, S, S] becomes the causal softmax,
// times the dropout scale where kept; lse [B*H*S] saved.
template <typename C, typename F>
__global__ void softmax_rows_kernel(AttentionArgs a, C* p, F* lse) {
  a = a.at_step();  // a step in device memory, read once
  __shared__ C cscratch[32];
  __shared__ double dscratch[32];
  const int64_t S = a.seq_len;
  const int64_t bh = blockIdx.x / S, i = blockIdx.x % S;
  const int64_t b = bh / a.heads, h = bh % a.heads;
  C* row = p + (bh * S + i) * S;
  C mx = -INFINITY;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) mx = max(mx, row[j]);
  mx = block_max(mx, cscratch);
  double sum = 0;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) {
    const C e = dev_exp(row[j] - mx);
    row[j] = e;
    sum += static_cast<double>(e);
  }
  sum = block_sum(sum, dscratch);
  if (threadIdx.x == 0) lse[bh * S + i] = static_cast<F>(static_cast<double>(mx) + log(sum));
  const C inv = static_cast<C>(1.0 / sum);
  const C inv_keep = static_cast<C>(1.0 / (1.0 - static_cast<double>(a.dropout)));
  for (int64_t j = threadIdx.x; j < S; j += blockDim.x) {
    C v = j <= i ? row[j] * inv : C(0);
    if (a.dropout > 0.f) v *= (j <= i && ref::attention_keep(a, b, h, i, j)) ? inv_keep : C(0);
    row[j] = v;
  }
}

// Backward, per row: p = exp(s - lse) (causal), the dropout scale m; in dp = dO V^T:
// dS_ij = P_ij (dP_ij m_ij - sum_j P_ij dP_ij m_ij); p becomes P * m (for dV).
template <typename C, typename F>
__global__ void softmax_backward_rows_kernel(AttentionArgs a, C* p, C* dp, const F* lse) {
  a = a.at_step();  // a step in device memory, read once
  __shared__ double dscratch[32];
  const int64_t S = a.seq_len;
  const int64_t bh = blockIdx.x / S, i = blockIdx.x % S;
  const int64_t b = bh / a.heads, h = bh % a.heads;
  C* prow = p + (bh * S + i) * S;
  C* drow = dp + (bh * S + i) * S;
  const C l = static_cast<C>(lse[bh * S + i]);
  const C inv_keep = static_cast<C>(1.0 / (1.0 - static_cast<double>(a.dropout)));
  double dot = 0;
  for (int64_t j = threadIdx.x; j < S; j += blockDim.x) {
    const C pj = j <= i ? dev_exp(prow[j] - l) : C(0);
    const C m =
        a.dropout > 0.f ? ((j <= i && ref::attention_keep(a, b, h, i, j)) ? inv_keep : C(0)) : C(1);
    const C g = j <= i ? drow[j] * m : C(0);
    prow[j] = pj;
    drow[j] = g;
    dot += static_cast<double>(pj) * static_cast<double>(g);
  }
  dot = block_sum(dot, dscratch);  // its barriers also order the writes above before the reads
  for (int64_t j = threadIdx.x; j < S; j += blockDim.x) {
    const double pj = prow[j];
    drow[j] = j <= i ? static_cast<C>(pj * (static_cast<double>(drow[j]) - dot)) : C(0);
    if (a.dropout > 0.f) {
      prow[j] =
          static_cast<C>(pj) * ((j <= i && ref::attention_keep(a, b, h, i, j)) ? inv_keep : C(0));
    }
  }
}

template <typename T>
const T* offset(const TensorView& t, int64_t elements) {
  return t.data<T>() + elements;
}
template <typename T>
T* offset_mut(const TensorView& t, int64_t elements) {
  return t.data<T>() + elements;
}

// A view in the compute dtype: `t` itself, or (bf16) a widened copy held in *storage.
StatusOr<TensorView> in_compute(Context& ctx, const TensorView& t, Tensor* storage) {
  const DType c = compute_dtype(t.dtype());
  if (c == t.dtype()) return t;
  MOE_ASSIGN_OR_RETURN(*storage, ctx.empty(t.shape(), c));
  MOE_RETURN_IF_ERROR(convert(ctx, t, *storage));
  return storage->view();
}

// A compute-dtype view to write `dst` through: dst itself, or (bf16) scratch in *storage that the
// caller converts into dst.
StatusOr<TensorView> out_compute(Context& ctx, const TensorView& dst, Tensor* storage) {
  const DType c = compute_dtype(dst.dtype());
  if (c == dst.dtype()) return dst;
  MOE_ASSIGN_OR_RETURN(*storage, ctx.empty(dst.shape(), c));
  return storage->view();
}

template <typename C, typename F>
Status forward_impl(Context& ctx, const AttentionArgs& a, const TensorView& qkv_in,
                    const TensorView& out, const TensorView& lse) {
  const DType cdt = dtype_of<C>;
  const Heads x{a.seq_len, a.heads, qkv_in.dim(1) / 3 / a.heads, qkv_in.dim(1) / 3};
  Tensor qkv_storage, o_storage;
  MOE_ASSIGN_OR_RETURN(TensorView qkv, in_compute(ctx, qkv_in, &qkv_storage));
  const bool widened = out.dtype() != cdt;
  MOE_ASSIGN_OR_RETURN(TensorView o, out_compute(ctx, out, &o_storage));
  MOE_ASSIGN_OR_RETURN(Tensor p, ctx.empty({a.batch * x.H, x.S, x.S}, cdt));
  const double scale = 1.0 / std::sqrt(static_cast<double>(x.Dh));
  for (int64_t b = 0; b < a.batch; ++b) {
    const int64_t base = b * x.S * 3 * x.D;
    MOE_RETURN_IF_ERROR(head_product_nt(ctx, {cdt, cdt}, x, offset<C>(qkv, base), 3 * x.D,
                                        offset<C>(qkv, base + x.D), scale,
                                        offset_mut<C>(p.view(), b * x.H * x.S * x.S)));
  }
  softmax_rows_kernel<C, F>
      <<<static_cast<unsigned>(a.batch * x.H * x.S), kRowThreads, 0, stream_of(ctx)>>>(
          a, p.data<C>(), lse.data<F>());
  MOE_RETURN_IF_ERROR(launch_status("attention_forward"));
  for (int64_t b = 0; b < a.batch; ++b) {
    MOE_RETURN_IF_ERROR(p_times(ctx, {cdt, cdt}, x, false, offset<C>(p.view(), b * x.H * x.S * x.S),
                                1.0,
                                {offset<C>(qkv, b * x.S * 3 * x.D + 2 * x.D), 3 * x.D,
                                 offset_mut<C>(o, b * x.S * x.D), x.D}));
  }
  if (widened) MOE_RETURN_IF_ERROR(convert(ctx, o, out));
  return Status::OK();
}

template <typename C, typename F>
Status backward_impl(Context& ctx, const AttentionArgs& a, const TensorView& d_out_in,
                     const TensorView& qkv_in, const TensorView& lse, const TensorView& d_qkv) {
  const DType cdt = dtype_of<C>;
  const Heads x{a.seq_len, a.heads, qkv_in.dim(1) / 3 / a.heads, qkv_in.dim(1) / 3};
  Tensor qkv_storage, dout_storage, g_storage;
  MOE_ASSIGN_OR_RETURN(TensorView qkv, in_compute(ctx, qkv_in, &qkv_storage));
  MOE_ASSIGN_OR_RETURN(TensorView dout, in_compute(ctx, d_out_in, &dout_storage));
  const bool widened = d_qkv.dtype() != cdt;
  MOE_ASSIGN_OR_RETURN(TensorView g, out_compute(ctx, d_qkv, &g_storage));
  const int64_t sq = x.S * x.S;
  MOE_ASSIGN_OR_RETURN(Tensor p, ctx.empty({a.batch * x.H, x.S, x.S}, cdt));
  MOE_ASSIGN_OR_RETURN(Tensor dp, ctx.empty({a.batch * x.H, x.S, x.S}, cdt));
  const double scale = 1.0 / std::sqrt(static_cast<double>(x.Dh));
  for (int64_t b = 0; b < a.batch; ++b) {
    const int64_t base = b * x.S * 3 * x.D;
    MOE_RETURN_IF_ERROR(head_product_nt(ctx, {cdt, cdt}, x, offset<C>(qkv, base), 3 * x.D,
                                        offset<C>(qkv, base + x.D), scale,
                                        offset_mut<C>(p.view(), b * x.H * sq)));
    MOE_RETURN_IF_ERROR(head_product_nt(ctx, {cdt, cdt}, x, offset<C>(dout, b * x.S * x.D), x.D,
                                        offset<C>(qkv, base + 2 * x.D), 1.0,
                                        offset_mut<C>(dp.view(), b * x.H * sq)));
  }
  softmax_backward_rows_kernel<C, F>
      <<<static_cast<unsigned>(a.batch * x.H * x.S), kRowThreads, 0, stream_of(ctx)>>>(
          a, p.data<C>(), dp.data<C>(), lse.data<F>());
  MOE_RETURN_IF_ERROR(launch_status("attention_backward"));
  for (int64_t b = 0; b < a.batch; ++b) {
    const int64_t base = b * x.S * 3 * x.D;
    // dV = P'^T dO; dQ = scale dS K; dK = scale dS^T Q.
    MOE_RETURN_IF_ERROR(
        p_times(ctx, {cdt, cdt}, x, true, offset<C>(p.view(), b * x.H * sq), 1.0,
                {offset<C>(dout, b * x.S * x.D), x.D, offset_mut<C>(g, base + 2 * x.D), 3 * x.D}));
    MOE_RETURN_IF_ERROR(
        p_times(ctx, {cdt, cdt}, x, false, offset<C>(dp.view(), b * x.H * sq), scale,
                {offset<C>(qkv, base + x.D), 3 * x.D, offset_mut<C>(g, base), 3 * x.D}));
    MOE_RETURN_IF_ERROR(
        p_times(ctx, {cdt, cdt}, x, true, offset<C>(dp.view(), b * x.H * sq), scale,
                {offset<C>(qkv, base), 3 * x.D, offset_mut<C>(g, base + x.D), 3 * x.D}));
  }
  if (widened) MOE_RETURN_IF_ERROR(convert(ctx, g, d_qkv));
  return Status::OK();
}

}  // namespace

Status attention_forward(Context& ctx, const AttentionArgs& args, const TensorView& qkv,
                         const TensorView& out, const TensorView& lse) {
  switch (cuda_attention(qkv.dtype(), qkv.dim(1) / 3 / args.heads)) {
    case CudaAttention::kFused:
      return fused_attention_forward(ctx, args, qkv, out, lse);
    case CudaAttention::kGemmBf16:
      return bf16_attention_forward(ctx, args, qkv, out, lse);
    case CudaAttention::kGemm:
      break;
  }
  Status done = Status::OK();
  MOE_RETURN_IF_ERROR(dispatch_act("attention_forward", qkv, [&](auto, auto ft) {
    using F = decltype(ft);
    done = forward_impl<F, F>(ctx, args, qkv, out, lse);
  }));
  return done;
}

Status attention_backward(Context& ctx, const AttentionArgs& args, const TensorView& d_out,
                          const TensorView& qkv, const TensorView& out, const TensorView& lse,
                          const TensorView& d_qkv) {
  switch (cuda_attention(qkv.dtype(), qkv.dim(1) / 3 / args.heads)) {
    case CudaAttention::kFused:
      return fused_attention_backward(ctx, args, d_out, qkv, out, lse, d_qkv);
    case CudaAttention::kGemmBf16:
      return bf16_attention_backward(ctx, args, d_out, qkv, lse, d_qkv);
    case CudaAttention::kGemm:
      break;
  }
  Status done = Status::OK();
  MOE_RETURN_IF_ERROR(dispatch_act("attention_backward", qkv, [&](auto, auto ft) {
    using F = decltype(ft);
    done = backward_impl<F, F>(ctx, args, d_out, qkv, lse, d_qkv);
  }));
  return done;
}

}  // namespace moe::kernels::cuda
