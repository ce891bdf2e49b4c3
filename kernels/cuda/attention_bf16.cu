// Causal attention on bf16 operands through cuBLAS (attention_bf16.h). Per sequence, strided
// over the heads (attention_heads.cuh):
//   forward:  s = scale Q K^T (bf16 operands, f32 scores); per row, the max and the sum of
//             exp(s - max) in double give lse = max + log(sum), saved in f32; then
//             P = exp(s - lse) times the dropout scale where kept, rounded to bf16; O = P V,
//             rounded to bf16 once.
//   backward: s again (the same call: the same bits) and dP = dO V^T (f32); per row, P as in
//             the forward, m the dropout scale, D_i = sum_j P_ij m_ij dP_ij in double;
//             dS = P (m dP - D) and P m, each rounded to bf16; dV = (P m)^T dO,
//             dQ = scale dS K, dK = scale dS^T Q, each rounded to bf16 once.
// Where this differs from the CPU reference (kernels/cpu/attention_ref.cc): P and dS are
// rounded to bf16 before their products, and the products accumulate on tensor cores (f32, in
// cuBLAS's order). Those are the fused kernels' roundings (flash_attention.cu; there D_i sums in
// f32, here in double), inside the bound of tests/testing/attention_bound.h. Entries above the
// diagonal are exact zeros, so the full S x S products add nothing there. Deterministic: cuBLAS's
// products and the row kernels' fixed trees give the same bits run to run.
#include <cmath>

#include "kernels/cpu/attention_ref.h"
#include "kernels/cuda/attention_bf16.h"
#include "kernels/cuda/attention_heads.cuh"
#include "kernels/cuda/cuda_util.cuh"

namespace moe::kernels::cuda {
namespace {

constexpr int kRowThreads = 128;
constexpr ProductTypes kScores{DType::kBF16, DType::kF32};   // bf16 operands, f32 scores
constexpr ProductTypes kValues{DType::kBF16, DType::kBF16};  // bf16 operands, bf16 output

// The dropout scale of element (b, h, i, j <= i): 1 / (1 - p) where kept, 0 where dropped.
__device__ __forceinline__ float keep_scale(const AttentionArgs& a, int64_t b, int64_t h, int64_t i,
                                            int64_t j, float inv_keep) {
  if (a.dropout == 0.f) return 1.f;
  return ref::attention_keep(a, b, h, i, j) ? inv_keep : 0.f;
}

// Block (b h, i): row i of the f32 scores s [B*H, S, S] -> lse [B*H*S] and the row of
// P [B*H, S, S] (bf16): exp(s - lse) times the dropout scale for j <= i, 0 above the diagonal.
__global__ void softmax_rows_bf16_kernel(AttentionArgs a, const float* s, bf16* p, float* lse) {
  a = a.at_step();  // a step in device memory, read once
  __shared__ float fscratch[32];
  __shared__ double dscratch[32];
  const int64_t S = a.seq_len;
  const int64_t bh = blockIdx.x / S, i = blockIdx.x % S;
  const int64_t b = bh / a.heads, h = bh % a.heads;
  const float* row = s + (bh * S + i) * S;
  bf16* prow = p + (bh * S + i) * S;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) mx = fmaxf(mx, row[j]);
  mx = block_max(mx, fscratch);
  double sum = 0;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) sum += expf(row[j] - mx);
  sum = block_sum(sum, dscratch);
  const float l = static_cast<float>(static_cast<double>(mx) + log(sum));
  if (threadIdx.x == 0) lse[bh * S + i] = l;
  const float inv_keep = static_cast<float>(1.0 / (1.0 - static_cast<double>(a.dropout)));
  for (int64_t j = threadIdx.x; j < S; j += blockDim.x) {
    const float v = j <= i ? expf(row[j] - l) * keep_scale(a, b, h, i, j, inv_keep) : 0.f;
    prow[j] = bf16(v);
  }
}

// The backward's row operands: the f32 scores s and dP = dO V^T in, P m and dS out (bf16).
struct BackwardRows {
  const float* s;
  const float* dp;
  const float* lse;
  bf16* pm;
  bf16* ds;
};

// Block (b h, i): P_ij = exp(s_ij - lse_i), m_ij the dropout scale, g_ij = m_ij dP_ij,
// D_i = sum_j P_ij g_ij (double); dS_ij = P_ij (g_ij - D_i) and P_ij m_ij, both rounded to
// bf16; zeros above the diagonal.
__global__ void softmax_backward_rows_bf16_kernel(AttentionArgs a, BackwardRows r) {
  a = a.at_step();  // a step in device memory, read once
  __shared__ double dscratch[32];
  const int64_t S = a.seq_len;
  const int64_t bh = blockIdx.x / S, i = blockIdx.x % S;
  const int64_t b = bh / a.heads, h = bh % a.heads;
  const int64_t at = (bh * S + i) * S;
  const float l = r.lse[bh * S + i];
  const float inv_keep = static_cast<float>(1.0 / (1.0 - static_cast<double>(a.dropout)));
  double dot = 0;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) {
    const float pj = expf(r.s[at + j] - l);
    const float g = r.dp[at + j] * keep_scale(a, b, h, i, j, inv_keep);
    dot += static_cast<double>(pj) * static_cast<double>(g);
  }
  const float d = static_cast<float>(block_sum(dot, dscratch));
  for (int64_t j = threadIdx.x; j < S; j += blockDim.x) {
    float pm = 0.f, ds = 0.f;
    if (j <= i) {
      const float pj = expf(r.s[at + j] - l), m = keep_scale(a, b, h, i, j, inv_keep);
      pm = pj * m;
      ds = pj * (r.dp[at + j] * m - d);
    }
    r.pm[at + j] = bf16(pm);
    r.ds[at + j] = bf16(ds);
  }
}

