#include "comm/world.h"

#include "core/base/device.h"

#include <cstdlib>
#include <string>

#if defined(MOE_WITH_MPI)
#include "comm/mpi_communicator.h"
#endif

namespace moe::comm {

bool launched_by_mpi() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MV2_COMM_WORLD_SIZE"}) {
    if (std::getenv(var) != nullptr) return true;
  }
  return false;
}

StatusOr<World> make_world(int* argc, char*** argv, CommBackend backend, double timeout_seconds) {
  World w;
  const bool want_mpi = backend == CommBackend::kMpi || (backend == CommBackend::kAuto && launched_by_mpi());
  if (backend == CommBackend::kNccl) {
    if (cuda_device_count() == 0) {
      return failed_precondition_error("parallel.backend = NCCL needs a GPU on every rank, but this "
                                       "machine has none visible (check CUDA_VISIBLE_DEVICES and the "
                                       "driver), or use the MPI backend");
    }
    return unimplemented_error("parallel.backend = NCCL: the CUDA training path is not built yet; "
                               "use the MPI backend (CPU ranks)");
  }
  if (!want_mpi) return w;
#if defined(MOE_WITH_MPI)
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<MpiRuntime> runtime,
                       MpiRuntime::init(argc, argv, MpiThreadLevel::kSerialized));
  w.runtime = std::shared_ptr<MpiRuntime>(std::move(runtime));
  MpiOptions opts;
  opts.timeout_seconds = timeout_seconds;
  MOE_ASSIGN_OR_RETURN(w.comm, MpiCommunicator::create_world(opts));
  if (w.comm->world_size() == 1 && backend == CommBackend::kAuto) w.comm.reset();
  return w;
#else
  return unimplemented_error("launched under mpirun, but this build has no MPI backend "
                             "(configure with MOE_WITH_MPI=ON and an MPI library)");
#endif
}

}  // namespace moe::comm
