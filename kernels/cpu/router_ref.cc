#include "kernels/cpu/router_ref.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "base/dtype.h"
#include "kernels/cpu/chunked_sum.h"
#include "kernels/cpu/router_math.h"
#include "kernels/router.h"  // aux_packed_size

namespace moe::kernels::ref {
namespace {

// True when logit a (index ia) ranks before logit b (index ib): larger first, ties by index.
template <typename T>
bool ranks_before(T a, int64_t ia, T b, int64_t ib) {
  return a > b || (a == b && ia < ib);
}

template <typename T>
double log_sum_exp(const T* row, int64_t n, const uint8_t* mask) {
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < n; ++i)
    if (mask == nullptr || mask[i]) mx = std::max(mx, static_cast<double>(row[i]));
  double s = 0;
  for (int64_t i = 0; i < n; ++i)
    if (mask == nullptr || mask[i]) s += std::exp(static_cast<double>(row[i]) - mx);
  return mx + std::log(s);
}

}  // namespace

template <typename T>
void topk_route(const RouteParams& p, const T* logits, const T* bias, int64_t tokens, int32_t* idx,
                T* gate, T* probs, T* lse) {
  const int64_t experts = p.experts, k = p.k;
  for (int64_t t = 0; t < tokens; ++t) {
    topk_route_token<T>(p, logits + t * experts, bias, idx + t * k, gate + t * k,
                        probs + t * experts, lse + t);
  }
}

template <typename T>
void topk_route_backward(const RouteParams& p, const T* logits, const T* d_gate, const T* gate,
                         const int32_t* idx, int64_t tokens, T* d_logits) {
  const int64_t experts = p.experts, k = p.k;
  for (int64_t t = 0; t < tokens; ++t) {
    const T* row = logits == nullptr ? nullptr : logits + t * experts;
    topk_route_backward_token<T>(p, row, d_gate + t * k, gate + t * k, idx + t * k,
                                 d_logits + t * experts);
  }
}

void sequence_counts(const int32_t* idx, int64_t tokens, int64_t k, int64_t sequences,
                     int64_t experts, int64_t* counts) {
  std::fill(counts, counts + sequences * experts, int64_t{0});
  const int64_t per_sequence = tokens / sequences;
  for (int64_t t = 0; t < tokens; ++t) {
    int64_t* row = counts + (t / per_sequence) * experts;
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = idx[t * k + j];
      if (e >= 0 && e < experts) row[e] += 1;
    }
  }
}

template <typename T>
void sparsemixer_route(const SparseMixerParams& params, bool training, const CounterRng& rng,
                       int64_t token_offset, const T* logits, int64_t tokens, int64_t experts,
                       const SparseMixerOutputs<T>& out) {
  int32_t* idx = out.idx;
  T *gate = out.gate, *probs = out.probs, *lse = out.lse, *scale = out.scale;
  uint8_t *mask = out.mask, *is_argmax = out.is_argmax;
  const double r = params.jitter;
  for (int64_t t = 0; t < tokens; ++t) {
    const T* row = logits + t * experts;
    uint8_t* mrow = mask + t * experts;
    int64_t imax = 0;
    for (int64_t e = 1; e < experts; ++e)
      if (ranks_before(row[e], e, row[imax], imax)) imax = e;
    const double top = row[imax];
    for (int64_t e = 0; e < experts; ++e) {
      const double th = row[e];
      const double diff = top - th;
      bool keep;
      if (params.mask == SparseMixerMask::kPaper) {
        keep = diff <= r * (std::fabs(top) + std::fabs(th));
      } else {
        // (theta* - theta_i) / max(|theta_i|, theta*) <= 2r, without the division (A.9.6): the
        // denominator is >= |theta_i| >= 0, and 0/0 (both zero) keeps the expert like the code.
        keep = diff <= 2.0 * r * std::max(std::fabs(th), top);
      }
      mrow[e] = (e == imax || keep) ? 1 : 0;
    }
    const double masked_lse = log_sum_exp(row, experts, mrow);
    for (int64_t e = 0; e < experts; ++e) {
      probs[t * experts + e] =
          mrow[e] ? static_cast<T>(std::exp(static_cast<double>(row[e]) - masked_lse)) : T(0);
    }
    lse[t] = static_cast<T>(log_sum_exp(row, experts, nullptr));

    int64_t chosen = imax;
    double c = 1.0;
    const uint64_t token = static_cast<uint64_t>(token_offset + t);
    if (training) {
      // Gumbel-max over the unmasked logits samples D ~ pi exactly.
      double best = -std::numeric_limits<double>::infinity();
      for (int64_t e = 0; e < experts; ++e) {
        if (!mrow[e]) continue;
        const double v =
            static_cast<double>(row[e]) + rng.gumbel(token * static_cast<uint64_t>(experts) + e, 0);
        if (v > best) {
          best = v;
          chosen = e;
        }
      }
      if (chosen != imax) {
        switch (params.midpoint) {
          case SparseMixerMidpoint::kPaper:
            c = 0.5;
            break;
          case SparseMixerMidpoint::kReferenceCode:
            c = rng.uniform(token * static_cast<uint64_t>(experts), 1) <= 0.5f ? 0.5 : 1.0;
            break;
          case SparseMixerMidpoint::kEulerOnly:
            c = 1.0;
            break;
        }
      }
    }
    idx[t] = static_cast<int32_t>(chosen);
    scale[t] = static_cast<T>(c);
    is_argmax[t] = chosen == imax ? 1 : 0;
    gate[t] = static_cast<T>(c * static_cast<double>(probs[t * experts + chosen]));
  }
}

