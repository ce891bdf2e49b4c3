// main() of the MPI test binaries (run under mpirun): initialises MPI through MpiRuntime, runs
// GoogleTest on every rank, prints the full report on rank 0 only (other ranks print just their
// failures, prefixed with the rank), and exits non-zero on every rank if any rank failed.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <memory>

#include "comm/mpi_communicator.h"

namespace {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.summary());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed()) {
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
    }
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  auto runtime_or = moe::comm::MpiRuntime::init(&argc, &argv);
  if (!runtime_or.ok()) {
    std::fprintf(stderr, "MPI start-up failed: %s\n", runtime_or.status().to_string().c_str());
    return 1;
  }
  std::unique_ptr<moe::comm::MpiRuntime> runtime = std::move(runtime_or).value();
  ::testing::InitGoogleTest(&argc, argv);
  const int rank = runtime->world_rank();
  if (rank != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  int local = RUN_ALL_TESTS();
  int global = local;
  MPI_Allreduce(&local, &global, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  runtime.reset();  // MPI_Finalize
  return global;
}
