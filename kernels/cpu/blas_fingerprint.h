// The arithmetic of a BLAS kernel as one number: FNV-1a over the bits of the sgemm and dgemm
// products of a fixed sweep, computed as momoe calls them (row-major, single-threaded, operands
// drawn from fixed seeds). Two kernels with the same fingerprint returned the same bits on every
// product of the sweep, so a test that compares results (label blas) cannot tell them apart on
// those shapes: tests/run.sh runs its BLAS-sensitive phase once per fingerprint, not once per
// kernel name (OpenBLAS builds its Zen kernel from Haswell's code).
//
// The sweep: every transpose pair; beta 0 and 1; M and N across the micro-kernels' edges (1 to
// 64) with K up to 129, tight and with padded, misaligned leading dimensions; K from 200 to 4096
// across the K-blocking sizes of OpenBLAS's x86-64 kernels (where a product's partial sums are
// added in another order) at M and N of 7 and 130, and one 520 x 520 product past the M and N
// blocks; and momoe's own training shapes (sgemm_accuracy.h's momoe_gemm_shapes) whole and as
// the tiles blas_ref.cc cuts them into (the whole matrix's leading dimensions, full K), at
// alpha 1 and at attention's 1 / sqrt(32). Operands uniform in [-1, 1), so that any other
// summation order, scaling or fused multiply-add shows in the low bits.
#pragma once

#include <cstdint>

#include "kernels/cpu/blas_library.h"

namespace moe::kernels::ref {

struct BlasFingerprint {
  uint64_t hash = 0;     // FNV-1a 64 of every product's output bits, in sweep order
  int64_t products = 0;  // sgemm and dgemm calls made
  double gflop = 0;      // their work, 2 M N K each, in GFLOP
};

// The fingerprint of `fns` (blas_functions() for the loaded library; a test passes its own).
BlasFingerprint blas_fingerprint(const BlasFunctions& fns);

}  // namespace moe::kernels::ref