const bf16* at(const TensorView& t, int64_t elements) { return t.data<bf16>() + elements; }
bf16* at_mut(const TensorView& t, int64_t elements) { return t.data<bf16>() + elements; }

Heads heads_of(const AttentionArgs& a, const TensorView& qkv) {
  return Heads{a.seq_len, a.heads, qkv.dim(1) / 3 / a.heads, qkv.dim(1) / 3};
}

double scale_of(const Heads& x) { return 1.0 / std::sqrt(static_cast<double>(x.Dh)); }

// s [B*H, S, S] f32 = scale Q K^T for every sequence.
Status scores(Context& ctx, const AttentionArgs& a, const Heads& x, const TensorView& qkv,
              const Tensor& s) {
  for (int64_t b = 0; b < a.batch; ++b) {
    const int64_t base = b * x.S * 3 * x.D;
    MOE_RETURN_IF_ERROR(head_product_nt(ctx, kScores, x, at(qkv, base), 3 * x.D,
                                        at(qkv, base + x.D), scale_of(x),
                                        s.data<float>() + b * x.H * x.S * x.S));
  }
  return Status::OK();
}

unsigned row_blocks(const AttentionArgs& a) {
  return static_cast<unsigned>(a.batch * a.heads * a.seq_len);
}

}  // namespace

Status bf16_attention_forward(Context& ctx, const AttentionArgs& a, const TensorView& qkv,
                              const TensorView& out, const TensorView& lse) {
  const Heads x = heads_of(a, qkv);
  const int64_t sq = x.S * x.S;
  MOE_ASSIGN_OR_RETURN(Tensor s, ctx.empty({a.batch * x.H, x.S, x.S}, DType::kF32));
  MOE_RETURN_IF_ERROR(scores(ctx, a, x, qkv, s));
  MOE_ASSIGN_OR_RETURN(Tensor p, ctx.empty({a.batch * x.H, x.S, x.S}, DType::kBF16));
  softmax_rows_bf16_kernel<<<row_blocks(a), kRowThreads, 0, stream_of(ctx)>>>(
      a, s.data<float>(), p.data<bf16>(), lse.data<float>());
  MOE_RETURN_IF_ERROR(launch_status("attention_forward (gemm-bf16)"));
  s = Tensor();  // read no more: its memory goes back to the stream's pool
  for (int64_t b = 0; b < a.batch; ++b) {
    MOE_RETURN_IF_ERROR(
        p_times(ctx, kValues, x, false, at(p.view(), b * x.H * sq), 1.0,
                {at(qkv, b * x.S * 3 * x.D + 2 * x.D), 3 * x.D, at_mut(out, b * x.S * x.D), x.D}));
  }
  return Status::OK();
}

Status bf16_attention_backward(Context& ctx, const AttentionArgs& a, const TensorView& d_out,
                               const TensorView& qkv, const TensorView& lse,
                               const TensorView& d_qkv) {
  const Heads x = heads_of(a, qkv);
  const int64_t sq = x.S * x.S;
  MOE_ASSIGN_OR_RETURN(Tensor s, ctx.empty({a.batch * x.H, x.S, x.S}, DType::kF32));
  MOE_ASSIGN_OR_RETURN(Tensor dp, ctx.empty({a.batch * x.H, x.S, x.S}, DType::kF32));
  MOE_RETURN_IF_ERROR(scores(ctx, a, x, qkv, s));
  for (int64_t b = 0; b < a.batch; ++b) {
    MOE_RETURN_IF_ERROR(head_product_nt(ctx, kScores, x, at(d_out, b * x.S * x.D), x.D,
                                        at(qkv, b * x.S * 3 * x.D + 2 * x.D), 1.0,
                                        dp.data<float>() + b * x.H * sq));
  }
  MOE_ASSIGN_OR_RETURN(Tensor pm, ctx.empty({a.batch * x.H, x.S, x.S}, DType::kBF16));
  MOE_ASSIGN_OR_RETURN(Tensor ds, ctx.empty({a.batch * x.H, x.S, x.S}, DType::kBF16));
  const BackwardRows rows{s.data<float>(), dp.data<float>(), lse.data<float>(), pm.data<bf16>(),
                          ds.data<bf16>()};
  softmax_backward_rows_bf16_kernel<<<row_blocks(a), kRowThreads, 0, stream_of(ctx)>>>(a, rows);
  MOE_RETURN_IF_ERROR(launch_status("attention_backward (gemm-bf16)"));
  s = Tensor();  // read no more
  dp = Tensor();
  for (int64_t b = 0; b < a.batch; ++b) {
    const int64_t base = b * x.S * 3 * x.D;
    // dV = (P m)^T dO; dQ = scale dS K; dK = scale dS^T Q.
    MOE_RETURN_IF_ERROR(
        p_times(ctx, kValues, x, true, at(pm.view(), b * x.H * sq), 1.0,
                {at(d_out, b * x.S * x.D), x.D, at_mut(d_qkv, base + 2 * x.D), 3 * x.D}));
    MOE_RETURN_IF_ERROR(p_times(ctx, kValues, x, false, at(ds.view(), b * x.H * sq), scale_of(x),
                                {at(qkv, base + x.D), 3 * x.D, at_mut(d_qkv, base), 3 * x.D}));
    MOE_RETURN_IF_ERROR(p_times(ctx, kValues, x, true, at(ds.view(), b * x.H * sq), scale_of(x),
                                {at(qkv, base), 3 * x.D, at_mut(d_qkv, base + x.D), 3 * x.D}));
  }
  return Status::OK();
}

}  // namespace moe::kernels::cuda
