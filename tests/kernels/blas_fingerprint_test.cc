// The BLAS fingerprint (kernels/cpu/blas_fingerprint.h) tells kernels apart by their products'
// bits: the same library gives the same number, and a product whose bits differ anywhere (one
// output bit, or partial sums over K added in another order, as a kernel with other blocking
// would) gives another. tests/run.sh skips a kernel's phase when its number equals one already
// run, so a fingerprint blind to a difference would skip a kernel that computes otherwise.
#include "kernels/cpu/blas_fingerprint.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/blas_library.h"

namespace moe::kernels::ref {
namespace {

// The wrappers below call the loaded library's sgemm and change what one product returns.
SgemmFn g_sgemm = nullptr;
int64_t g_calls = 0;
int64_t g_target = -1;  // the call the wrapper changes

// Flips the lowest bit of the last output element of call g_target.
void flip_one_bit(int order, int ta, int tb, int m, int n, int k, float alpha, const float* a,
                  int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  g_sgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (g_calls++ != g_target) return;
  float* last = c + static_cast<int64_t>(m - 1) * ldc + (n - 1);
  uint32_t bits;
  std::memcpy(&bits, last, sizeof(bits));
  bits ^= 1u;
  std::memcpy(last, &bits, sizeof(bits));
}

// Every product with K >= 256 as two, over the halves of K (the second accumulating into C):
// the same products, their partial sums added in another order.
void split_k(int order, int ta, int tb, int m, int n, int k, float alpha, const float* a, int lda,
             const float* b, int ldb, float beta, float* c, int ldc) {
  ++g_calls;
  if (k < 256) return g_sgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  constexpr int kTrans = 112;  // CBLAS's value; row-major throughout
  const int h = k / 2;
  // The second half of K: A's columns h.. (rows when transposed), B's rows h.. (columns).
  const float* a2 = ta == kTrans ? a + static_cast<int64_t>(h) * lda : a + h;
  const float* b2 = tb == kTrans ? b + h : b + static_cast<int64_t>(h) * ldb;
  g_sgemm(order, ta, tb, m, n, h, alpha, a, lda, b, ldb, beta, c, ldc);
  g_sgemm(order, ta, tb, m, n, k - h, alpha, a2, lda, b2, ldb, 1.0f, c, ldc);
}

class BlasFingerprintTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(load_blas().ok()) << load_blas().message();
    g_sgemm = blas_functions().sgemm;
    g_calls = 0;
    g_target = -1;
  }
  // The fingerprint with `sgemm` in place of the library's (dgemm the library's).
  static BlasFingerprint with_sgemm(SgemmFn sgemm) {
    BlasFunctions fns = blas_functions();
    fns.sgemm = sgemm;
    return blas_fingerprint(fns);
  }
};

TEST_F(BlasFingerprintTest, TheSameLibraryGivesTheSameNumber) {
  const BlasFingerprint a = blas_fingerprint(blas_functions());
  const BlasFingerprint b = blas_fingerprint(blas_functions());
  EXPECT_EQ(a.hash, b.hash) << blas_info().summary();
  EXPECT_EQ(a.products, b.products);
  // The sweep is what the header says: tens of thousands of products, GFLOPs of work.
  EXPECT_GT(a.products, 20000);
  EXPECT_GT(a.gflop, 1.0);
}

TEST_F(BlasFingerprintTest, OneBitOfOneProductChangesIt) {
  // g_target -1: nothing flipped (the library's number), the sgemm calls counted.
  const uint64_t plain = with_sgemm(flip_one_bit).hash;
  const int64_t calls = g_calls;
  // Products early, in the middle and last among the sgemm calls of the sweep.
  for (const int64_t target : {int64_t{0}, calls / 2, calls - 1}) {
    g_calls = 0;
    g_target = target;
    EXPECT_NE(with_sgemm(flip_one_bit).hash, plain) << "bit flipped in sgemm call " << target;
  }
}

TEST_F(BlasFingerprintTest, AnotherSummationOrderOverKChangesIt) {
  EXPECT_NE(with_sgemm(split_k).hash, blas_fingerprint(blas_functions()).hash)
      << blas_info().summary() << ": the products' partial sums over K added in halves";
}

}  // namespace
}  // namespace moe::kernels::ref
