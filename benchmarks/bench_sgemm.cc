// momoe-bench sgemm: the loaded BLAS kernel on momoe's own GEMM shapes (kernels/cpu/
// sgemm_accuracy.h): per shape, the worst error against an exact (f64) product in units of
// u sum|a||b| with its derived bound, and the single-threaded rate. Run it under each
// OPENBLAS_CORETYPE to compare kernels on this CPU (docs/blas_kernels.md):
//   OPENBLAS_CORETYPE=Haswell momoe-bench sgemm [--rows 256] [--seconds-ms 200]
// momoe-bench blas-fingerprint: the loaded kernel's arithmetic as one number
// (kernels/cpu/blas_fingerprint.h); tests/run.sh runs its BLAS-sensitive tests once per number.
#include <chrono>
#include <cinttypes>
#include <cstdio>

#include "benchmarks/bench_util.h"
#include "comm/world.h"
#include "kernels/cpu/blas_fingerprint.h"
#include "kernels/cpu/blas_library.h"
#include "kernels/cpu/sgemm_accuracy.h"

namespace moe::bench {

namespace {

// Each of momoe's GEMM shapes: the error against the bound, and the rate; an error when one
// exceeds its bound.
Status measure_shapes(int64_t rows, int64_t ms) {
  const kernels::ref::BlasInfo& blas = kernels::ref::blas_info();
  bool all_ok = true;
  uint64_t seed = 1;
  for (const kernels::ref::GemmShape& shape : kernels::ref::momoe_gemm_shapes(rows)) {
    const kernels::ref::SgemmAccuracy r =
        kernels::ref::measure_sgemm(shape, seed++, static_cast<double>(ms) / 1000.0);
    all_ok = all_ok && r.ok();
    JsonLine j("sgemm");
    j.str("kernel", blas.kernel)
        .str("shape", shape.name)
        .num("m", static_cast<double>(shape.m))
        .num("n", static_cast<double>(shape.n))
        .num("k", static_cast<double>(shape.k))
        .str("op", std::string(shape.trans_a ? "T" : "N") + (shape.trans_b ? "T" : "N"))
        .num("error_u", r.ratio)
        .num("bound_u", r.bound)
        .str("within_bound", r.ok() ? "yes" : "NO")
        .num("gflops", r.gflops);
    std::printf("%s\n", j.dump().c_str());
  }
  if (!all_ok) {
    return internal_error("sgemm of ", blas.summary(),
                          " exceeds float32's error bound on momoe's shapes on this CPU: do not "
                          "use this kernel (unset OPENBLAS_CORETYPE or choose another)");
  }
  return Status::OK();
}

// The fingerprint of the loaded kernel, one JSON line.
Status print_fingerprint() {
  const auto start = std::chrono::steady_clock::now();
  const kernels::ref::BlasFingerprint f =
      kernels::ref::blas_fingerprint(kernels::ref::blas_functions());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016" PRIx64, f.hash);
  JsonLine j("blas-fingerprint");
  j.str("kernel", kernels::ref::blas_info().kernel)
      .str("fingerprint", hex)
      .num("products", static_cast<double>(f.products))
      .num("gflop", f.gflop)
      .num("seconds", seconds);
  std::printf("%s\n", j.dump().c_str());
  return Status::OK();
}

}  // namespace

StatusOr<BenchRun> bench_blas_fingerprint(int argc, char** argv, comm::World* world) {
  MOE_ASSIGN_OR_RETURN(Args args, Args::parse(argc, argv, {}));
  (void)args;
  if (world->rank() != 0) return BenchRun([] { return Status::OK(); });
  return BenchRun(print_fingerprint);
}

StatusOr<BenchRun> bench_sgemm(int argc, char** argv, comm::World* world) {
  MOE_ASSIGN_OR_RETURN(Args args, Args::parse(argc, argv, {"rows", "seconds-ms"}));
  const int64_t rows = args.get("rows", 256);
  const int64_t ms = args.get("seconds-ms", 200);
  if (rows < 1 || ms < 0) {
    return invalid_argument_error("--rows must be >= 1 and --seconds-ms >= 0");
  }
  if (world->rank() != 0) return BenchRun([] { return Status::OK(); });
  return BenchRun([rows, ms] { return measure_shapes(rows, ms); });
}

}  // namespace moe::bench
