#include "tests/testing/attention_bound.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "base/check.h"
#include "base/status.h"
#include "kernels/cpu/attention_ref.h"

namespace moe::testing {
namespace {

constexpr double kE32 = 0x1p-23;  // one f32 operation (twice the unit roundoff)
constexpr double kUb = 0x1p-8;    // one rounding to bf16 (round to nearest)

// Rounding operations in a tensor-core sum of n terms: one per addend, and one per group of 16
// (an adder that aligns a group to its largest addend and truncates), plus the final store.
double sum_ops(int64_t n) { return static_cast<double>(n + n / 16 + 2); }

std::vector<double> to_doubles(const TensorView& t) {
  Tensor d = Tensor::empty(t.shape(), DType::kF64);
  MOE_CHECK(convert_into(t, d).ok());
  return std::vector<double>(d.data<double>(), d.data<double>() + d.numel());
}

// One (sequence, head): row vectors of q, k, v and dO (Dh each) and the dropout scale.
struct Head {
  const kernels::AttentionArgs& a;
  int64_t b, h, dh, D;
  const std::vector<double>& qkv;
  const std::vector<double>& dout;
  double q(int64_t i, int64_t c) const { return qkv[(b * a.seq_len + i) * 3 * D + h * dh + c]; }
  double k(int64_t j, int64_t c) const { return qkv[(b * a.seq_len + j) * 3 * D + D + h * dh + c]; }
  double v(int64_t j, int64_t c) const {
    return qkv[(b * a.seq_len + j) * 3 * D + 2 * D + h * dh + c];
  }
  double g(int64_t i, int64_t c) const { return dout[(b * a.seq_len + i) * D + h * dh + c]; }
  double mask(int64_t i, int64_t j) const {
    if (!kernels::ref::attention_keep(a, b, h, i, j)) return 0.0;
    return a.dropout == 0.f ? 1.0
                            : static_cast<double>(
                                  static_cast<float>(1.0 / (1.0 - static_cast<double>(a.dropout))));
  }
};

// Square [S, S] matrices of one head, lower triangle used.
struct Square {
  int64_t n;
  std::vector<double> x;
  explicit Square(int64_t size) : n(size), x(size * size, 0.0) {}
  double& operator()(int64_t i, int64_t j) { return x[i * n + j]; }
};

// The forward of one head: P, its relative error bound, lse and its bound; out and its bound.
void forward_head(const Head& hd, double scale, Square* p, Square* ep, AttentionWithBound* r) {
  const int64_t S = hd.a.seq_len, dh = hd.dh;
  Square s(S), es(S);
  for (int64_t i = 0; i < S; ++i) {
    double mx = -INFINITY, es_max = 0;
    for (int64_t j = 0; j <= i; ++j) {
      double dot = 0, mag = 0;
      for (int64_t c = 0; c < dh; ++c) {
        dot += hd.q(i, c) * hd.k(j, c);
        mag += std::fabs(hd.q(i, c) * hd.k(j, c));
      }
      s(i, j) = scale * dot;
      es(i, j) = kE32 * (sum_ops(dh) * scale * mag + std::fabs(s(i, j)));
      mx = std::max(mx, s(i, j));
      es_max = std::max(es_max, es(i, j));
    }
    double z = 0;
    for (int64_t j = 0; j <= i; ++j) z += std::exp(s(i, j) - mx);
    const double lse = mx + std::log(z);
    const double e_lse = es_max + kE32 * (2.0 * S + 8.0 + 2.0 * (std::fabs(lse) + 1.0));
    const int64_t at = (hd.b * hd.a.heads + hd.h) * S + i;
    r->lse[at] = lse;
    r->lse_bound[at] = e_lse;
    for (int64_t j = 0; j <= i; ++j) {
      (*p)(i, j) = std::exp(s(i, j) - lse);
      (*ep)(i, j) = es(i, j) + e_lse + kE32 * (std::fabs(s(i, j) - lse) + 2.0);
    }
  }
  for (int64_t i = 0; i < S; ++i) {
    for (int64_t c = 0; c < dh; ++c) {
      double o = 0, err = 0;
      for (int64_t j = 0; j <= i; ++j) {
        const double pm = (*p)(i, j) * hd.mask(i, j);
        o += pm * hd.v(j, c);
        err += pm * std::fabs(hd.v(j, c)) * ((*ep)(i, j) + kUb + kE32 * sum_ops(S));
      }
      const int64_t at = (hd.b * S + i) * hd.D + hd.h * dh + c;
      r->out[at] = o;
      r->out_bound[at] = err + kUb * (std::fabs(o) + err);
    }
  }
}

// The error of D_i formed as dO_i . O'_i (the fused kernels, as flash attention) from the output
// O' they stored: dO . O = D exactly (O exact), so the error is |dO_i . O'_i - D_i| in double,
// plus the f32 sum of the dot (each product of two bf16 values is exact in f32).
double d_from_output_error(const Head& hd, int64_t i, double d_exact,
                           const std::vector<double>& out_used) {
  double dot = 0, mag = 0;
  for (int64_t c = 0; c < hd.dh; ++c) {
    const double o = out_used[(hd.b * hd.a.seq_len + i) * hd.D + hd.h * hd.dh + c];
    dot += hd.g(i, c) * o;
    mag += std::fabs(hd.g(i, c) * o);
  }
  return std::fabs(dot - d_exact) + kE32 * sum_ops(hd.dh) * mag;
}

// The backward of one head from P and its relative error bound; D_i formed from P and dP, or
// from out_used where given.
void backward_head(const Head& hd, double scale, Square& p, Square& ep,
                   const std::vector<double>* out_used, AttentionWithBound* r) {
  const int64_t S = hd.a.seq_len, dh = hd.dh, D = hd.D;
  Square g(S), eg(S), ds(S), eds(S);
  for (int64_t i = 0; i < S; ++i) {
    double d_i = 0, e_d = 0, mag_d = 0;
    for (int64_t j = 0; j <= i; ++j) {
      double dp = 0, mag = 0;
      for (int64_t c = 0; c < dh; ++c) {
        dp += hd.g(i, c) * hd.v(j, c);
        mag += std::fabs(hd.g(i, c) * hd.v(j, c));
      }
      const double m = hd.mask(i, j);
      g(i, j) = m * dp;
      eg(i, j) = m * kE32 * sum_ops(dh) * mag + kE32 * std::fabs(g(i, j));
      d_i += p(i, j) * g(i, j);
      e_d += p(i, j) * (ep(i, j) * std::fabs(g(i, j)) + eg(i, j));
      mag_d += p(i, j) * std::fabs(g(i, j));
    }
    e_d += kE32 * sum_ops(S) * mag_d;
    if (out_used != nullptr) e_d = d_from_output_error(hd, i, d_i, *out_used);
    for (int64_t j = 0; j <= i; ++j) {
      ds(i, j) = p(i, j) * (g(i, j) - d_i);
      eds(i, j) = p(i, j) * (eg(i, j) + e_d + kE32 * std::fabs(g(i, j) - d_i)) +
                  (ep(i, j) + kE32 + kUb) * std::fabs(ds(i, j));
    }
  }
  for (int64_t x = 0; x < S; ++x) {
    for (int64_t c = 0; c < dh; ++c) {
      double dq = 0, eq = 0, dk = 0, ek = 0, dv = 0, ev = 0;
      for (int64_t j = 0; j <= x; ++j) {  // x a query: its keys j <= x
        dq += ds(x, j) * hd.k(j, c);
        eq += eds(x, j) * std::fabs(hd.k(j, c)) +
              kE32 * sum_ops(S) * std::fabs(ds(x, j) * hd.k(j, c));
      }
      for (int64_t i = x; i < S; ++i) {  // x a key: its queries i >= x
        dk += ds(i, x) * hd.q(i, c);
        ek += eds(i, x) * std::fabs(hd.q(i, c)) +
              kE32 * sum_ops(S) * std::fabs(ds(i, x) * hd.q(i, c));
        const double pm = p(i, x) * hd.mask(i, x);
        dv += pm * hd.g(i, c);
        ev += pm * std::fabs(hd.g(i, c)) * (ep(i, x) + kUb + kE32 * sum_ops(S));
      }
      const int64_t row = (hd.b * S + x) * 3 * D + hd.h * dh + c;
      const double grads[3] = {scale * dq, scale * dk, dv};
      const double errs[3] = {scale * eq + kE32 * std::fabs(grads[0]),
                              scale * ek + kE32 * std::fabs(grads[1]), ev};
      for (int part = 0; part < 3; ++part) {
        r->d_qkv[row + part * D] = grads[part];
        r->d_qkv_bound[row + part * D] = errs[part] + kUb * (std::fabs(grads[part]) + errs[part]);
      }
    }
  }
}

// |got - exact| / bound: 0 for no error, infinite for an error where the bound is 0 or for NaN.
double error_ratio(double got, double exact, double bound) {
  const double err = std::fabs(got - exact);
  if (std::isnan(err)) return INFINITY;
  if (bound > 0) return err / bound;
  return err == 0 ? 0.0 : INFINITY;
}

}  // namespace

AttentionWithBound exact_attention(const kernels::AttentionArgs& a, const TensorView& qkv_t,
                                   const TensorView& d_out_t, const TensorView* out_used) {
  const int64_t S = a.seq_len, H = a.heads, D = qkv_t.dim(1) / 3, dh = D / H;
  const std::vector<double> qkv = to_doubles(qkv_t), dout = to_doubles(d_out_t);
  const std::vector<double> used =
      out_used != nullptr ? to_doubles(*out_used) : std::vector<double>{};
  const double scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dh)));
  AttentionWithBound r;
  r.out.assign(a.batch * S * D, 0.0);
  r.out_bound = r.out;
  r.lse.assign(a.batch * H * S, 0.0);
  r.lse_bound = r.lse;
  r.d_qkv.assign(a.batch * S * 3 * D, 0.0);
  r.d_qkv_bound = r.d_qkv;
  for (int64_t b = 0; b < a.batch; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const Head hd{a, b, h, dh, D, qkv, dout};
      Square p(S), ep(S);
      forward_head(hd, scale, &p, &ep, &r);
      backward_head(hd, scale, p, ep, out_used != nullptr ? &used : nullptr, &r);
    }
  }
  // Second-order terms (an error's own rounding) are below 1% of the first-order bound.
  for (std::vector<double>* v : {&r.out_bound, &r.lse_bound, &r.d_qkv_bound}) {
    for (double& x : *v) x *= 1.01;
  }
  return r;
}

