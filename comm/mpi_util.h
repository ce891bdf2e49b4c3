// Helpers shared by the MPI backend's .cc files (MOE_WITH_MPI builds only). No <mpi.h> here:
// codes travel as int.
#pragma once

#include <string>

namespace moe::detail {
// The text of an MPI error code; used by MOE_MPI_STATUS (base/check.h).
std::string mpi_error_string(int code);
}  // namespace moe::detail

namespace moe::comm::detail {
// True between MPI_Init and MPI_Finalize (MPI calls are legal).
bool mpi_alive();
}  // namespace moe::comm::detail
