// Per-token router arithmetic shared by the CPU loops (router_ref.cc) and the CUDA
// kernels (kernels/cuda/router.cu): both run these exact expressions, in double.
#pragma once

#include <cmath>
#include <cstdint>

#include "base/dtype.h"  // MOE_HOST_DEVICE
#include "types/moe_config.h"

namespace moe::kernels::ref {

// SparseMixer backward of one token: s = dL/d(c pi_D) turned into dL/dpi_D by the gate-gradient
// rule, then through the masked softmax into d_row (accumulated).
template <typename T>
MOE_HOST_DEVICE inline void sparsemixer_backward_token(SparseMixerGateGrad rule, double s, double c,
                                                       int64_t chosen, const T* probs,
                                                       const uint8_t* mask, int64_t experts,
                                                       T* d_row) {
  const double d_pi = rule == SparseMixerGateGrad::kReferenceCode ? 2.0 * s : (1.0 + c) * s;
  const double pi_d = probs[chosen];
  for (int64_t j = 0; j < experts; ++j) {
    if (!mask[j]) continue;
    const double onehot = j == chosen ? 1.0 : 0.0;
    d_row[j] += static_cast<T>(d_pi * pi_d * (onehot - static_cast<double>(probs[j])));
  }
}

// Column e of a [d, experts] row-major matrix normalised to unit L2 norm (unit-norm expert
// embeddings): out = w / ||w||, inv_norm = 1 / ||w|| (0 for a zero column). Sums in double.
template <typename T>
MOE_HOST_DEVICE inline void normalize_column(const T* w, int64_t d, int64_t experts, int64_t e,
                                             T* out, T* inv_norm) {
  double sq = 0;
  for (int64_t q = 0; q < d; ++q) {
    const double v = static_cast<double>(w[q * experts + e]);
    sq += v * v;
  }
  const double inv = sq > 0 ? 1.0 / sqrt(sq) : 0.0;
  for (int64_t q = 0; q < d; ++q) {
    out[q * experts + e] = static_cast<T>(static_cast<double>(w[q * experts + e]) * inv);
  }
  inv_norm[e] = static_cast<T>(inv);
}

// Its gradient for column e: dw += inv (d_out - out <out, d_out>).
template <typename T>
MOE_HOST_DEVICE inline void normalize_column_backward(const T* d_out, const T* out, T inv,
                                                      int64_t d, int64_t experts, int64_t e,
                                                      T* dw) {
  double dot = 0;
  for (int64_t q = 0; q < d; ++q) {
    dot += static_cast<double>(out[q * experts + e]) * static_cast<double>(d_out[q * experts + e]);
  }
  for (int64_t q = 0; q < d; ++q) {
    const int64_t i = q * experts + e;
    dw[i] = static_cast<T>(static_cast<double>(dw[i]) +
                           static_cast<double>(inv) *
                               (static_cast<double>(d_out[i]) - static_cast<double>(out[i]) * dot));
  }
}

// (balance, z, weighted) from the packed sums [2E + 2] (kernels/router.h aux_sums).
MOE_HOST_DEVICE inline void aux_losses_from_packed(const double* v, int64_t experts, int64_t top_k,
                                                   double balance_coef, double z_coef,
                                                   double* out) {
  const double t = v[2 * experts];
  double balance = 0, z = 0;
  if (t > 0) {
    const double slots = t * static_cast<double>(top_k);
    for (int64_t e = 0; e < experts; ++e) balance += (v[e] / slots) * (v[experts + e] / t);
    balance *= static_cast<double>(experts);
    z = v[2 * experts + 1] / t;
  }
  out[0] = balance;
  out[1] = z;
  out[2] = balance_coef * balance + z_coef * z;
}

// The sizes and weights of the auxiliary losses' gradient (aux_losses_backward_token and
// ref::aux_losses_backward): tokens is the packed token count T the losses are normalised by
// (> 0 for a token's gradient), experts E, k the router's top-k, and the loss weights.
struct AuxGradArgs {
  double tokens;
  int64_t experts;
  int64_t k;
  double balance_weight;
  double z_weight;
};

// The auxiliary losses' gradient for one token's logits (accumulated into d): the balance loss
// E sum_e f_e P_e through the token's probabilities p, the z-loss through softmax(logits).
// load: the packed loads; lse: the token's logsumexp; a.tokens: the packed token count (> 0).
template <typename T>
MOE_HOST_DEVICE inline void aux_losses_backward_token(const T* logits, const T* p,
                                                      const double* load, double lse,
                                                      const AuxGradArgs& a, T* d) {
  const double tokens = a.tokens;
  const int64_t experts = a.experts, k = a.k;
  const double balance_weight = a.balance_weight, z_weight = a.z_weight;
  const double slots = tokens * static_cast<double>(k);
  if (balance_weight != 0) {
    // dL/dp_te = E f_e / T; softmax backward p_j (f_j - sum_e p_e f_e).
    double pf = 0;
    for (int64_t e = 0; e < experts; ++e) pf += static_cast<double>(p[e]) * (load[e] / slots);
    const double c = balance_weight * static_cast<double>(experts) / tokens;
    for (int64_t e = 0; e < experts; ++e) {
      d[e] += static_cast<T>(c * static_cast<double>(p[e]) * (load[e] / slots - pf));
    }
  }
  if (z_weight != 0) {
    // Lz = mean_t lse_t^2, dLz/dlogit_tj = 2 lse_t softmax(logits_t)_j / T.
    const double c = z_weight * 2.0 * lse / tokens;
    for (int64_t e = 0; e < experts; ++e) {
      d[e] += static_cast<T>(c * exp(static_cast<double>(logits[e]) - lse));
    }
  }
}

// The AC router's metric weights w [E, D] (f64) from the clusters' absolute deviations dev [E, D]
// and sizes n [E] (spec/sparsemixer-acmoe.md B.3, B.9): w_kq = 1 / (MAD_kq + eps) for clusters of
// at least min_cluster_size tokens (the identity otherwise), normalised per cluster (paper) or
// clipped and normalised per feature (reference code). summary [5] = (tiny clusters, clipped
// fraction, min, max, mean of w).
MOE_HOST_DEVICE inline void ac_metric(const AcRouterParams& params, const double* dev,
                                      const int64_t* n, int64_t experts, int64_t d, double* w,
                                      double* summary) {
  auto active = [&](int64_t k) { return n[k] >= params.min_cluster_size; };
  for (int64_t i = 0; i < experts * d; ++i) w[i] = 1.0;
  for (int64_t i = 0; i < 5; ++i) summary[i] = 0.0;
  double& tiny = summary[0];
  double& clipped_fraction = summary[1];
  for (int64_t k = 0; k < experts; ++k) {
    if (!active(k)) {
      tiny += 1;
      continue;
    }
    for (int64_t q = 0; q < d; ++q) {
      const double mad = n[k] > 0 ? dev[k * d + q] / static_cast<double>(n[k]) : 0.0;
      w[k * d + q] = 1.0 / (mad + params.eps);
    }
  }
  if (params.normalization == AcNormalization::kPaper) {
    // Lemma 1 (Eq. 21): each active cluster's weights have mean 1 over the D features.
    for (int64_t k = 0; k < experts; ++k) {
      if (!active(k)) continue;
      double sum = 0;
      for (int64_t q = 0; q < d; ++q) sum += w[k * d + q];
      for (int64_t q = 0; q < d; ++q) w[k * d + q] *= static_cast<double>(d) / sum;
    }
  } else {
    // Reference code: clip at clip_mult x the global mean, then each feature has mean 1 over the
    // active clusters.
    double mean = 0;
    int64_t active_count = 0;
    for (int64_t k = 0; k < experts; ++k) {
      if (!active(k)) continue;
      ++active_count;
      for (int64_t q = 0; q < d; ++q) mean += w[k * d + q];
    }
    if (active_count > 0) {
      mean /= static_cast<double>(active_count * d);
      const double cap = params.clip_mult * mean;
      int64_t clipped = 0;
      for (int64_t k = 0; k < experts; ++k) {
        if (!active(k)) continue;
        for (int64_t q = 0; q < d; ++q) {
          if (w[k * d + q] > cap) {
            w[k * d + q] = cap;
            ++clipped;
          }
        }
      }
      clipped_fraction = static_cast<double>(clipped) / static_cast<double>(active_count * d);
      for (int64_t q = 0; q < d; ++q) {
        double col = 0;
        for (int64_t k = 0; k < experts; ++k) {
          if (active(k)) col += w[k * d + q];
        }
        col /= static_cast<double>(active_count);
        for (int64_t k = 0; k < experts; ++k) {
          if (active(k)) w[k * d + q] /= col;
        }
      }
    }
  }
  double mn = INFINITY, mx = -INFINITY, mean = 0;
  for (int64_t i = 0; i < experts * d; ++i) {
    mn = fmin(mn, w[i]);
    mx = fmax(mx, w[i]);
    mean += w[i];
  }
  summary[2] = mn;
  summary[3] = mx;
  summary[4] = mean / static_cast<double>(experts * d > 0 ? experts * d : 1);
}

}  // namespace moe::kernels::ref
