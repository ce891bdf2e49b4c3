// Matrix products with cuBLAS (cublasGemmEx / cublasGemmStridedBatchedEx /
// cublasGemmGroupedBatchedEx). Row-major operands are
// passed as their column-major transposes: C = op(A) op(B) (row-major) is C^T = op(B)^T op(A)^T.
// f32 computes in f32 (CUBLAS_COMPUTE_32F: no TF32, so FP32 runs track the CPU), f64 in f64, bf16
// inputs in f32 with a bf16 or f32 output.
#include <cublas_v2.h>

#include <atomic>
#include <cstdint>

#include "base/cublas_library.h"
#include "kernels/common.h"
#include "kernels/cuda/cublas_gemm.cuh"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/gemm.h"

namespace moe::kernels::cuda {
namespace {

cudaDataType_t cuda_type(DType d) {
  switch (d) {
    case DType::kF64:
      return CUDA_R_64F;
    case DType::kBF16:
      return CUDA_R_16BF;
    default:
      return CUDA_R_32F;
  }
}

const char* bytes(const TensorView& t, int64_t elements) {
  return static_cast<const char*>(t.raw()) + elements * static_cast<int64_t>(dtype_size(t.dtype()));
}
char* bytes_mut(const TensorView& t, int64_t elements) {
  return static_cast<char*>(t.raw()) + elements * static_cast<int64_t>(dtype_size(t.dtype()));
}

}  // namespace

Status run_gemm(Context& ctx, const char* op, DType in, DType out, const GemmCall& g) {
  if (g.m == 0 || g.n == 0 || g.batch == 0) return Status::OK();
  auto handle = static_cast<cublasHandle_t>(ctx.blas_handle());
  const cudaDataType_t ti = cuda_type(in), to = cuda_type(out);
  const bool f64 = in == DType::kF64;
  const cublasComputeType_t compute = f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
  const double alpha_d = g.alpha, beta_d = g.beta;
  const float alpha_f = static_cast<float>(g.alpha), beta_f = static_cast<float>(g.beta);
  const void* alpha = f64 ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta = f64 ? static_cast<const void*>(&beta_d) : &beta_f;
  // Column-major: C^T [n, m] = op(B)^T [n, k] op(A)^T [k, m].
  const cublasOperation_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (g.k == 0 && g.beta == 1.0) return Status::OK();
  cublasStatus_t st;
  if (g.batch == 1) {
    st = cublas().gemm_ex(handle, op_b, op_a, static_cast<int>(g.n), static_cast<int>(g.m),
                          static_cast<int>(g.k), alpha, g.b, ti, static_cast<int>(g.ldb), g.a, ti,
                          static_cast<int>(g.lda), beta, g.c, to, static_cast<int>(g.ldc), compute,
                          CUBLAS_GEMM_DEFAULT);
  } else {
    st = cublas().gemm_strided_batched_ex(
        handle, op_b, op_a, static_cast<int>(g.n), static_cast<int>(g.m), static_cast<int>(g.k),
        alpha, g.b, ti, static_cast<int>(g.ldb), g.stride_b, g.a, ti, static_cast<int>(g.lda),
        g.stride_a, beta, g.c, to, static_cast<int>(g.ldc), g.stride_c, static_cast<int>(g.batch),
        compute, CUBLAS_GEMM_DEFAULT);
  }
  note_captured(op);
  if (st != CUBLAS_STATUS_SUCCESS) {
    return internal_error("cublas: ", op, ": ", cublas_status_string(st), " (m ", g.m, ", n ", g.n,
                          ", k ", g.k, ", batch ", g.batch, ")");
  }
  return Status::OK();
}

namespace {

std::atomic<int64_t> groups_grouped{0}, groups_refused{0}, groups_unaligned{0}, groups_looped{0};
// Bit (in * 8 + out) set: cuBLAS refused grouped products of that dtype pair (NOT_SUPPORTED), so
// they are not offered again in this process (each offer costs an upload of the pointers).
std::atomic<uint64_t> refused_pairs{0};

uint64_t pair_bit(DType in, DType out) {
  return uint64_t{1} << (static_cast<int>(in) * 8 + static_cast<int>(out));
}

// cuBLAS's grouped kernels read operands with wide loads: for bf16 inputs its documentation asks
// for 16-byte aligned matrices, which it cannot check itself (the pointers live on the device).
// Every pointer and every row stride on a 16-byte boundary, whatever the dtype (a dropless
// block of odd row count and width starts anywhere).
bool aligned_for_grouping(const std::vector<GemmCall>& calls, DType in, DType out) {
  const auto on_16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const int64_t si = static_cast<int64_t>(dtype_size(in)),
                so = static_cast<int64_t>(dtype_size(out));
  for (const GemmCall& g : calls) {
    if (!on_16(g.a) || !on_16(g.b) || !on_16(g.c) || (g.lda * si) % 16 != 0 ||
        (g.ldb * si) % 16 != 0 || (g.ldc * so) % 16 != 0) {
      return false;
    }
  }
  return true;
}

// The per-problem arguments of cublasGemmGroupedBatchedEx in the column-major form run_gemm uses
// (C^T = op(B)^T op(A)^T): cuBLAS's A is our B. Scalars are per group, on the host.
struct GroupArgs {
  std::vector<cublasOperation_t> op_first, op_second;
  std::vector<int> m, n, k, ld_first, ld_second, ldc, group_size;
  std::vector<float> alpha_f, beta_f;
  std::vector<double> alpha_d, beta_d;
  std::vector<int64_t> pointers;  // first operands, then second operands, then outputs

