// main() for multi-rank GoogleTest binaries run under mpirun: every rank runs every test on
// one shared communicator built from MPI_COMM_WORLD. Rank 0 prints the usual report; other
// ranks print only their failures. The exit code is nonzero on every rank if any rank failed.
#include <mpi.h>

#include <cstdio>

#include "gtest/gtest.h"
#include "tests/multirank/world.hpp"
#include "weft/mpi.hpp"

namespace weft::testing {
Communicator* g_world = nullptr;
}

namespace {

// Prints failed assertions with the rank in front, and nothing else.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed()) {
      std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
    }
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(rank));
  }
  auto comm = weft::create_from_mpi(MPI_COMM_WORLD);
  if (!comm.ok()) {
    std::fprintf(stderr, "[rank %d] cannot create the weft communicator: %s\n", rank,
                 comm.status().ToString().c_str());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  weft::testing::g_world = comm->get();
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && any_failed && !failed) std::fprintf(stderr, "tests failed on another rank\n");
  comm->reset();
  MPI_Finalize();
  return any_failed;
}