::testing::AssertionResult within_bound(const std::string& what, const TensorView& got,
                                        const std::vector<double>& exact,
                                        const std::vector<double>& bound) {
  const std::vector<double> g = to_doubles(got);
  if (g.size() != exact.size() || bound.size() != exact.size()) {
    return ::testing::AssertionFailure()
           << what << ": " << g.size() << " values against " << exact.size() << " exact ones";
  }
  int64_t bad = 0, first = -1, worst = -1;
  double worst_ratio = 0;
  for (size_t x = 0; x < g.size(); ++x) {
    const double ratio = error_ratio(g[x], exact[x], bound[x]);
    if (ratio > 1.0) {
      ++bad;
      if (first < 0) first = static_cast<int64_t>(x);
    }
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst = static_cast<int64_t>(x);
    }
  }
  const std::string worst_text =
      worst < 0 ? ""
                : str_cat(" (worst: entry ", worst, ", ", g[worst], " against ", exact[worst],
                          ", error/bound ", worst_ratio, ")");
  if (bad == 0) return ::testing::AssertionSuccess() << what << " within bound" << worst_text;
  return ::testing::AssertionFailure()
         << what << ": " << bad << " of " << g.size() << " entries outside the bound, first "
         << first << worst_text;
}

double worst_error_over_bound(const TensorView& got, const std::vector<double>& exact,
                              const std::vector<double>& bound) {
  const std::vector<double> g = to_doubles(got);
  MOE_CHECK(g.size() == exact.size() && bound.size() == exact.size());
  double worst = 0;
  for (size_t x = 0; x < g.size(); ++x)
    worst = std::max(worst, error_ratio(g[x], exact[x], bound[x]));
  return worst;
}

double worst_part_error_over_bound(const TensorView& d_qkv, const std::vector<double>& exact,
                                   const std::vector<double>& bound, int part) {
  const std::vector<double> g = to_doubles(d_qkv);
  MOE_CHECK(g.size() == exact.size() && bound.size() == exact.size() && d_qkv.dim(1) % 3 == 0);
  const int64_t D = d_qkv.dim(1) / 3;
  double worst = 0;
  for (int64_t row = 0; row < d_qkv.dim(0); ++row) {
    for (int64_t c = part * D; c < (part + 1) * D; ++c) {
      const size_t x = static_cast<size_t>(row * 3 * D + c);
      worst = std::max(worst, error_ratio(g[x], exact[x], bound[x]));
    }
  }
  return worst;
}

double relative_bound(const std::vector<double>& exact, const std::vector<double>& bound) {
  double mag = 0, b = 0;
  for (size_t x = 0; x < exact.size(); ++x) {
    mag = std::max(mag, std::fabs(exact[x]));
    b = std::max(b, bound[x]);
  }
  return mag > 0 ? b / mag : b;
}

}  // namespace moe::testing
