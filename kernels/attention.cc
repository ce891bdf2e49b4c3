#include "kernels/attention.h"

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/common.h"
#include "kernels/reference/blas_ref.h"

namespace moe::kernels {
namespace {

Status check_args(const char* op, const AttentionArgs& a, const TensorView& qkv) {
  MOE_RETURN_IF_ERROR(check_host_float(op, "qkv", qkv));
  if (a.batch < 1 || a.seq_len < 1 || a.heads < 1) {
    return invalid_argument_error(op, ": batch, seq_len and heads must be >= 1, got ", a.batch,
                                  ", ", a.seq_len, ", ", a.heads);
  }
  if (!(a.dropout >= 0.f && a.dropout < 1.f)) {
    return invalid_argument_error(op, ": dropout = ", a.dropout, " is outside [0, 1)");
  }
  if (qkv.ndim() != 2 || qkv.dim(0) != a.batch * a.seq_len || qkv.dim(1) % (3 * a.heads) != 0) {
    return invalid_argument_error(op, ": qkv must be [B*S, 3*D] with D divisible by H = ", a.heads,
                                  ", got ", qkv.to_string());
  }
  return Status::OK();
}

// The dropout mask element for (sequence, head, i, j); keep with probability 1 - p.
bool keep(const AttentionArgs& a, int64_t b, int64_t h, int64_t i, int64_t j) {
  const uint64_t key = static_cast<uint64_t>(((a.sequence_offset + b) * a.heads + h) * a.seq_len + i) *
                           static_cast<uint64_t>(a.seq_len) + static_cast<uint64_t>(j);
  return a.rng.uniform(key) >= a.dropout;
}

}  // namespace

Status attention_forward(const AttentionArgs& a, const TensorView& qkv, const TensorView& out,
                         const TensorView& probs, Stream stream) {
  constexpr const char* kOp = "attention_forward";
  MOE_RETURN_IF_ERROR(check_args(kOp, a, qkv));
  const int64_t S = a.seq_len, H = a.heads, D = qkv.dim(1) / 3, Dh = D / H;
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, qkv, "out", out));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "out", out, Shape{a.batch * S, D}));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, qkv, "probs", probs));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "probs", probs, Shape{a.batch, H, S, S}));
  return dispatch_host_float(kOp, qkv, [&](auto tag) {
    using T = decltype(tag);
    const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(Dh)));
    const T inv_keep = static_cast<T>(1.0 / (1.0 - a.dropout));
    std::vector<T> dropped(S * S);
    for (int64_t b = 0; b < a.batch; ++b) {
      const T* base = qkv.data<T>() + b * S * 3 * D;
      for (int64_t h = 0; h < H; ++h) {
        const T* q = base + h * Dh;
        const T* k = base + D + h * Dh;
        const T* v = base + 2 * D + h * Dh;
        T* p = probs.data<T>() + (b * H + h) * S * S;
        ref::gemm<T>(false, true, S, S, Dh, scale, q, 3 * D, k, 3 * D, T(0), p, S);
        for (int64_t i = 0; i < S; ++i) {
          T* row = p + i * S;
          double mx = -std::numeric_limits<double>::infinity();
          for (int64_t j = 0; j <= i; ++j) mx = std::max(mx, static_cast<double>(row[j]));
          double sum = 0;
          for (int64_t j = 0; j <= i; ++j) sum += std::exp(static_cast<double>(row[j]) - mx);
          for (int64_t j = 0; j < S; ++j) {
            row[j] = j <= i ? static_cast<T>(std::exp(static_cast<double>(row[j]) - mx) / sum) : T(0);
            const bool kept = a.dropout == 0.f || (j <= i && keep(a, b, h, i, j));
            dropped[i * S + j] = kept ? row[j] * inv_keep : T(0);
          }
        }
        ref::gemm<T>(false, false, S, Dh, S, T(1), dropped.data(), S, v, 3 * D, T(0),
                     out.data<T>() + b * S * D + h * Dh, D);
      }
    }
  });
}

Status attention_backward(const AttentionArgs& a, const TensorView& d_out, const TensorView& qkv,
                          const TensorView& probs, const TensorView& d_qkv, Stream stream) {
  constexpr const char* kOp = "attention_backward";
  MOE_RETURN_IF_ERROR(check_args(kOp, a, qkv));
  const int64_t S = a.seq_len, H = a.heads, D = qkv.dim(1) / 3, Dh = D / H;
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, qkv, "d_out", d_out));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "d_out", d_out, Shape{a.batch * S, D}));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, qkv, "probs", probs));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "probs", probs, Shape{a.batch, H, S, S}));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, qkv, "d_qkv", d_qkv));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "d_qkv", d_qkv, qkv.shape()));
  return dispatch_host_float(kOp, qkv, [&](auto tag) {
    using T = decltype(tag);
    const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(Dh)));
    const T inv_keep = static_cast<T>(1.0 / (1.0 - a.dropout));
    std::vector<T> dropped(S * S), d_p(S * S);
    for (int64_t b = 0; b < a.batch; ++b) {
      const T* base = qkv.data<T>() + b * S * 3 * D;
      T* dbase = d_qkv.data<T>() + b * S * 3 * D;
      const T* dout = d_out.data<T>() + b * S * D;
      for (int64_t h = 0; h < H; ++h) {
        const T* q = base + h * Dh;
        const T* k = base + D + h * Dh;
        const T* v = base + 2 * D + h * Dh;
        const T* p = probs.data<T>() + (b * H + h) * S * S;
        std::vector<T> mask_scale(S * S, T(1));
        for (int64_t i = 0; i < S; ++i) {
          for (int64_t j = 0; j < S; ++j) {
            if (a.dropout > 0.f) mask_scale[i * S + j] = (j <= i && keep(a, b, h, i, j)) ? inv_keep : T(0);
            dropped[i * S + j] = p[i * S + j] * mask_scale[i * S + j];
          }
        }
        // dV = dropped^T dO ; d(dropped) = dO V^T.
        ref::gemm<T>(true, false, S, Dh, S, T(1), dropped.data(), S, dout + h * Dh, D, T(0),
                     dbase + 2 * D + h * Dh, 3 * D);
        ref::gemm<T>(false, true, S, S, Dh, T(1), dout + h * Dh, D, v, 3 * D, T(0), d_p.data(), S);
        // Through dropout, then the softmax: ds_ij = p_ij (dp_ij - sum_j p_ij dp_ij).
        for (int64_t i = 0; i < S; ++i) {
          double dot = 0;
          for (int64_t j = 0; j <= i; ++j) {
            d_p[i * S + j] *= mask_scale[i * S + j];
            dot += static_cast<double>(p[i * S + j]) * d_p[i * S + j];
          }
          for (int64_t j = 0; j < S; ++j) {
            d_p[i * S + j] = j <= i ? static_cast<T>(p[i * S + j] * (d_p[i * S + j] - dot)) : T(0);
          }
        }
        // dQ = scale dS K ; dK = scale dS^T Q.
        ref::gemm<T>(false, false, S, Dh, S, scale, d_p.data(), S, k, 3 * D, T(0), dbase + h * Dh, 3 * D);
        ref::gemm<T>(true, false, S, Dh, S, scale, d_p.data(), S, q, 3 * D, T(0), dbase + D + h * Dh, 3 * D);
      }
    }
  });
}

}  // namespace moe::kernels