template <typename T>
void sparsemixer_backward(SparseMixerGateGrad rule, const T* d_gate,
                          const SparseMixerSaved<T>& saved, int64_t tokens, int64_t experts,
                          T* d_logits) {
  const int32_t* idx = saved.idx;
  const T *probs = saved.probs, *scale = saved.scale;
  const uint8_t* mask = saved.mask;
  for (int64_t t = 0; t < tokens; ++t) {
    sparsemixer_backward_token<T>(rule, d_gate[t], scale[t], idx[t], probs + t * experts,
                                  mask + t * experts, experts, d_logits + t * experts);
  }
}

template <typename T>
void aux_sums(const T* probs, const T* lse, const int64_t* load, int64_t rows, int64_t experts,
              int64_t tokens, double* packed) {
  double* v = packed;
  std::fill(v, v + aux_packed_size(experts), 0.0);
  const T* p = probs;
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t e = 0; e < experts; ++e) v[experts + e] += static_cast<double>(p[t * experts + e]);
  for (int64_t e = 0; e < experts; ++e) v[e] = static_cast<double>(load[e]);
  v[2 * experts] = static_cast<double>(tokens);
  const T* z = lse;
  for (int64_t t = 0; t < rows; ++t) v[2 * experts + 1] += static_cast<double>(z[t]) * z[t];
}

template <typename T>
void aux_sequence_sums(const T* probs, const int64_t* seq_counts, int64_t rows, int64_t experts,
                       int64_t sequences, double* packed) {
  double* q = packed + 2 * experts + 2;
  std::fill(q, q + experts, 0.0);
  const int64_t per_sequence = rows / sequences;
  for (int64_t t = 0; t < rows; ++t) {
    const int64_t* n = seq_counts + (t / per_sequence) * experts;
    for (int64_t e = 0; e < experts; ++e) {
      q[e] += static_cast<double>(n[e]) * static_cast<double>(probs[t * experts + e]);
    }
  }
  const double s = static_cast<double>(per_sequence);
  for (int64_t e = 0; e < experts; ++e) q[e] /= s * s;
  packed[3 * experts + 2] = static_cast<double>(sequences);
}

template <typename T>
void aux_losses_backward(const T* logits, const T* probs, const double* load, const T* lse,
                         const int64_t* seq_counts, int64_t local, const AuxGradArgs& a,
                         T* d_logits) {
  const int64_t experts = a.experts;
  if (!(a.tokens > 0)) return;
  for (int64_t t = 0; t < local; ++t) {
    const int64_t* n = a.seq_len > 0 ? seq_counts + (t / a.seq_len) * experts : nullptr;
    aux_losses_backward_token<T>(logits + t * experts, probs + t * experts, load,
                                 static_cast<double>(lse[t]), n, a, d_logits + t * experts);
  }
}

template <typename T>
void normalize_columns(const T* w, int64_t d, int64_t experts, T* out, T* inv_norm) {
  for (int64_t e = 0; e < experts; ++e) {
    normalize_column<T>(w, d, experts, e, out, inv_norm);
  }
}

template <typename T>
void normalize_columns_backward(const T* d_out, const T* out, const T* inv_norm, int64_t d,
                                int64_t experts, T* dw) {
  for (int64_t e = 0; e < experts; ++e) {
    normalize_column_backward<T>(d_out, out, inv_norm[e], d, experts, e, dw);
  }
}

template <typename T>
void argmax_rows(const T* logits, int64_t tokens, int64_t experts, int32_t* top1) {
  const T* p = logits;
  int32_t* out = top1;
  for (int64_t t = 0; t < tokens; ++t) {
    int64_t best = 0;
    for (int64_t e = 1; e < experts; ++e)
      if (p[t * experts + e] > p[t * experts + best]) best = e;
    out[t] = static_cast<int32_t>(best);
  }
}

