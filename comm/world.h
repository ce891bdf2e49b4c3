// Creates the world communicator for an executable (momoe-train, momoe-bench): MPI when launched
// under mpirun/srun with more than one rank (or when asked for), none for a single process. Owns
// the MPI runtime.
//
// GPU runs (device = CUDA): backend NCCL bootstraps NCCL through MPI (or, in a single process,
// through a Local world of one rank: NCCL at one rank), each rank on its node-local GPU. Backend
// AUTO under mpirun picks NCCL when every rank has a GPU of its own, and keeps MPI (device
// buffers staged through host memory) when ranks share a GPU, which NCCL refuses.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "types/run_config.h"

namespace moe::comm {

struct World {
  std::shared_ptr<void> runtime;       // keeps MPI initialised while alive
  std::unique_ptr<Communicator> comm;  // null: single process
  std::string note;  // how the backend was chosen, when AUTO chose (rank 0 prints)
  int rank() const { return comm ? comm->rank() : 0; }
  int size() const { return comm ? comm->world_size() : 1; }
};

// True when the environment says this process is one of several launched by mpirun or srun.
bool launched_by_mpi();
// This process's rank in the job as the launcher's environment gives it (OMPI_COMM_WORLD_RANK,
// PMI_RANK, PMIX_RANK, SLURM_PROCID, the first that holds a number), 0 when none does: for
// messages before the world exists (make_world's rank is the one that counts).
int launcher_rank();
// The job's size as the launcher's environment gives it (OMPI_COMM_WORLD_SIZE, PMI_SIZE), 1 when
// no launcher started this process, 0 when one did but the size is not in its environment.
int launcher_world_size();
StatusOr<World> make_world(int* argc, char*** argv, CommBackend backend, double timeout_seconds,
                           DeviceKind device = DeviceKind::kCpu);
// True when this build has the NCCL backend.
bool built_with_nccl();

}  // namespace moe::comm
