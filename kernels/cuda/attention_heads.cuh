// The per-head cuBLAS products of attention's GEMM paths (attention.cu in the compute dtype,
// attention_bf16.cu on bf16 operands): one strided batch over the heads of one sequence. Row-major
// views with leading dimensions: q/k/v are head slices of qkv [S, 3D] (ld 3D, head stride Dh);
// the scores P [H, S, S] are dense; out and dO [S, D] (ld D).
#pragma once

#include <cstdint>

#include "base/context.h"
#include "base/dtype.h"
#include "base/status.h"
#include "kernels/cuda/cublas_gemm.cuh"

namespace moe::kernels::cuda {

// One sequence's heads: S positions, H heads of Dh columns, D = H Dh.
struct Heads {
  int64_t S, H, Dh, D;
};

// The operands' dtype and the output's (f32 and f64 alike; bf16 operands may write f32).
struct ProductTypes {
  DType in, out;
};

// C[h] [S, S] = alpha A[h] B[h]^T with A, B head slices (ld_a; B in qkv, ld 3D; head stride
// Dh): the scores Q K^T (scaled) and their gradient dO V^T.
inline Status head_product_nt(Context& ctx, ProductTypes t, const Heads& x, const void* a,
                              int64_t ld_a, const void* b, double alpha, void* c) {
  GemmCall g;
  g.trans_b = true;
  g.m = x.S;
  g.n = x.S;
  g.k = x.Dh;
  g.a = a;
  g.lda = ld_a;
  g.stride_a = x.Dh;
  g.b = b;
  g.ldb = 3 * x.D;
  g.stride_b = x.Dh;
  g.c = c;
  g.ldc = x.S;
  g.stride_c = x.S * x.S;
  g.batch = x.H;
  g.alpha = alpha;
  return run_gemm(ctx, "attention scores", t.in, t.out, g);
}

// The B and C of p_times: head slices (head stride Dh) and their leading dimensions.
struct PTimesOperands {
  const void* b;  // B[h] at b + h Dh, rows ld_b apart
  int64_t ld_b;
  void* c;  // C[h] at c + h Dh, rows ld_c apart (overwritten)
  int64_t ld_c;
};

// C[h] = alpha op(P[h]) B[h] with B, C head slices (bc.ld_b, bc.ld_c; head stride Dh).
inline Status p_times(Context& ctx, ProductTypes t, const Heads& x, bool trans_p, const void* p,
                      double alpha, const PTimesOperands& bc) {
  GemmCall g;
  g.trans_a = trans_p;
  g.m = x.S;
  g.n = x.Dh;
  g.k = x.S;
  g.a = p;
  g.lda = x.S;
  g.stride_a = x.S * x.S;
  g.b = bc.b;
  g.ldb = bc.ld_b;
  g.stride_b = x.Dh;
  g.c = bc.c;
  g.ldc = bc.ld_c;
  g.stride_c = x.Dh;
  g.batch = x.H;
  g.alpha = alpha;
  return run_gemm(ctx, "attention values", t.in, t.out, g);
}

}  // namespace moe::kernels::cuda
