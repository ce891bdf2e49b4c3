#include "kernels/cpu/blas_fingerprint.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "base/hash.h"
#include "kernels/cpu/sgemm_accuracy.h"

namespace moe::kernels::ref {
namespace {

constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;  // CBLAS's enum values

// One product of the sweep: C[M, N] = op(A) op(B) (+ C when beta is 1) with leading dimensions
// padded by `pad` elements and every matrix starting `pad` elements into its buffer (pad 0:
// tight and aligned as allocated).
struct Product {
  int64_t m, n, k;
  bool trans_a, trans_b;
  int beta;  // 0 or 1
  int64_t pad;
  float alpha = 1;  // attention's scores are scaled by 1 / sqrt(head width)
  // A tile of a larger product (blas_ref.cc's tiling): the operands' and the output's leading
  // dimensions are the whole matrix's (0: the tile's own plus pad).
  int64_t lda = 0, ldb = 0, ldc = 0;
};

class Sweep {
 public:
  explicit Sweep(const BlasFunctions& fns) : fns_(fns) {}

  template <typename T>
  void run(const Product& p) {
    const int64_t a_rows = p.trans_a ? p.k : p.m, a_cols = p.trans_a ? p.m : p.k;
    const int64_t b_rows = p.trans_b ? p.n : p.k, b_cols = p.trans_b ? p.k : p.n;
    const int64_t lda = p.lda > 0 ? p.lda : a_cols + p.pad;
    const int64_t ldb = p.ldb > 0 ? p.ldb : b_cols + p.pad;
    const int64_t ldc = p.ldc > 0 ? p.ldc : p.n + p.pad;
    std::vector<T> a = operand<T>(a_rows, lda, p.pad);
    std::vector<T> b = operand<T>(b_rows, ldb, p.pad);
    std::vector<T> c = operand<T>(p.m, ldc, p.pad);
    const int ta = p.trans_a ? kTrans : kNoTrans, tb = p.trans_b ? kTrans : kNoTrans;
    const auto i = [](int64_t v) { return static_cast<int>(v); };
    if constexpr (std::is_same_v<T, float>) {
      fns_.sgemm(kRowMajor, ta, tb, i(p.m), i(p.n), i(p.k), p.alpha, a.data() + p.pad, i(lda),
                 b.data() + p.pad, i(ldb), static_cast<float>(p.beta), c.data() + p.pad, i(ldc));
    } else {
      fns_.dgemm(kRowMajor, ta, tb, i(p.m), i(p.n), i(p.k), p.alpha, a.data() + p.pad, i(lda),
                 b.data() + p.pad, i(ldb), static_cast<double>(p.beta), c.data() + p.pad, i(ldc));
    }
    for (int64_t r = 0; r < p.m; ++r) {
      out_.hash = fnv1a64_update(out_.hash, c.data() + p.pad + r * ldc, sizeof(T) * p.n);
    }
    ++out_.products;
    out_.gflop +=
        2e-9 * static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k);
  }

  const BlasFingerprint& result() const { return out_; }

 private:
  // A [rows, ld] buffer (plus `pad` elements in front) uniform in [-1, 1) on a 2^-23 grid
  // (exact in float), from SplitMix64 (cheap: the sweep draws tens of millions).
  template <typename T>
  std::vector<T> operand(int64_t rows, int64_t ld, int64_t pad) {
    std::vector<T> x(static_cast<size_t>(pad + rows * ld));
    for (T& v : x) {
      uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      z ^= z >> 31;
      v = static_cast<T>(static_cast<double>(z >> 40) * 0x1p-23 - 1.0);
    }
    return x;
  }

  const BlasFunctions& fns_;
  uint64_t state_ = 0;
  BlasFingerprint out_{kFnv1a64Offset, 0, 0};
};

// Calls body(trans_a, trans_b) for the four transpose pairs.
template <typename Body>
void each_transpose(Body&& body) {
  for (const bool ta : {false, true})
    for (const bool tb : {false, true}) body(ta, tb);
}

// The micro-kernels' edges: small M, N and K, tight and padded, beta 0 and 1.
template <typename T>
void sweep_edges(Sweep& s) {
  const int64_t mn[] = {1, 2, 3, 5, 8, 13, 16, 24, 31, 33, 64};
  const int64_t ks[] = {1, 2, 3, 8, 17, 64, 129};
  each_transpose([&](bool ta, bool tb) {
    for (const int64_t m : mn)
      for (const int64_t n : mn)
        for (const int64_t k : ks)
          for (const int beta : {0, 1})
            for (const int64_t pad : {0, 3}) s.run<T>({m, n, k, ta, tb, beta, pad});
  });
}

// K across the blocking sizes (OpenBLAS's GEMM_Q: 192 to 768 on x86-64 kernels) and beyond.
template <typename T>
void sweep_depth(Sweep& s) {
  const int64_t ks[] = {200, 255, 256,  257,  320,  384,  385,  512, 513,
                        640, 768, 1000, 1024, 1500, 2048, 2049, 4096};
  each_transpose([&](bool ta, bool tb) {
    for (const int64_t k : ks)
      for (const int64_t m : {7, 130})
        for (const int64_t n : {7, 130}) s.run<T>({m, n, k, ta, tb, 0, 0});
  });
  // Rows and columns past a kernel's M and N blocks, accumulating.
  each_transpose([&](bool ta, bool tb) { s.run<T>({520, 520, 300, ta, tb, 1, 1}); });
}

// momoe's training shapes whole, and as the tiles blas_ref.cc cuts them into (rows in blocks
// of 32 or more, columns in multiples of 16, each call with the whole matrix's leading
// dimensions and full K), at alpha 1 and at attention's 1 / sqrt(32).
void sweep_momoe_shapes(Sweep& s) {
  for (const GemmShape& g : momoe_gemm_shapes(256)) {
    const int64_t lda = g.trans_a ? g.m : g.k, ldb = g.trans_b ? g.k : g.n;
    for (const float alpha : {1.0f, 0.17677669f}) {
      for (const int beta : {0, 1}) {
        s.run<float>({g.m, g.n, g.k, g.trans_a, g.trans_b, beta, 0, alpha});
      }
      const int64_t tile_n = std::max<int64_t>(16, g.n / 4 / 16 * 16);
      const Product tiles[] = {
          {std::min<int64_t>(g.m, 32), g.n, g.k, g.trans_a, g.trans_b, 0, 0, alpha, lda, ldb, g.n},
          {std::min<int64_t>(g.m, 64), std::min(g.n, tile_n), g.k, g.trans_a, g.trans_b, 0, 0,
           alpha, lda, ldb, g.n}};
      for (const Product& t : tiles) s.run<float>(t);
    }
  }
}

}  // namespace

BlasFingerprint blas_fingerprint(const BlasFunctions& fns) {
  Sweep s(fns);
  sweep_edges<float>(s);
  sweep_depth<float>(s);
  sweep_momoe_shapes(s);
  sweep_edges<double>(s);
  sweep_depth<double>(s);
  return s.result();
}

}  // namespace moe::kernels::ref