int64_t first_label_outside(const int32_t* labels, int64_t n, int64_t experts) {
  const int32_t* l = labels;
  for (int64_t t = 0; t < n; ++t) {
    if (l[t] < 0 || l[t] >= experts) return t;
  }
  return -1;
}

template <typename A>
void ac_cluster_sums(const A* x, const int32_t* labels, int64_t tokens, int64_t d, int64_t experts,
                     double* sums, int64_t* counts) {
  std::fill(sums, sums + experts * d, 0.0);
  std::fill(counts, counts + experts, 0);
  std::vector<double> part(static_cast<size_t>(experts * d), 0.0);
  // A cluster's chunk of kAcSumChunk tokens ends: its sums join the total, in chunk order.
  const auto flush = [&](int64_t k) {
    for (int64_t q = 0; q < d; ++q) {
      sums[k * d + q] += part[k * d + q];
      part[k * d + q] = 0.0;
    }
  };
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t k = labels[t];
    for (int64_t q = 0; q < d; ++q) part[k * d + q] += static_cast<double>(x[t * d + q]);
    if (++counts[k] % kAcSumChunk == 0) flush(k);
  }
  for (int64_t k = 0; k < experts; ++k) {
    if (counts[k] % kAcSumChunk != 0) flush(k);
  }
}

template <typename A>
void ac_cluster_abs_dev(const A* x, const int32_t* labels, int64_t tokens, int64_t d,
                        int64_t experts, const double* sums, const int64_t* counts,
                        double* abs_dev) {
  std::fill(abs_dev, abs_dev + experts * d, 0.0);
  std::vector<double> part(static_cast<size_t>(experts * d), 0.0);
  std::vector<int64_t> seen(static_cast<size_t>(experts), 0);
  const auto flush = [&](int64_t k) {
    for (int64_t q = 0; q < d; ++q) {
      abs_dev[k * d + q] += part[k * d + q];
      part[k * d + q] = 0.0;
    }
  };
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t k = labels[t];
    const double inv = 1.0 / static_cast<double>(counts[k]);
    for (int64_t q = 0; q < d; ++q) {
      part[k * d + q] += std::fabs(static_cast<double>(x[t * d + q]) - sums[k * d + q] * inv);
    }
    if (++seen[k] % kAcSumChunk == 0) flush(k);
  }
  for (int64_t k = 0; k < experts; ++k) {
    if (seen[k] % kAcSumChunk != 0) flush(k);
  }
}

namespace {

// The AC router's metric weights w [E, D] (f64) from the clusters' absolute deviations dev [E, D]
// and sizes n [E]: ac_raw_weight, then normalised per cluster to mean 1 over the features (paper)
// or clipped at clip_mult x the active weights' mean and normalised per feature (reference code).
// summary [5] = (tiny clusters, clipped fraction, min, max, mean of w). The long sums (a cluster's
// D weights, all E x D) in chunked_sum's order, as the GPU adds them.
void ac_metric(const AcRouterParams& params, const double* dev, const int64_t* n, int64_t experts,
               int64_t d, double* w, double* summary) {
  const int64_t size = experts * d;
  std::vector<double> scratch(static_cast<size_t>(sum_runs(size)) + 1), terms(size);
  int64_t active_count = 0;
  for (int64_t i = 0; i < 5; ++i) summary[i] = 0.0;
  for (int64_t k = 0; k < experts; ++k) {
    if (ac_active(params, n[k])) {
      ++active_count;
    } else {
      summary[0] += 1;  // tiny clusters
    }
    for (int64_t q = 0; q < d; ++q) w[k * d + q] = ac_raw_weight(params, dev[k * d + q], n[k]);
  }
  if (params.normalization == AcNormalization::kPaper) {
    // Lemma 1 (Eq. 21): each active cluster's weights have mean 1 over the D features.
    for (int64_t k = 0; k < experts; ++k) {
      if (!ac_active(params, n[k])) continue;
      const double sum = chunked_sum(w + k * d, d, scratch.data());
      for (int64_t q = 0; q < d; ++q) w[k * d + q] *= static_cast<double>(d) / sum;
    }
  } else if (active_count > 0) {
    // Reference code: clip at clip_mult x the active weights' mean (inactive clusters add 0).
    for (int64_t i = 0; i < size; ++i) terms[i] = ac_active(params, n[i / d]) ? w[i] : 0.0;
    const double denom = static_cast<double>(active_count * d);
    const double cap = params.clip_mult * (chunked_sum(terms.data(), size, scratch.data()) / denom);
    for (int64_t i = 0; i < size; ++i) {
      const bool clip = ac_active(params, n[i / d]) && w[i] > cap;
      terms[i] = clip ? 1.0 : 0.0;
      if (clip) w[i] = cap;
    }
    summary[1] = chunked_sum(terms.data(), size, scratch.data()) / denom;  // clipped fraction
    for (int64_t q = 0; q < d; ++q) ac_normalize_feature(params, n, experts, d, active_count, q, w);
  }
  double mn = INFINITY, mx = -INFINITY;
  for (int64_t i = 0; i < size; ++i) {
    mn = std::fmin(mn, w[i]);
    mx = std::fmax(mx, w[i]);
  }
  summary[2] = mn;
  summary[3] = mx;
  summary[4] = chunked_sum(w, size, scratch.data()) / static_cast<double>(size > 0 ? size : 1);
}

}  // namespace

