// momoe-bench: benchmarks that print JSON lines (the first line describes the environment).
//   momoe-bench layer     [--tokens T --d D --f F --experts E --top-k K --variant V]
//                         the MoE layer forward + backward against a dense GEMM floor (CPU)
//   momoe-bench train     [--preset quickstart|smoe-medium|all] ...    CPU training throughput
//   momoe-bench alltoall  ...    (under mpirun)  MoE exchange vs a plain MPI_Alltoall, same bytes
//   momoe-bench scaling   ...    (under mpirun)  one weak/strong scaling point
//   momoe-bench env       the environment line alone (CPU, BLAS library and kernel); exit 2 when
//                         the BLAS cannot be loaded as configured (tests/run.sh asks it which
//                         OpenBLAS kernels this CPU runs)
// moe_layer_bench (Google Benchmark) sweeps the CPU layer over shapes and variants.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "benchmarks/bench_util.h"
#include "comm/world.h"
#include "core/base/device.h"
#include "core/base/logging.h"
#include "kernels/reference/blas_library.h"

namespace moe::bench {
Status bench_layer(int argc, char** argv, comm::World* world);
Status bench_train(int argc, char** argv, comm::World* world);
Status bench_alltoall(int argc, char** argv, comm::World* world);
Status bench_scaling(int argc, char** argv, comm::World* world);
}  // namespace moe::bench

namespace {

int run(int argc, char** argv) {
  using namespace moe;
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0) {
    std::fprintf(stderr, "usage: momoe-bench layer|train|alltoall|scaling|env [--key value ...]\n");
    return argc < 2 ? 2 : 0;
  }
  // The BLAS first, before MPI starts threads (it is loaded with its kernel chosen: see
  // blas_library.h); a kernel this CPU cannot run is refused here, by name.
  if (Status blas = kernels::ref::load_blas(); !blas.ok()) {
    log_error(blas.to_string());
    return 2;
  }
  if (std::strcmp(argv[1], "env") == 0) {
    std::printf("%s\n", bench::environment_line(1).c_str());
    const std::string& warning = kernels::ref::blas_info().warning;
    if (!warning.empty()) log_warning(warning);
    return 0;
  }
  // GPU runs (--device cuda) let the world pick NCCL where every rank has its own GPU.
  DeviceKind device = DeviceKind::kCpu;
  for (int i = 2; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--device") == 0 && std::strcmp(argv[i + 1], "cuda") == 0) {
      device = DeviceKind::kCuda;
    }
  }
  StatusOr<comm::World> world = comm::make_world(&argc, &argv, CommBackend::kAuto, 600, device);
  if (!world.ok()) {
    log_error(world.status().to_string());
    return 1;
  }
  set_log_rank(world->rank());
  if (world->rank() == 0) std::printf("%s\n", bench::environment_line(world->size()).c_str());
  if (const std::string& w = kernels::ref::blas_info().warning; !w.empty()) log_warning(w);
  const std::string cmd = argv[1];
  Status s;
  if (cmd == "layer") {
    s = bench::bench_layer(argc - 2, argv + 2, &*world);
  } else if (cmd == "train") {
    s = bench::bench_train(argc - 2, argv + 2, &*world);
  } else if (cmd == "alltoall") {
#if defined(MOE_BENCH_WITH_MPI)
    s = bench::bench_alltoall(argc - 2, argv + 2, &*world);
#else
    s = unimplemented_error("momoe-bench alltoall needs the MPI backend (built without MPI)");
#endif
  } else if (cmd == "scaling") {
    s = bench::bench_scaling(argc - 2, argv + 2, &*world);
  } else {
    s = invalid_argument_error("unknown benchmark '", cmd, "' (layer, train, alltoall, scaling)");
  }
  if (!s.ok()) {
    log_error(s.to_string());
    if (world->comm != nullptr && world->size() > 1) world->comm->abort(s.message()).ignore_error();
    return 1;
  }
  return 0;
}

}  // namespace

// Nothing is thrown past main: an exception from a library becomes one error line and exit 1.
int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    moe::log_error(std::string("momoe-bench: ") + e.what());
    return 1;
  }
}
