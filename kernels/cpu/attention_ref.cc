#include "kernels/cpu/attention_ref.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "base/dtype.h"
#include "base/thread_pool.h"
#include "kernels/cpu/blas_ref.h"
#include "kernels/cpu/vector_math.h"

namespace moe::kernels::ref {
namespace {

// Row i of the dropout scale for (b, h): 1 / (1 - p) where kept, 0 where dropped or j > i.
template <typename T>
void mask_row(const AttentionArgs& a, int64_t b, int64_t h, int64_t i, T inv_keep, T* row) {
  for (int64_t j = 0; j < a.seq_len; ++j) {
    row[j] = (j <= i && attention_keep(a, b, h, i, j)) ? inv_keep : T(0);
  }
}

// One (b, h) head in the compute type C (float or double): q, k, v [S, Dh] with row stride ld.
// bf16 heads are widened into these buffers; f32/f64 heads are used in place.
template <typename A, typename C>
struct HeadView {
  std::vector<C> q_buf, k_buf, v_buf;
  const C* q;
  const C* k;
  const C* v;
  int64_t ld;
  HeadView(const A* base, int64_t S, int64_t D, int64_t Dh, int64_t h) {
    if constexpr (std::is_same_v<A, C>) {
      q = base + h * Dh;
      k = base + D + h * Dh;
      v = base + 2 * D + h * Dh;
      ld = 3 * D;
    } else {
      q_buf.resize(S * Dh);
      k_buf.resize(S * Dh);
      v_buf.resize(S * Dh);
      for (int64_t s = 0; s < S; ++s) {
        for (int64_t c = 0; c < Dh; ++c) {
          q_buf[s * Dh + c] = static_cast<C>(base[s * 3 * D + h * Dh + c]);
          k_buf[s * Dh + c] = static_cast<C>(base[s * 3 * D + D + h * Dh + c]);
          v_buf[s * Dh + c] = static_cast<C>(base[s * 3 * D + 2 * D + h * Dh + c]);
        }
      }
      q = q_buf.data();
      k = k_buf.data();
      v = v_buf.data();
      ld = Dh;
    }
  }
};

// dst[s, :] (row stride ld_dst, type A) = src[s, :] (row stride Dh, type C), S rows of Dh.
template <typename A, typename C>
void store_rows(const C* src, int64_t S, int64_t Dh, A* dst, int64_t ld_dst) {
  for (int64_t s = 0; s < S; ++s)
    for (int64_t c = 0; c < Dh; ++c) dst[s * ld_dst + c] = static_cast<A>(src[s * Dh + c]);
}

// P[i, :] = exp(scale * q_i . k_j - lse_i) for j <= i, 0 above the diagonal (scores in p).
template <typename C>
void scores(const C* q, const C* k, int64_t ld, int64_t S, int64_t Dh, C scale, C* p) {
  gemm<C>(false, true, S, S, Dh, scale, q, ld, k, ld, C(0), p, S);
}

}  // namespace

template <typename A, typename F>
void attention_forward(const AttentionArgs& a, int64_t head_dim, const A* qkv, A* out, F* lse) {
  using C = accum_t<A>;
  const int64_t S = a.seq_len, H = a.heads, Dh = head_dim, D = H * Dh;
  const C scale = static_cast<C>(1.0 / std::sqrt(static_cast<double>(Dh)));
  const C inv_keep = static_cast<C>(1.0 / (1.0 - static_cast<double>(a.dropout)));
  const bool drop = a.dropout > 0.f;
  // The (b, h) heads are spread over the threads; each has its own scratch.
  parallel_for(a.batch * H, 1, [&](int64_t bh0, int64_t bh1) {
    std::vector<C> p(S * S);  // [S, S] probabilities (then dropout(P)) of one (b, h)
    std::vector<C> mask(drop ? S : 0);
    std::vector<C> o(std::is_same_v<A, C> ? 0 : S * Dh);
    for (int64_t bh = bh0; bh < bh1; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      const A* base = qkv + b * S * 3 * D;
      const HeadView<A, C> hv(base, S, D, Dh, h);
      scores<C>(hv.q, hv.k, hv.ld, S, Dh, scale, p.data());
      F* row_lse = lse + (b * H + h) * S;
      for (int64_t i = 0; i < S; ++i) {
        C* row = p.data() + i * S;
        C mx = -std::numeric_limits<C>::infinity();
        for (int64_t j = 0; j <= i; ++j) mx = std::max(mx, row[j]);
        for (int64_t j = 0; j <= i; ++j) row[j] = vector_exp(row[j] - mx);
        double sum = 0;
        for (int64_t j = 0; j <= i; ++j) sum += row[j];
        row_lse[i] = static_cast<F>(static_cast<double>(mx) + std::log(sum));
        const C inv = static_cast<C>(1.0 / sum);
        for (int64_t j = 0; j <= i; ++j) row[j] *= inv;
        for (int64_t j = i + 1; j < S; ++j) row[j] = C(0);
        if (drop) {
          mask_row(a, b, h, i, inv_keep, mask.data());
          for (int64_t j = 0; j < S; ++j) row[j] *= mask[j];
        }
      }
      // O[:, head h] = dropout(P) V.
      if constexpr (std::is_same_v<A, C>) {
        gemm<C>(false, false, S, Dh, S, C(1), p.data(), S, hv.v, hv.ld, C(0),
                out + b * S * D + h * Dh, D);
      } else {
        gemm<C>(false, false, S, Dh, S, C(1), p.data(), S, hv.v, hv.ld, C(0), o.data(), Dh);
        store_rows<A, C>(o.data(), S, Dh, out + b * S * D + h * Dh, D);
      }
    }
  });
}

// P from the causal scores in p (overwritten) and each row's saved log-sum-exp.
template <typename C, typename F>
void probabilities_from_lse(const F* row_lse, int64_t S, C* p) {
  for (int64_t i = 0; i < S; ++i) {
    C* row = p + i * S;
    const C l = static_cast<C>(row_lse[i]);
    for (int64_t j = 0; j <= i; ++j) row[j] = vector_exp(row[j] - l);
    for (int64_t j = i + 1; j < S; ++j) row[j] = C(0);
  }
}

// dS from dP' in d_p (overwritten), row by row: dP = dP' * M (mask; nullptr without dropout),
// dS_ij = P_ij (dP_ij - sum_j P_ij dP_ij) over the causal part, 0 above it.
template <typename C>
void softmax_backward_rows(const C* p, const C* mask, int64_t S, C* d_p) {
  for (int64_t i = 0; i < S; ++i) {
    C* dp = d_p + i * S;
    const C* pr = p + i * S;
    if (mask != nullptr) {
      for (int64_t j = 0; j <= i; ++j) dp[j] *= mask[i * S + j];
    }
    double dot = 0;
    for (int64_t j = 0; j <= i; ++j) dot += static_cast<double>(pr[j]) * dp[j];
    for (int64_t j = 0; j <= i; ++j) {
      dp[j] = static_cast<C>(static_cast<double>(pr[j]) * (static_cast<double>(dp[j]) - dot));
    }
    for (int64_t j = i + 1; j < S; ++j) dp[j] = C(0);
  }
}

// With P' = dropout(P) = P * M (M the scale mask) and O = P' V:
//   dV = P'^T dO;  dP = (dO V^T) * M;  dS_ij = P_ij (dP_ij - sum_j P_ij dP_ij);
//   dQ = scale dS K;  dK = scale dS^T Q.
// P is recomputed from the scores and the saved lse.
template <typename A, typename F>
void attention_backward(const AttentionArgs& a, int64_t head_dim, const A* d_out, const A* qkv,
                        const F* lse, A* d_qkv) {
  using C = accum_t<A>;
  constexpr bool kWiden = !std::is_same_v<A, C>;
  const int64_t S = a.seq_len, H = a.heads, Dh = head_dim, D = H * Dh;
  const C scale = static_cast<C>(1.0 / std::sqrt(static_cast<double>(Dh)));
  const C inv_keep = static_cast<C>(1.0 / (1.0 - static_cast<double>(a.dropout)));
  const bool drop = a.dropout > 0.f;
  // The (b, h) heads are spread over the threads; each writes only its own columns of d_qkv.
  parallel_for(a.batch * H, 1, [&](int64_t bh0, int64_t bh1) {
    std::vector<C> p(S * S), mask(drop ? S * S : 0), dropped(drop ? S * S : 0), d_p(S * S);
    std::vector<C> dout_buf(kWiden ? S * Dh : 0), grad_buf(kWiden ? S * Dh : 0);
    for (int64_t bh = bh0; bh < bh1; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      const A* base = qkv + b * S * 3 * D;
      A* dbase = d_qkv + b * S * 3 * D;
      const A* dout_b = d_out + b * S * D;
      const HeadView<A, C> hv(base, S, D, Dh, h);
      const C* dout;
      int64_t ld_dout;
      if constexpr (kWiden) {
        for (int64_t s = 0; s < S; ++s)
          for (int64_t c = 0; c < Dh; ++c)
            dout_buf[s * Dh + c] = static_cast<C>(dout_b[s * D + h * Dh + c]);
        dout = dout_buf.data();
        ld_dout = Dh;
      } else {
        dout = dout_b + h * Dh;
        ld_dout = D;
      }
      // Recompute P from the scores and lse.
      scores<C>(hv.q, hv.k, hv.ld, S, Dh, scale, p.data());
      probabilities_from_lse(lse + (b * H + h) * S, S, p.data());
      if (drop) {
        for (int64_t i = 0; i < S; ++i) mask_row(a, b, h, i, inv_keep, mask.data() + i * S);
        for (int64_t x = 0; x < S * S; ++x) dropped[x] = p[x] * mask[x];
      }
      // dV = P'^T dO.
      const C* pp = drop ? dropped.data() : p.data();
      if constexpr (kWiden) {
        gemm<C>(true, false, S, Dh, S, C(1), pp, S, dout, ld_dout, C(0), grad_buf.data(), Dh);
        store_rows<A, C>(grad_buf.data(), S, Dh, dbase + 2 * D + h * Dh, 3 * D);
      } else {
        gemm<C>(true, false, S, Dh, S, C(1), pp, S, dout, ld_dout, C(0), dbase + 2 * D + h * Dh,
                3 * D);
      }
      gemm<C>(false, true, S, S, Dh, C(1), dout, ld_dout, hv.v, hv.ld, C(0), d_p.data(), S);
      softmax_backward_rows(p.data(), drop ? mask.data() : nullptr, S, d_p.data());
      if constexpr (kWiden) {
        gemm<C>(false, false, S, Dh, S, scale, d_p.data(), S, hv.k, hv.ld, C(0), grad_buf.data(),
                Dh);
        store_rows<A, C>(grad_buf.data(), S, Dh, dbase + h * Dh, 3 * D);
        gemm<C>(true, false, S, Dh, S, scale, d_p.data(), S, hv.q, hv.ld, C(0), grad_buf.data(),
                Dh);
        store_rows<A, C>(grad_buf.data(), S, Dh, dbase + D + h * Dh, 3 * D);
      } else {
        gemm<C>(false, false, S, Dh, S, scale, d_p.data(), S, hv.k, hv.ld, C(0), dbase + h * Dh,
                3 * D);
        gemm<C>(true, false, S, Dh, S, scale, d_p.data(), S, hv.q, hv.ld, C(0), dbase + D + h * Dh,
                3 * D);
      }
    }
  });
}

#define MOE_INSTANTIATE_ATTENTION(A, F)                                                     \
  template void attention_forward<A, F>(const AttentionArgs&, int64_t, const A*, A*, F*);   \
  template void attention_backward<A, F>(const AttentionArgs&, int64_t, const A*, const A*, \
                                         const F*, A*);
MOE_INSTANTIATE_ATTENTION(float, float)
MOE_INSTANTIATE_ATTENTION(double, double)
MOE_INSTANTIATE_ATTENTION(bf16, float)
#undef MOE_INSTANTIATE_ATTENTION

}  // namespace moe::kernels::ref