template <typename F>
void ac_metric_typed(const AcRouterParams& params, const double* abs_dev, const int64_t* counts,
                     int64_t experts, int64_t d, F* metric, double* summary) {
  std::vector<double> w(experts * d);
  ac_metric(params, abs_dev, counts, experts, d, w.data(), summary);
  F* m = metric;
  for (int64_t i = 0; i < experts * d; ++i) m[i] = static_cast<F>(w[i]);
}

template <typename A, typename F>
void ac_apply_metric(const A* x, const int32_t* labels, const F* metric, int64_t tokens, int64_t d,
                     F* out) {
  for (int64_t t = 0; t < tokens; ++t) {
    const F* m = metric + static_cast<int64_t>(labels[t]) * d;
    for (int64_t q = 0; q < d; ++q) out[t * d + q] = static_cast<F>(x[t * d + q]) * m[q];
  }
}

template <typename A, typename F>
void ac_apply_metric_backward(const F* d_out, const int32_t* labels, const F* metric,
                              int64_t tokens, int64_t d, A* dx) {
  for (int64_t t = 0; t < tokens; ++t) {
    const F* m = metric + static_cast<int64_t>(labels[t]) * d;
    for (int64_t q = 0; q < d; ++q) {
      dx[t * d + q] = static_cast<A>(static_cast<F>(dx[t * d + q]) + d_out[t * d + q] * m[q]);
    }
  }
}

#define MOE_INSTANTIATE_ROUTER(T)                                                                  \
  template void topk_route<T>(const RouteParams&, const T*, const T*, int64_t, int32_t*, T*, T*,   \
                              T*);                                                                 \
  template void topk_route_backward<T>(const RouteParams&, const T*, const T*, const T*,           \
                                       const int32_t*, int64_t, T*);                               \
  template void sparsemixer_route<T>(const SparseMixerParams&, bool, const CounterRng&, int64_t,   \
                                     const T*, int64_t, int64_t, const SparseMixerOutputs<T>&);    \
  template void sparsemixer_backward<T>(SparseMixerGateGrad, const T*, const SparseMixerSaved<T>&, \
                                        int64_t, int64_t, T*);                                     \
  template void aux_sums<T>(const T*, const T*, const int64_t*, int64_t, int64_t, int64_t,         \
                            double*);                                                              \
  template void aux_sequence_sums<T>(const T*, const int64_t*, int64_t, int64_t, int64_t,          \
                                     double*);                                                     \
  template void aux_losses_backward<T>(const T*, const T*, const double*, const T*,                \
                                       const int64_t*, int64_t, const AuxGradArgs&, T*);           \
  template void normalize_columns<T>(const T*, int64_t, int64_t, T*, T*);                          \
  template void normalize_columns_backward<T>(const T*, const T*, const T*, int64_t, int64_t, T*); \
  template void argmax_rows<T>(const T*, int64_t, int64_t, int32_t*);                              \
  template void ac_metric_typed<T>(const AcRouterParams&, const double*, const int64_t*, int64_t,  \
                                   int64_t, T*, double*);
MOE_INSTANTIATE_ROUTER(float)
MOE_INSTANTIATE_ROUTER(double)
#undef MOE_INSTANTIATE_ROUTER

#define MOE_INSTANTIATE_AC(A, F)                                                                 \
  template void ac_cluster_sums<A>(const A*, const int32_t*, int64_t, int64_t, int64_t, double*, \
                                   int64_t*);                                                    \
  template void ac_cluster_abs_dev<A>(const A*, const int32_t*, int64_t, int64_t, int64_t,       \
                                      const double*, const int64_t*, double*);                   \
  template void ac_apply_metric<A, F>(const A*, const int32_t*, const F*, int64_t, int64_t, F*); \
  template void ac_apply_metric_backward<A, F>(const F*, const int32_t*, const F*, int64_t,      \
                                               int64_t, A*);
MOE_INSTANTIATE_AC(float, float)
MOE_INSTANTIATE_AC(double, double)
MOE_INSTANTIATE_AC(bf16, float)
#undef MOE_INSTANTIATE_AC

}  // namespace moe::kernels::ref
