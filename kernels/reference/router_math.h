// Per-token router arithmetic shared by the CPU reference (router_ref.cc, router.cc) and the CUDA
// kernels (kernels/cuda/router.cu): both run these exact expressions, in double.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/base/dtype.h"  // MOE_HOST_DEVICE
#include "core/base/moe_config.h"

namespace moe::kernels::ref {

// SparseMixer backward of one token: s = dL/d(c pi_D) turned into dL/dpi_D by the gate-gradient
// rule, then through the masked softmax into d_row (accumulated).
template <typename T>
MOE_HOST_DEVICE inline void sparsemixer_backward_token(SparseMixerGateGrad rule, double s,
                                                       double c, int64_t chosen, const T* probs,
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

// (balance, z, weighted) from the packed sums [2E + 2] (kernels/router.h aux_sums).
MOE_HOST_DEVICE inline void aux_losses_from_packed(const double* v, int64_t experts,
                                                   int64_t top_k, double balance_coef,
                                                   double z_coef, double* out) {
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

// The auxiliary losses' gradient for one token's logits (accumulated into d): the balance loss
// E sum_e f_e P_e through the token's probabilities p, the z-loss through softmax(logits).
// load: the packed loads; tokens: the packed token count (> 0).
template <typename T>
MOE_HOST_DEVICE inline void aux_losses_backward_token(const T* logits, const T* p,
                                                      const double* load, double lse,
                                                      double tokens, int64_t experts, int64_t k,
                                                      double balance_weight, double z_weight,
                                                      T* d) {
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

}  // namespace moe::kernels::ref
