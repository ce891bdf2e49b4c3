// Per-token router arithmetic shared by the CPU loops (router_ref.cc) and the CUDA
// kernels (kernels/cuda/router.cu): both run these exact expressions, in double.
#pragma once

#include <cmath>
#include <cstdint>

#include "base/dtype.h"  // MOE_HOST_DEVICE
#include "types/moe_config.h"

namespace moe::kernels::ref {

// --- Top-k routing of one token (kernels/router.h topk_route) ----------------------------------

// The options of topk_route for one row of E logits and its top-K (kernels/router.h RouteOptions,
// without the selection bias, which the caller passes as a pointer).
struct RouteParams {
  ScoreFunction score;
  bool renormalize;
  double scaling;
  int64_t experts;
  int64_t k;
  // Group-limited routing: the experts in `groups` equal groups of consecutive indices, each
  // token choosing only inside its best `topk_groups` (groups <= 1 or topk_groups >= groups: no
  // limit). The backward does not read them (the gates' gradient follows the chosen idx).
  int64_t groups = 1;
  int64_t topk_groups = 1;
  // A group's score sums its group_top largest choice scores (2: DeepSeek-V3's group-limited
  // routing; ceil(K / M): its node-limited routing over M nodes). Capped at the group size.
  int64_t group_top = 2;
};

MOE_HOST_DEVICE inline double sigmoid_of(double x) { return 1.0 / (1.0 + exp(-x)); }

// log(sum_i exp(row[i])) over n values, in double (the largest value taken out first).
template <typename T>
MOE_HOST_DEVICE inline double row_log_sum_exp(const T* row, int64_t n) {
  double mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = fmax(mx, static_cast<double>(row[i]));
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += exp(static_cast<double>(row[i]) - mx);
  return mx + log(s);
}

// Expert e's score: softmax (exp(logit - lse)) or sigmoid of its logit.
template <typename T>
MOE_HOST_DEVICE inline double route_score(ScoreFunction score, const T* row, double lse,
                                          int64_t e) {
  const double x = static_cast<double>(row[e]);
  return score == ScoreFunction::kSigmoid ? sigmoid_of(x) : exp(x - lse);
}

// What the top-k ranks expert e by: the logit for softmax without a bias (the order of the
// scores, without their rounding), else score + bias[e] (bias may be null: zeros).
template <typename T>
MOE_HOST_DEVICE inline double route_key(const RouteParams& p, const T* row, const T* bias,
                                        double lse, int64_t e) {
  if (p.score == ScoreFunction::kSoftmax && bias == nullptr) return static_cast<double>(row[e]);
  const double s = route_score(p.score, row, lse, e);
  return bias == nullptr ? s : s + static_cast<double>(bias[e]);
}

// The sum of the n largest choice keys (score + bias) of experts [begin, end), in descending
// order of key (equal keys: the lower index first); n <= end - begin.
template <typename T>
MOE_HOST_DEVICE inline double group_top_sum(const RouteParams& p, const T* row, const T* bias,
                                            double lse, int64_t begin, int64_t end, int64_t n) {
  auto key_of = [&](int64_t e) {
    const double s = route_score(p.score, row, lse, e);
    return bias == nullptr ? s : s + static_cast<double>(bias[e]);
  };
  if (n == 2) {  // the common case, in one pass
    double first = -INFINITY, second = -INFINITY;
    for (int64_t e = begin; e < end; ++e) {
      const double key = key_of(e);
      if (key > first) {
        second = first;
        first = key;
      } else if (key > second) {
        second = key;
      }
    }
    return first + second;
  }
  // n passes: pass i takes the largest key after (previous key, previous index) in the order.
  double sum = 0, last_key = INFINITY;
  int64_t last_e = -1;
  for (int64_t i = 0; i < n; ++i) {
    int64_t best = -1;
    double best_key = 0;
    for (int64_t e = begin; e < end; ++e) {
      const double key = key_of(e);
      const bool after = key < last_key || (key == last_key && e > last_e);
      if (after && (best < 0 || key > best_key)) {
        best = e;
        best_key = key;
      }
    }
    sum = i == 0 ? best_key : sum + best_key;
    last_key = best_key;
    last_e = best;
  }
  return sum;
}

// Group-limited routing (DeepSeek-V3): a group's score is the sum of its group_top largest choice
// scores (score + bias; all of them in a group that small), and a token keeps the topk_groups
// groups of largest score (ties: the lower group). Returns their bit mask (bit g: group g kept;
// groups <= 64, checked by the config), every bit without a limit.
template <typename T>
MOE_HOST_DEVICE inline uint64_t kept_groups(const RouteParams& p, const T* row, const T* bias,
                                            double lse) {
  if (p.groups <= 1 || p.topk_groups >= p.groups) return ~uint64_t{0};
  const int64_t size = p.experts / p.groups;
  const int64_t top = p.group_top < size ? p.group_top : size;
  uint64_t kept = 0;
  for (int64_t j = 0; j < p.topk_groups; ++j) {
    int64_t best = -1;
    double best_score = 0;
    for (int64_t g = 0; g < p.groups; ++g) {
      if ((kept >> g) & 1) continue;
      const double score = group_top_sum(p, row, bias, lse, g * size, (g + 1) * size, top);
      if (best < 0 || score > best_score) {
        best = g;
        best_score = score;
      }
    }
    kept |= uint64_t{1} << best;
  }
  return kept;
}

// One token: idx = the K largest keys in descending order (ties: lower expert index first),
// inside the kept groups;
// gate = the chosen scores, renormalised over the K or not, times the scaling (softmax
// renormalised: the softmax over the K chosen logits); probs = softmax, or sigmoid scores over
// their sum; lse = logsumexp of the logits. row, probs [E]; idx, gate [K]; bias [E] or null.
template <typename T>
MOE_HOST_DEVICE inline void topk_route_token(const RouteParams& p, const T* row, const T* bias,
                                             int32_t* idx, T* gate, T* probs, T* lse) {
  const int64_t experts = p.experts, k = p.k;
  const double l = row_log_sum_exp(row, experts);
  const uint64_t kept = kept_groups(p, row, bias, l);
  const int64_t group_size = p.groups > 1 ? experts / p.groups : experts;
  for (int64_t j = 0; j < k; ++j) {
    int64_t best = -1;
    double best_key = 0;
    for (int64_t e = 0; e < experts; ++e) {
      if (((kept >> (e / group_size)) & 1) == 0) continue;
      bool taken = false;
      for (int64_t q = 0; q < j; ++q) taken |= idx[q] == e;
      if (taken) continue;
      const double key = route_key(p, row, bias, l, e);
      if (best < 0 || key > best_key) {  // e > best: a tie keeps the lower index
        best = e;
        best_key = key;
      }
    }
    idx[j] = static_cast<int32_t>(best);
  }
  if (p.score == ScoreFunction::kSoftmax) {
    if (p.renormalize) {
      // Softmax over the K selected logits, shifted by the largest (idx[0]'s without a bias).
      double top = row[idx[0]];
      for (int64_t j = 1; j < k; ++j) top = fmax(top, static_cast<double>(row[idx[j]]));
      double denom = 0;
      for (int64_t j = 0; j < k; ++j) denom += exp(static_cast<double>(row[idx[j]]) - top);
      for (int64_t j = 0; j < k; ++j) {
        gate[j] = static_cast<T>(exp(static_cast<double>(row[idx[j]]) - top) / denom * p.scaling);
      }
    } else {
      for (int64_t j = 0; j < k; ++j) {
        gate[j] = static_cast<T>(exp(static_cast<double>(row[idx[j]]) - l) * p.scaling);
      }
    }
    for (int64_t e = 0; e < experts; ++e) {
      probs[e] = static_cast<T>(exp(static_cast<double>(row[e]) - l));
    }
  } else {
    double chosen = 0, all = 0;
    for (int64_t j = 0; j < k; ++j) chosen += sigmoid_of(static_cast<double>(row[idx[j]]));
    for (int64_t e = 0; e < experts; ++e) all += sigmoid_of(static_cast<double>(row[e]));
    const double denom = p.renormalize ? chosen : 1.0;
    for (int64_t j = 0; j < k; ++j) {
      gate[j] = static_cast<T>(sigmoid_of(static_cast<double>(row[idx[j]])) / denom * p.scaling);
    }
    for (int64_t e = 0; e < experts; ++e) {
      probs[e] = static_cast<T>(sigmoid_of(static_cast<double>(row[e])) / all);
    }
  }
  *lse = static_cast<T>(l);
}

// Its backward for one token, accumulated into d_row [E] (c = scaling, d = d_gate):
//   softmax renormalised: d_row[i_j] += g_j (d_j - sum_j' g_j' d_j' / c) (from the gates alone;
//     row may be null);
//   softmax not:  d_row[e] += c p_e (1[e = i_j] d_j - sum_j d_j p_{i_j}), p = softmax(row);
//   sigmoid renormalised: d_row[i_j] += c s_j (1 - s_j) / S (d_j - sum_j' s_j' d_j' / S),
//     S = sum_j s_j over the chosen;
//   sigmoid not: d_row[i_j] += c d_j s_j (1 - s_j).
template <typename T>
MOE_HOST_DEVICE inline void topk_route_backward_token(const RouteParams& p, const T* row,
                                                      const T* d_gate, const T* gate,
                                                      const int32_t* idx, T* d_row) {
  const int64_t experts = p.experts, k = p.k;
  const double c = p.scaling;
  if (p.score == ScoreFunction::kSoftmax && p.renormalize) {
    double dot = 0;
    for (int64_t j = 0; j < k; ++j) dot += static_cast<double>(gate[j]) * d_gate[j];
    dot /= c;
    for (int64_t j = 0; j < k; ++j) {
      const double g = gate[j];
      d_row[idx[j]] += static_cast<T>(g * (d_gate[j] - dot));
    }
  } else if (p.score == ScoreFunction::kSoftmax) {
    const double l = row_log_sum_exp(row, experts);
    double dot = 0;
    for (int64_t j = 0; j < k; ++j) dot += d_gate[j] * route_score(p.score, row, l, idx[j]);
    for (int64_t e = 0; e < experts; ++e) {
      double v = -dot;
      for (int64_t j = 0; j < k; ++j) v += idx[j] == e ? static_cast<double>(d_gate[j]) : 0.0;
      d_row[e] += static_cast<T>(c * route_score(p.score, row, l, e) * v);
    }
  } else {
    double sum = 0, dot = 0;
    for (int64_t j = 0; j < k; ++j) {
      const double s = sigmoid_of(static_cast<double>(row[idx[j]]));
      sum += s;
      dot += s * d_gate[j];
    }
    const double denom = p.renormalize ? sum : 1.0;
    const double mean = p.renormalize ? dot / sum : 0.0;
    for (int64_t j = 0; j < k; ++j) {
      const double s = sigmoid_of(static_cast<double>(row[idx[j]]));
      d_row[idx[j]] += static_cast<T>(c * s * (1.0 - s) / denom * (d_gate[j] - mean));
    }
  }
}

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

// (balance, z, weighted, seq) from the packed sums [3E + 3] (kernels/router.h aux_sums): the
// Switch balance loss, the z-loss, the weighted sum and DeepSeek-V3's sequence-wise balance loss
// (E / K) sum_e q_e / sequences. The sequence loss joins the weighted sum only with a coefficient.
MOE_HOST_DEVICE inline void aux_losses_from_packed(const double* v, int64_t experts, int64_t top_k,
                                                   double balance_coef, double z_coef,
                                                   double seq_coef, double* out) {
  const double t = v[2 * experts];
  double balance = 0, z = 0, seq = 0;
  if (t > 0) {
    const double slots = t * static_cast<double>(top_k);
    for (int64_t e = 0; e < experts; ++e) balance += (v[e] / slots) * (v[experts + e] / t);
    balance *= static_cast<double>(experts);
    z = v[2 * experts + 1] / t;
  }
  const double sequences = v[3 * experts + 2];
  if (sequences > 0) {
    for (int64_t e = 0; e < experts; ++e) seq += v[2 * experts + 2 + e];
    seq *= static_cast<double>(experts) / static_cast<double>(top_k) / sequences;
  }
  out[0] = balance;
  out[1] = z;
  out[2] = balance_coef * balance + z_coef * z;
  if (seq_coef != 0) out[2] += seq_coef * seq;
  out[3] = seq;
}

// The sizes and weights of the auxiliary losses' gradient (aux_losses_backward_token and
// ref::aux_losses_backward): tokens is the packed token count T the losses are normalised by
// (> 0 for a token's gradient), experts E, k the router's top-k, and the loss weights; score is
// how the probabilities came from the logits (their Jacobian); seq_scale is the sequence loss's
// dL/dp_te per routed count of e in t's sequence, w_seq E / (K S^2 N) for N sequences (over the
// ranks sharing the loss) of seq_len = S tokens (0: none; token t's counts are row t / S).
struct AuxGradArgs {
  double tokens;
  int64_t experts;
  int64_t k;
  double balance_weight;
  double z_weight;
  ScoreFunction score = ScoreFunction::kSoftmax;
  double seq_scale = 0;
  int64_t seq_len = 0;
};

// The loss weights of aux_grad_args (kernels/router.h AuxLossWeights).
struct AuxWeights {
  int64_t k;
  double balance, z, seq;
  ScoreFunction score;
};

// The gradient's arguments from the packed sums v [3E + 3] (kernels/router.h aux_sums) for tokens
// in sequences of seq_len (0: no sequence loss).
MOE_HOST_DEVICE inline AuxGradArgs aux_grad_args(const double* v, int64_t experts,
                                                 const AuxWeights& w, int64_t seq_len) {
  AuxGradArgs a{v[2 * experts], experts, w.k, w.balance, w.z, w.score};
  const double sequences = v[3 * experts + 2];
  if (seq_len > 0 && sequences > 0 && w.seq != 0) {
    const double s = static_cast<double>(seq_len);
    a.seq_scale =
        w.seq * static_cast<double>(experts) / static_cast<double>(w.k) / (s * s) / sequences;
    a.seq_len = seq_len;
  }
  return a;  // seq_scale 0 and seq_len 0 unless the sequence loss has a gradient
}

// d p_e / d logit_j = J_e (1[e = j] - p_j) up to the factor J_e: p_e for a softmax (full or
// masked), p_e (1 - sigmoid(logit_e)) for sigmoid scores over their sum.
template <typename T>
MOE_HOST_DEVICE inline double prob_jacobian(ScoreFunction score, const T* logits, const T* p,
                                            int64_t e) {
  const double pe = static_cast<double>(p[e]);
  if (score == ScoreFunction::kSoftmax) return pe;
  return pe * (1.0 - sigmoid_of(static_cast<double>(logits[e])));
}

// The auxiliary losses' gradient for one token's logits (accumulated into d): the balance loss
// E sum_e f_e P_e through the token's probabilities p, the z-loss through softmax(logits), the
// sequence loss through p with its sequence's counts (seq_count [E], or null).
// load: the packed loads; lse: the token's logsumexp; a.tokens: the packed token count (> 0).
template <typename T>
MOE_HOST_DEVICE inline void aux_losses_backward_token(const T* logits, const T* p,
                                                      const double* load, double lse,
                                                      const int64_t* seq_count,
                                                      const AuxGradArgs& a, T* d) {
  const double tokens = a.tokens;
  const int64_t experts = a.experts, k = a.k;
  const double balance_weight = a.balance_weight, z_weight = a.z_weight;
  const double slots = tokens * static_cast<double>(k);
  if (balance_weight != 0) {
    // dL/dp_te = E f_e / T; through p: J_j (f_j - sum_e p_e f_e).
    double pf = 0;
    for (int64_t e = 0; e < experts; ++e) pf += static_cast<double>(p[e]) * (load[e] / slots);
    const double c = balance_weight * static_cast<double>(experts) / tokens;
    for (int64_t e = 0; e < experts; ++e) {
      d[e] += static_cast<T>(c * prob_jacobian(a.score, logits, p, e) * (load[e] / slots - pf));
    }
  }
  if (z_weight != 0) {
    // Lz = mean_t lse_t^2, dLz/dlogit_tj = 2 lse_t softmax(logits_t)_j / T.
    const double c = z_weight * 2.0 * lse / tokens;
    for (int64_t e = 0; e < experts; ++e) {
      d[e] += static_cast<T>(c * exp(static_cast<double>(logits[e]) - lse));
    }
  }
  if (a.seq_scale != 0 && seq_count != nullptr) {
    // dL/dp_te = seq_scale n_e (n: the counts of t's sequence); through p as above.
    double pn = 0;
    for (int64_t e = 0; e < experts; ++e) {
      pn += static_cast<double>(p[e]) * static_cast<double>(seq_count[e]);
    }
    for (int64_t e = 0; e < experts; ++e) {
      d[e] += static_cast<T>(a.seq_scale * prob_jacobian(a.score, logits, p, e) *
                             (static_cast<double>(seq_count[e]) - pn));
    }
  }
}

// The AC router's metric (spec/sparsemixer-acmoe.md B.3, B.9), the per-element steps that the CPU
// (router_ref.cc ac_metric) and the GPU (kernels/cuda/ac_router.cu) both run; the long sums
// between them follow ref::chunked_sum's order on both (chunked_sum.h).

// Whether cluster k (n_k tokens) is large enough to be weighted (the identity otherwise).
MOE_HOST_DEVICE inline bool ac_active(const AcRouterParams& params, int64_t n_k) {
  return n_k >= params.min_cluster_size;
}

// w_kq = 1 / (MAD_kq + eps) with MAD = dev / n for an active cluster, 1 for the others.
MOE_HOST_DEVICE inline double ac_raw_weight(const AcRouterParams& params, double dev_kq,
                                            int64_t n_k) {
  if (!ac_active(params, n_k)) return 1.0;
  const double mad = n_k > 0 ? dev_kq / static_cast<double>(n_k) : 0.0;
  return 1.0 / (mad + params.eps);
}

// Reference code, feature q: each active cluster's weight over the mean of the active clusters'
// (k in order), so that each feature has mean 1 over them.
MOE_HOST_DEVICE inline void ac_normalize_feature(const AcRouterParams& params, const int64_t* n,
                                                 int64_t experts, int64_t d, int64_t active_count,
                                                 int64_t q, double* w) {
  double col = 0;
  for (int64_t k = 0; k < experts; ++k) {
    if (ac_active(params, n[k])) col += w[k * d + q];
  }
  col /= static_cast<double>(active_count);
  for (int64_t k = 0; k < experts; ++k) {
    if (ac_active(params, n[k])) w[k * d + q] /= col;
  }
}

}  // namespace moe::kernels::ref
