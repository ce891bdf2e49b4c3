#include "kernels/reference/attention_ref.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/reference/blas_ref.h"

namespace moe::kernels::ref {
namespace {

// Row i of the dropout scale for (b, h): 1 / (1 - p) where kept, 0 where dropped or j > i.
template <typename T>
void mask_row(const AttentionArgs& a, int64_t b, int64_t h, int64_t i, T inv_keep, T* row) {
  for (int64_t j = 0; j < a.seq_len; ++j) {
    row[j] = (j <= i && attention_keep(a, b, h, i, j)) ? inv_keep : T(0);
  }
}

}  // namespace

bool attention_keep(const AttentionArgs& a, int64_t b, int64_t h, int64_t i, int64_t j) {
  if (a.dropout == 0.f) return true;
  const uint64_t row =
      static_cast<uint64_t>(((a.sequence_offset + b) * a.heads + h) * a.seq_len + i);
  const uint64_t key = row * static_cast<uint64_t>(a.seq_len) + static_cast<uint64_t>(j);
  return a.rng.uniform(key) >= a.dropout;
}

template <typename T>
void attention_forward(const AttentionArgs& a, int64_t head_dim, const T* qkv, T* out, T* probs) {
  const int64_t S = a.seq_len, H = a.heads, Dh = head_dim, D = H * Dh;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(Dh)));
  const T inv_keep = static_cast<T>(1.0 / (1.0 - static_cast<double>(a.dropout)));
  const bool drop = a.dropout > 0.f;
  std::vector<T> dropped(drop ? S * S : 0);  // [S, S] dropout(P) for one (b, h)
  std::vector<double> e(S);
  for (int64_t b = 0; b < a.batch; ++b) {
    const T* base = qkv + b * S * 3 * D;
    for (int64_t h = 0; h < H; ++h) {
      const T* q = base + h * Dh;
      const T* k = base + D + h * Dh;
      const T* v = base + 2 * D + h * Dh;
      T* p = probs + (b * H + h) * S * S;
      // p = scale * Q K^T [S, S]; entries above the diagonal are overwritten below.
      gemm<T>(false, true, S, S, Dh, scale, q, 3 * D, k, 3 * D, T(0), p, S);
      for (int64_t i = 0; i < S; ++i) {
        T* row = p + i * S;
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j <= i; ++j) mx = std::max(mx, static_cast<double>(row[j]));
        double sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          e[j] = std::exp(static_cast<double>(row[j]) - mx);
          sum += e[j];
        }
        for (int64_t j = 0; j <= i; ++j) row[j] = static_cast<T>(e[j] / sum);
        for (int64_t j = i + 1; j < S; ++j) row[j] = T(0);
        if (drop) {
          T* d = dropped.data() + i * S;
          mask_row(a, b, h, i, inv_keep, d);
          for (int64_t j = 0; j < S; ++j) d[j] *= row[j];
        }
      }
      // O[:, head h] = dropout(P) V.
      gemm<T>(false, false, S, Dh, S, T(1), drop ? dropped.data() : p, S, v, 3 * D, T(0),
              out + b * S * D + h * Dh, D);
    }
  }
}

// With P' = dropout(P) = P * M (M the scale mask) and O = P' V:
//   dV = P'^T dO;  dP = (dO V^T) * M;  dS_ij = P_ij (dP_ij - sum_j P_ij dP_ij);
//   dQ = scale dS K;  dK = scale dS^T Q.
template <typename T>
void attention_backward(const AttentionArgs& a, int64_t head_dim, const T* d_out, const T* qkv,
                        const T* probs, T* d_qkv) {
  const int64_t S = a.seq_len, H = a.heads, Dh = head_dim, D = H * Dh;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(Dh)));
  const T inv_keep = static_cast<T>(1.0 / (1.0 - static_cast<double>(a.dropout)));
  const bool drop = a.dropout > 0.f;
  std::vector<T> mask(drop ? S * S : 0), dropped(drop ? S * S : 0), d_p(S * S);
  for (int64_t b = 0; b < a.batch; ++b) {
    const T* base = qkv + b * S * 3 * D;
    T* dbase = d_qkv + b * S * 3 * D;
    const T* dout = d_out + b * S * D;
    for (int64_t h = 0; h < H; ++h) {
      const T* q = base + h * Dh;
      const T* k = base + D + h * Dh;
      const T* v = base + 2 * D + h * Dh;
      const T* p = probs + (b * H + h) * S * S;
      if (drop) {
        for (int64_t i = 0; i < S; ++i) mask_row(a, b, h, i, inv_keep, mask.data() + i * S);
        for (int64_t x = 0; x < S * S; ++x) dropped[x] = p[x] * mask[x];
      }
      gemm<T>(true, false, S, Dh, S, T(1), drop ? dropped.data() : p, S, dout + h * Dh, D, T(0),
              dbase + 2 * D + h * Dh, 3 * D);
      gemm<T>(false, true, S, S, Dh, T(1), dout + h * Dh, D, v, 3 * D, T(0), d_p.data(), S);
      for (int64_t i = 0; i < S; ++i) {
        T* dp = d_p.data() + i * S;
        const T* pr = p + i * S;
        if (drop) {
          for (int64_t j = 0; j <= i; ++j) dp[j] *= mask[i * S + j];
        }
        double dot = 0;
        for (int64_t j = 0; j <= i; ++j) dot += static_cast<double>(pr[j]) * dp[j];
        for (int64_t j = 0; j <= i; ++j) {
          dp[j] = static_cast<T>(static_cast<double>(pr[j]) * (static_cast<double>(dp[j]) - dot));
        }
        for (int64_t j = i + 1; j < S; ++j) dp[j] = T(0);
      }
      gemm<T>(false, false, S, Dh, S, scale, d_p.data(), S, k, 3 * D, T(0), dbase + h * Dh, 3 * D);
      gemm<T>(true, false, S, Dh, S, scale, d_p.data(), S, q, 3 * D, T(0), dbase + D + h * Dh,
              3 * D);
    }
  }
}

#define MOE_INSTANTIATE_ATTENTION(T)                                                               \
  template void attention_forward<T>(const AttentionArgs&, int64_t, const T*, T*, T*);             \
  template void attention_backward<T>(const AttentionArgs&, int64_t, const T*, const T*, const T*, \
                                      T*);
MOE_INSTANTIATE_ATTENTION(float)
MOE_INSTANTIATE_ATTENTION(double)
#undef MOE_INSTANTIATE_ATTENTION

}  // namespace moe::kernels::ref
