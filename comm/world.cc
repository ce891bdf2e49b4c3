#include "comm/world.h"

#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "base/device.h"
#include "comm/local_communicator.h"

#if defined(MOE_WITH_MPI)
#include "comm/mpi_communicator.h"
#endif
#if defined(MOE_WITH_NCCL)
#include "comm/nccl_communicator.h"
#endif

namespace moe::comm {

bool launched_by_mpi() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MV2_COMM_WORLD_SIZE"}) {
    if (std::getenv(var) != nullptr) return true;
  }
  return false;
}

namespace {

// The first of `vars` that holds a whole number >= `least` (and fits an int), or -1.
int first_env_int(std::initializer_list<const char*> vars, long least) {
  for (const char* var : vars) {
    const char* v = std::getenv(var);
    if (v == nullptr || *v == '\0') continue;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (*end == '\0' && n >= least && n <= std::numeric_limits<int>::max()) {
      return static_cast<int>(n);
    }
  }
  return -1;
}

}  // namespace

int launcher_rank() {
  return std::max(
      0, first_env_int({"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"}, 0));
}

int launcher_world_size() {
  if (!launched_by_mpi()) return 1;
  return std::max(0, first_env_int({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}, 1));
}

namespace {

#if defined(MOE_WITH_NCCL)
// Every rank learns whether every rank succeeded (a failure names the ranks and why): before
// NCCL's initialisation, whose waits have no bound, so that no rank is left waiting there.
Status agree_over(Communicator& world, const Status& mine) {
  MOE_ASSIGN_OR_RETURN(std::vector<std::string> all,
                       world.gather_bytes(mine.ok() ? std::string() : mine.to_string(), 0));
  std::string joined;
  for (size_t r = 0; r < all.size(); ++r) {
    if (!all[r].empty()) joined += str_cat(joined.empty() ? "" : "; ", "rank ", r, ": ", all[r]);
  }
  MOE_ASSIGN_OR_RETURN(joined, world.broadcast_bytes(joined, 0));
  if (joined.empty()) return Status::OK();
  return failed_precondition_error(joined);
}
#endif

// NCCL over `bootstrap` (owned from now on) on this rank's node-local GPU, once every rank of
// the bootstrap has found its GPU.
StatusOr<std::unique_ptr<Communicator>> nccl_over(std::unique_ptr<Communicator> bootstrap) {
#if defined(MOE_WITH_NCCL)
  StatusOr<int> chosen = choose_cuda_device(bootstrap->rank());
  MOE_RETURN_IF_ERROR(agree_over(*bootstrap, chosen.status()));
  const int device = *chosen;
  NcclOptions opts;
  opts.device = device;
  return NcclCommunicator::create(std::move(bootstrap), opts);
#else
  (void)bootstrap;
  return unimplemented_error(
      "parallel.backend = NCCL: this build has no NCCL backend (configure "
      "with MOE_WITH_CUDA=ON and MOE_WITH_NCCL=ON where nccl.h is found)");
#endif
}

#if defined(MOE_WITH_MPI)
// True when no two ranks of `world` compute on the same GPU (host name + PCI bus id), so NCCL
// can connect them; ranks sharing a GPU stay on MPI (NCCL refuses two ranks on one device).
StatusOr<bool> every_rank_has_its_own_gpu(Communicator& world) {
  std::string mine;
  StatusOr<int> device = choose_cuda_device(world.rank());
  if (device.ok()) {
    // The bus id needs no context (none is created here on a device this rank will not use).
    StatusOr<std::string> bus = cuda_pci_bus_id(*device);
    if (bus.ok()) mine = str_cat(host_name(), "/", *bus);
  }
  MOE_ASSIGN_OR_RETURN(std::vector<std::string> all, world.gather_bytes(mine, 0));
  std::string verdict = "1";
  if (world.rank() == 0) {
    std::sort(all.begin(), all.end());
    const bool unknown = std::find(all.begin(), all.end(), std::string()) != all.end();
    if (unknown || std::adjacent_find(all.begin(), all.end()) != all.end()) verdict = "0";
  }
  MOE_ASSIGN_OR_RETURN(verdict, world.broadcast_bytes(verdict, 0));
  return verdict == "1";
}
#endif

}  // namespace

StatusOr<World> make_world(int* argc, char*** argv, CommBackend backend, double timeout_seconds,
                           DeviceKind device) {
  World w;
  const bool mpi = launched_by_mpi();
  if (backend == CommBackend::kNccl && cuda_device_count() == 0) {
    return failed_precondition_error(
        "parallel.backend = NCCL needs a GPU on every rank, but none "
        "is usable here (",
        cuda_unavailable_reason(),
        "); check CUDA_VISIBLE_DEVICES and the driver, or use the "
        "MPI backend");
  }
  if (backend == CommBackend::kNccl && !mpi) {
    // One process: NCCL at one rank, bootstrapped by a Local world of one.
    std::vector<std::unique_ptr<Communicator>> local = LocalCommunicator::create_world(1);
    MOE_ASSIGN_OR_RETURN(w.comm, nccl_over(std::move(local[0])));
    return w;
  }
  const bool want_mpi = backend == CommBackend::kMpi || backend == CommBackend::kNccl ||
                        (backend == CommBackend::kAuto && mpi);
  if (!want_mpi) return w;
#if defined(MOE_WITH_MPI)
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<MpiRuntime> runtime,
                       MpiRuntime::init(argc, argv, MpiThreadLevel::kSerialized));
  w.runtime = std::shared_ptr<MpiRuntime>(std::move(runtime));
  MpiOptions opts;
  opts.timeout_seconds = timeout_seconds;
  MOE_ASSIGN_OR_RETURN(w.comm, MpiCommunicator::create_world(opts));
  if (w.comm->world_size() == 1 && backend == CommBackend::kAuto) {
    w.comm.reset();
    return w;
  }
  bool nccl = backend == CommBackend::kNccl;
  if (backend == CommBackend::kAuto && device == DeviceKind::kCuda && built_with_nccl()) {
    // GPU ranks talk through NCCL when each has a GPU of its own; ranks sharing one GPU keep
    // MPI, which stages device buffers through host memory.
    MOE_ASSIGN_OR_RETURN(nccl, every_rank_has_its_own_gpu(*w.comm));
    w.note = nccl ? "every rank has a GPU of its own: NCCL between them"
                  : "ranks share a GPU (NCCL refuses that): MPI between them, staged through "
                    "host memory";
  }
  if (nccl) {
    MOE_ASSIGN_OR_RETURN(w.comm, nccl_over(std::move(w.comm)));
  }
  return w;
#else
  (void)argc;
  (void)argv;
  (void)timeout_seconds;
  (void)device;
  return unimplemented_error(
      "launched under mpirun (or parallel.backend = MPI/NCCL), but this "
      "build has no MPI backend (configure with MOE_WITH_MPI=ON and an MPI "
      "library)");
#endif
}

bool built_with_nccl() {
#if defined(MOE_WITH_NCCL)
  return true;
#else
  return false;
#endif
}

}  // namespace moe::comm
