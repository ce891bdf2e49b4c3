// MpiRuntime (declared in mpi_communicator.h) and the MPI helpers of mpi_util.h.
#include <mpi.h>

#include "base/check.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_util.h"

namespace moe {
namespace detail {
std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return str_cat("MPI error ", code);
  return std::string(text, length);
}
}  // namespace detail

namespace comm {
namespace detail {
bool mpi_alive() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}
}  // namespace detail

namespace {
int to_mpi_level(MpiThreadLevel level) {
  switch (level) {
    case MpiThreadLevel::kSingle:
      return MPI_THREAD_SINGLE;
    case MpiThreadLevel::kFunneled:
      return MPI_THREAD_FUNNELED;
    case MpiThreadLevel::kSerialized:
      return MPI_THREAD_SERIALIZED;
    case MpiThreadLevel::kMultiple:
      return MPI_THREAD_MULTIPLE;
  }
  return MPI_THREAD_SINGLE;
}

MpiThreadLevel from_mpi_level(int level) {
  if (level >= MPI_THREAD_MULTIPLE) return MpiThreadLevel::kMultiple;
  if (level >= MPI_THREAD_SERIALIZED) return MpiThreadLevel::kSerialized;
  if (level >= MPI_THREAD_FUNNELED) return MpiThreadLevel::kFunneled;
  return MpiThreadLevel::kSingle;
}
}  // namespace

StatusOr<std::unique_ptr<MpiRuntime>> MpiRuntime::init(int* argc, char*** argv,
                                                       MpiThreadLevel required) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) return failed_precondition_error("MPI was already finalised");
  std::unique_ptr<MpiRuntime> runtime(new MpiRuntime());
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    const int rc = MPI_Init_thread(argc, argv, to_mpi_level(required), &provided);
    if (rc != MPI_SUCCESS) return internal_error("mpi: MPI_Init_thread failed (code ", rc, ")");
    runtime->owns_ = true;
  } else {
    MPI_Query_thread(&provided);
  }
  runtime->provided_ = from_mpi_level(provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &runtime->world_rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &runtime->world_size_);
  if (provided < to_mpi_level(required)) {
    // The runtime's destructor finalises MPI if it initialised it.
    return internal_error("mpi: thread level ", provided, " provided, ", to_mpi_level(required),
                          " required");
  }
  return runtime;
}

MpiRuntime::~MpiRuntime() {
  if (owns_ && detail::mpi_alive()) MPI_Finalize();
}

}  // namespace comm
}  // namespace moe
