// The CPU's BLAS, loaded at run time so that momoe, not the library's CPU-model table, decides
// which kernel it runs.
//
// Debian's OpenBLAS 0.3.21 picks its kernel from the CPU model number, once, in its load-time
// constructor; a model it does not know (a newer Xeon, say) falls back to the generic SSE3
// "Prescott" kernel at under half the speed, silently. So momoe does not link the BLAS: the
// first product (or load_blas() at start-up) chooses the OpenBLAS core from the CPU's usable
// vector ISA (cpu_info()), sets OPENBLAS_CORETYPE for the moment the library loads (dlopen),
// and clears it again. A user's own OPENBLAS_CORETYPE is kept, after checking that this CPU
// can run it (SkylakeX on a CPU without AVX-512 would die of an illegal instruction).
//
// MOMOE_BLAS names another CBLAS library to load instead (a path or a soname: BLIS's
// libblis.so.4, MKL's libmkl_rt.so); the default is OpenBLAS's libopenblas.so.0. Whatever is
// loaded runs single-threaded inside each call: the CPU thread pool is the only parallelism
// (see blas_ref.h), which keeps a product's bits independent of the thread count.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/cpu_info.h"
#include "base/status.h"

namespace moe::kernels::ref {

struct BlasInfo {
  std::string library;    // "OpenBLAS", "BLIS" or "CBLAS" (not identified)
  std::string version;    // "0.3.21" ("" when the library does not say)
  std::string path;       // what was loaded: MOMOE_BLAS or the default soname
  std::string kernel;     // OpenBLAS core ("Haswell"), BLIS sub-configuration ("zen3"), or ""
  std::string chosen_by;  // "CPU features", "OPENBLAS_CORETYPE", "the library"
  std::string requested;  // the user's OPENBLAS_CORETYPE when chosen_by says so
  // Non-empty when the kernel does not use the CPU's vector ISA (a generic kernel on an AVX2 or
  // AVX-512 CPU), or the library ignored the requested core: what is wrong and how to fix it.
  std::string warning;

  // "OpenBLAS 0.3.21, kernel Cooperlake (chosen by CPU features)", or "..., kernel Haswell
  // (OPENBLAS_CORETYPE=Haswell from the environment, honoured)": for start-up lines.
  std::string summary() const;
};

// The loaded BLAS's warning as a start-up line, "momoe: warning: ..." ("momoe: rank 3: warning:
// ..." on other ranks: each process may run on another CPU), or "" when there is none (or the
// library did not load).
std::string blas_warning_line(int rank);
// blas_warning_line(rank) on stderr, when there is one.
void print_blas_warning(int rank);

// Loads the BLAS once (later calls return the first call's result; thread-safe). Errors name the
// library and how to fix it: not found, not a CBLAS, or an OPENBLAS_CORETYPE this CPU cannot run.
Status load_blas();
// The loaded BLAS (loads it first; a failed load stops the process with load_blas()'s message).
const BlasInfo& blas_info();

// Row-major CBLAS entry points of the loaded library (CBLAS's enum values as ints).
using SgemmFn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int,
                         float, float*, int);
using DgemmFn = void (*)(int, int, int, int, int, int, double, const double*, int, const double*,
                         int, double, double*, int);
struct BlasFunctions {
  SgemmFn sgemm = nullptr;
  DgemmFn dgemm = nullptr;
};
// The loaded library's products (loads it first, as blas_info()).
const BlasFunctions& blas_functions();

// --- The policy, as pure functions of the CPU (unit-tested with made-up CPUs) ---

// The OpenBLAS core for this CPU's usable ISA: Cooperlake (AVX-512 with BF16), SkylakeX
// (AVX-512), Haswell (AVX2 and FMA, Intel or AMD), Sandybridge (AVX); "" (leave it to
// OpenBLAS) below that, where only SSE kernels exist anyway.
std::string openblas_core_for(const CpuInfo& cpu);
// The ISA level an OpenBLAS core's kernels use (case-insensitive name); kBaseline for the SSE
// cores; false when the name is not an x86-64 core of OpenBLAS 0.3.x.
bool openblas_core_level(std::string_view core, IsaLevel* level);
// OK when `cpu` can run `core`'s kernels; otherwise an error naming what the CPU lacks.
Status check_openblas_core_runs(std::string_view core, const CpuInfo& cpu);
// The warning for a loaded OpenBLAS core on this CPU ("" when it uses the CPU's ISA level):
// what runs, that the user's OPENBLAS_CORETYPE asked for it (then honoured), what momoe-bench
// sgemm measured of that core against the one momoe picks (speed and accuracy, on this CPU model
// or the one it was measured on; docs/blas_kernels.md) and the fix. `requested` is the core that
// was asked for ("" for none), `requested_by_user` whether it came from OPENBLAS_CORETYPE.
std::string openblas_kernel_warning(std::string_view core, std::string_view requested,
                                    bool requested_by_user, const CpuInfo& cpu);

}  // namespace moe::kernels::ref
