// Creates the world communicator for an executable (momoe-train, momoe-bench): MPI when launched
// under mpirun/srun with more than one rank (or when asked for), none for a single process. Owns
// the MPI runtime.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "core/base/run_config.h"

namespace moe::comm {

struct World {
  std::shared_ptr<void> runtime;       // keeps MPI initialised while alive
  std::unique_ptr<Communicator> comm;  // null: single process
  int rank() const { return comm ? comm->rank() : 0; }
  int size() const { return comm ? comm->world_size() : 1; }
};

// True when the environment says this process is one of several launched by mpirun or srun.
bool launched_by_mpi();
StatusOr<World> make_world(int* argc, char*** argv, CommBackend backend, double timeout_seconds);

}  // namespace moe::comm
