// Causal multi-head self-attention core on packed projections: for each sequence b and head h,
//   P = softmax(mask(Q K^T / sqrt(Dh))),  O = dropout(P) V
// Q, K, V are the head slices of qkv [B*S, 3D] (in [B, S, 3, H, Dh] terms: columns [0, D) are
// q [B, S, H, Dh], [D, 2D) k and [2D, 3D) v, with head h owning columns h*Dh .. (h+1)*Dh of
// each), so the QKV projection's output is used without a split copy. O is written to
// out [B*S, D] = [B, S, H, Dh]. Position i attends to j <= i.
//
// The forward saves only the row logsumexp lse [B, H, S] (the contract of a fused GPU kernel);
// the backward recomputes P = exp(Q K^T / sqrt(Dh) - lse) from Q and K. Softmax sums are in
// double on the host; scores and products in the compute precision (f32 for f32 and bf16).
//
// Dropout on the probabilities keeps element (b, h, i, j) when
//   rng.uniform((((sequence_offset + b) * H + h) * S + i) * S + j) >= dropout
// and scales kept elements by 1 / (1 - dropout). The key depends on the global sequence index,
// not on where the sequence sits in this batch, so masks do not depend on how a global batch is
// split across ranks. dropout = 0 draws nothing.
#pragma once

#include "base/context.h"
#include "base/rng.h"
#include "base/tensor.h"

namespace moe::kernels {

struct AttentionArgs {
  int64_t batch = 0;            // B sequences
  int64_t seq_len = 0;          // S
  int64_t heads = 0;            // H (D = 3D/3 must be divisible by H)
  float dropout = 0.f;          // on the probabilities, in [0, 1)
  CounterRng rng;               // dropout mask stream (a device step's shift counts sequences)
  int64_t sequence_offset = 0;  // global index of sequence 0 (keys the mask)

  // The same arguments with a step in device memory read (rng.device_step): the stream at the
  // step, sequence_offset moved by its sequences. A kernel may call it once as it starts instead
  // of reading the step per mask element (ref::attention_keep accepts either).
  MOE_HOST_DEVICE AttentionArgs at_step() const {
    AttentionArgs r = *this;
    r.sequence_offset += rng.key_shift();
    r.rng = rng.at_step();
    return r;
  }
};

// [in] qkv [B*S, 3D] act. [out] out [B*S, D] act, overwritten. [out] lse [B, H, S] F, the
// logsumexp of each row of scaled, masked scores (before dropout), overwritten.
Status attention_forward(Context& ctx, const AttentionArgs& args, const TensorView& qkv,
                         const TensorView& out, const TensorView& lse);
// How a CUDA context computes attention of `act` activations with heads of `head_dim` columns,
// chosen by MOMOE_ATTENTION (read at every call, so one process can time every path):
//   kFused (bf16 with heads of at most 128 columns: the default there, or "fused"): flash-style
//     kernels (kernels/cuda/flash_attention.h): P and dS rounded to bf16 before their products,
//     f32 accumulation; no S x S scratch. Measured fastest on an H200 (benchmarks/gpu_notes.md).
//   kGemmBf16 (bf16 with wider heads: the default there, or "gemm-bf16" at any width): cuBLAS
//     products on bf16 operands (tensor cores, f32 accumulation) with kFused's roundings
//     (kernels/cuda/attention_bf16.h); f32 scores plus bf16 probabilities as scratch.
//   kGemm (every f32 activation, or "gemm"): cuBLAS products and a softmax kernel in the compute
//     dtype (f32 for f32 and bf16: bf16 inputs are widened), as the CPU reference computes;
//     B x H x S x S f32 scratch.
// "fused" with a head wider than 128 runs kGemmBf16; any other value is warned about once and
// means the default. The choice is the same in a build without CUDA (it names what a CUDA
// context would do).
enum class CudaAttention { kGemm, kGemmBf16, kFused };
CudaAttention cuda_attention(DType act, int64_t head_dim);
// Which implementation attention takes on ctx: "cpu" (the reference), or on a GPU "gemm",
// "gemm-bf16" or "fused" (as above). For reports.
const char* attention_path(const Context& ctx, DType act, int64_t head_dim);

// [in] d_out [B*S, D] act; the saved qkv [B*S, 3D], out [B*S, D] (the forward's output for them)
// and lse [B, H, S]; args as in forward (the dropout mask is redrawn). [out] d_qkv [B*S, 3D] act
// = (dq | dk | dv), overwritten. The fused CUDA kernels form each row's
// D_i = sum_j P_ij m_ij dP_ij (m the dropout scale) as d_out_i . out_i, as flash attention does
// (two products per score fewer than from P and dP); the other paths form it from P and dP and
// read only out's shape.
Status attention_backward(Context& ctx, const AttentionArgs& args, const TensorView& d_out,
                          const TensorView& qkv, const TensorView& out, const TensorView& lse,
                          const TensorView& d_qkv);

}  // namespace moe::kernels