  explicit GroupArgs(const std::vector<GemmCall>& calls) {
    const size_t count = calls.size();
    pointers.resize(3 * count);
    for (size_t i = 0; i < count; ++i) {
      const GemmCall& g = calls[i];
      op_first.push_back(g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
      op_second.push_back(g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
      m.push_back(static_cast<int>(g.n));
      n.push_back(static_cast<int>(g.m));
      k.push_back(static_cast<int>(g.k));
      ld_first.push_back(static_cast<int>(g.ldb));
      ld_second.push_back(static_cast<int>(g.lda));
      ldc.push_back(static_cast<int>(g.ldc));
      group_size.push_back(1);
      alpha_f.push_back(static_cast<float>(g.alpha));
      beta_f.push_back(static_cast<float>(g.beta));
      alpha_d.push_back(g.alpha);
      beta_d.push_back(g.beta);
      pointers[i] = reinterpret_cast<int64_t>(g.b);
      pointers[count + i] = reinterpret_cast<int64_t>(g.a);
      pointers[2 * count + i] = reinterpret_cast<int64_t>(g.c);
    }
  }
};

Status run_each(Context& ctx, const char* op, DType in, DType out,
                const std::vector<GemmCall>& calls) {
  for (const GemmCall& g : calls) MOE_RETURN_IF_ERROR(run_gemm(ctx, op, in, out, g));
  return Status::OK();
}

// Offers the products to cublasGemmGroupedBatchedEx; *grouped says whether it took them.
Status try_grouped(Context& ctx, const char* op, DType in, DType out,
                   const std::vector<GemmCall>& calls, bool* grouped) {
  *grouped = false;
  const GroupArgs args(calls);
  const int count = static_cast<int>(calls.size());
  MOE_ASSIGN_OR_RETURN(Tensor pointers, ctx.upload(Tensor::from_vector<int64_t>(
                                            Shape{3 * int64_t{count}}, args.pointers)));
  auto* ptr = reinterpret_cast<void**>(pointers.raw());
  const bool f64 = in == DType::kF64;
  const void* alpha = f64 ? static_cast<const void*>(args.alpha_d.data()) : args.alpha_f.data();
  const void* beta = f64 ? static_cast<const void*>(args.beta_d.data()) : args.beta_f.data();
  const cublasStatus_t st = cublas().gemm_grouped_batched_ex(
      static_cast<cublasHandle_t>(ctx.blas_handle()), args.op_first.data(), args.op_second.data(),
      args.m.data(), args.n.data(), args.k.data(), alpha, ptr, cuda_type(in), args.ld_first.data(),
      ptr + count, cuda_type(in), args.ld_second.data(), beta, ptr + 2 * count, cuda_type(out),
      args.ldc.data(), count, args.group_size.data(),
      f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F);
  // NOT_SUPPORTED: no grouped kernel for this dtype pair (remembered); INVALID_VALUE: arguments
  // the grouped entry point refuses that one product at a time may take (run_gemm names any
  // real error). Either way the products run one by one.
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) refused_pairs |= pair_bit(in, out);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE) {
    ++groups_refused;
    return Status::OK();
  }
  if (st != CUBLAS_STATUS_SUCCESS) {
    return internal_error("cublas: ", op, " (grouped, ", count,
                          " products): ", cublas_status_string(st));
  }
  ++groups_grouped;
  *grouped = true;
  return Status::OK();
}

}  // namespace

Status run_gemm_group(Context& ctx, const char* op, DType in, DType out,
                      const std::vector<GemmCall>& calls) {
  if (calls.size() < 2) return run_each(ctx, op, in, out, calls);
  if (expert_gemm_path() != ExpertGemmPath::kGrouped) {
    ++groups_looped;
    return run_each(ctx, op, in, out, calls);
  }
  if ((refused_pairs.load() & pair_bit(in, out)) != 0) {
    ++groups_refused;
    return run_each(ctx, op, in, out, calls);
  }
  if (!aligned_for_grouping(calls, in, out)) {
    ++groups_unaligned;
    return run_each(ctx, op, in, out, calls);
  }
  bool grouped = false;
  MOE_RETURN_IF_ERROR(try_grouped(ctx, op, in, out, calls, &grouped));
  return grouped ? Status::OK() : run_each(ctx, op, in, out, calls);
}

ExpertGemmPaths expert_gemm_paths() {
  ExpertGemmPaths c;
  c.grouped = groups_grouped.load();
  c.refused = groups_refused.load();
  c.unaligned = groups_unaligned.load();
  c.looped = groups_looped.load();
  return c;
}

Status gemm(Context& ctx, const TensorView& a, bool trans_a, const TensorView& b, bool trans_b,
            const TensorView& c, double alpha, double beta) {
  GemmCall g;
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  g.m = c.dim(0);
  g.n = c.dim(1);
  g.k = trans_a ? a.dim(0) : a.dim(1);
  g.a = a.raw();
  g.lda = a.dim(1);
  g.b = b.raw();
  g.ldb = b.dim(1);
  g.c = c.raw();
  g.ldc = g.n;
  g.alpha = alpha;
  g.beta = beta;
  if (g.k == 0 && beta != 1.0) {
    // cuBLAS leaves C alone for k = 0 only when beta = 1: scale it as the product would.
    return beta == 0.0 ? ctx.zero(c) : scale(ctx, c, beta);
  }
  return run_gemm(ctx, "gemm", a.dtype(), c.dtype(), g);
}

// Capacity mode: block b = r * E_l + l holds C rows for expert l, so the blocks of one source
// rank r form a strided batch over the experts (x and y stride C rows, w strides one expert).
// Padding rows are computed (their input rows are zero). Dropless: one product per non-empty
// block (run_gemm_group: one cuBLAS call each, or one grouped call with
// MOMOE_EXPERT_GEMM=grouped).
Status expert_gemm(Context& ctx, const TensorView& x, const TensorView& w, bool trans_w,
                   const TensorView& y, const ExpertBlocks& blocks) {
  const int64_t k = x.dim(1), n = y.dim(1), el = blocks.local_experts;
  GemmCall g;
  g.trans_b = trans_w;
  g.n = n;
  g.k = k;
  g.lda = k;
  g.ldb = w.dim(2);
  g.ldc = n;
  if (k == 0) return ctx.zero(y);
  if (blocks.capacity >= 0) {
    const int64_t cap = blocks.capacity;
    g.m = cap;
    g.batch = el;
    g.stride_a = cap * k;
    g.stride_b = w.dim(1) * w.dim(2);
    g.stride_c = cap * n;
    g.b = w.raw();
    for (int64_t r = 0; r < blocks.ranks; ++r) {
      g.a = bytes(x, r * el * cap * k);
      g.c = bytes_mut(y, r * el * cap * n);
      MOE_RETURN_IF_ERROR(run_gemm(ctx, "expert_gemm", x.dtype(), y.dtype(), g));
    }
    return Status::OK();
  }
  std::vector<GemmCall> calls;
  for (int64_t b = 0; b < blocks.blocks(); ++b) {
    const auto [begin, end] = blocks.block_rows(b);
    if (end == begin) continue;
    g.m = end - begin;
    g.a = bytes(x, begin * k);
    g.b = bytes(w, blocks.expert_of(b) * w.dim(1) * w.dim(2));
    g.c = bytes_mut(y, begin * n);
    calls.push_back(g);
  }
  return run_gemm_group(ctx, "expert_gemm", x.dtype(), y.dtype(), calls);
}

// dw[l] += x_b^T dy_b over l's blocks in rank order (a fixed order: deterministic). Capacity
// mode: one strided batch over the experts per source rank; padding rows add zero (their output
// gradient is zero). Dropless: one product per block (run_gemm_group; with
// MOMOE_EXPERT_GEMM=grouped one grouped call per source rank).
Status expert_gemm_wgrad(Context& ctx, const TensorView& x, const TensorView& dy,
                         const TensorView& dw, const ExpertBlocks& blocks) {
  const int64_t k = x.dim(1), n = dy.dim(1), el = blocks.local_experts;
  GemmCall g;
  g.trans_a = true;
  g.m = k;
  g.n = n;
  g.lda = k;
  g.ldb = n;
  g.ldc = n;
  g.beta = 1.0;
  if (blocks.capacity >= 0) {
    const int64_t cap = blocks.capacity;
    if (cap == 0) return Status::OK();
    g.k = cap;
    g.batch = el;
    g.stride_a = cap * k;
    g.stride_b = cap * n;
    g.stride_c = k * n;
    g.c = dw.raw();
    for (int64_t r = 0; r < blocks.ranks; ++r) {
      g.a = bytes(x, r * el * cap * k);
      g.b = bytes(dy, r * el * cap * n);
      MOE_RETURN_IF_ERROR(run_gemm(ctx, "expert_gemm_wgrad", x.dtype(), dw.dtype(), g));
    }
    return Status::OK();
  }
  // Rank by rank (the fixed order of each expert's sum); one rank's blocks are distinct experts.
  for (int64_t r = 0; r < blocks.ranks; ++r) {
    std::vector<GemmCall> calls;
    for (int64_t b = r * el; b < (r + 1) * el; ++b) {
      const auto [begin, end] = blocks.block_rows(b);
      if (end == begin) continue;
      g.k = end - begin;
      g.a = bytes(x, begin * k);
      g.b = bytes(dy, begin * n);
      g.c = bytes_mut(dw, blocks.expert_of(b) * k * n);
      calls.push_back(g);
    }
    MOE_RETURN_IF_ERROR(run_gemm_group(ctx, "expert_gemm_wgrad", x.dtype(), dw.dtype(), calls));
  }
  return Status::OK();
}

}  // namespace moe::kernels::cuda
