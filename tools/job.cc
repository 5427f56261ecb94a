#include "tools/job.hpp"

#include <chrono>
#include <cstdio>
#include <thread>

#include "src/base/env.hpp"
#include "src/launch_env.hpp"

#ifdef WEFT_HAVE_MPI
#include <mpi.h>

#include "weft/mpi.hpp"
#endif

namespace weft::tools {

#ifdef WEFT_HAVE_MPI
// mpirun sets OMPI_COMM_WORLD_SIZE; a plain start (or WEFT_RANK/WEFT_SIZE) skips MPI.
static bool launched_by_mpirun() { return read_env("OMPI_COMM_WORLD_SIZE").has_value(); }
static bool g_mpi = false;
#endif

absl::StatusOr<Job> join_job(int* argc, char*** argv) {
  Job job;
  absl::StatusOr<std::unique_ptr<Communicator>> comm;
#ifdef WEFT_HAVE_MPI
  if (launched_by_mpirun()) {
    MPI_Init(argc, argv);
    g_mpi = true;
    job.mpi = true;
    // On the monotonic clock: the wall clock may be stepped while we wait.
    const auto start = std::chrono::steady_clock::now();
    comm = create_from_mpi(MPI_COMM_WORLD);
    job.create_time = absl::FromChrono(std::chrono::steady_clock::now() - start);
  }
#endif
  if (!job.mpi) {
    const auto start = std::chrono::steady_clock::now();
    if (read_launch_info().status().code() == absl::StatusCode::kFailedPrecondition) {
      // Started alone, by no launcher: a job of this one rank, as nccl-tests runs (weft diag
      // then shows this host's GPUs and ports).
      auto id = make_unique_id();
      comm = id.ok() ? Communicator::create(*id, 0, 1)
                     : absl::StatusOr<std::unique_ptr<Communicator>>(id.status());
    } else {
      comm = Communicator::create_from_env();
    }
    job.create_time = absl::FromChrono(std::chrono::steady_clock::now() - start);
  }
  if (!comm.ok()) return comm.status();
  job.comm = std::move(*comm);
  return job;
}

int leave_job(Job* job, int exit_code) {
  // A failed communicator (or none at all) means a peer may be dead or stopped; wrong results
  // or a refused flag leave every rank alive and able to finalize, with its output intact.
  const bool peers_may_be_gone =
      job == nullptr || job->comm == nullptr || !job->comm->async_error().ok();
  if (job != nullptr) job->comm.reset();
  std::fflush(stdout);
#ifdef WEFT_HAVE_MPI
  if (g_mpi) {
    g_mpi = false;
    if (exit_code != 0 && peers_may_be_gone) {
      // What this rank printed must survive the abort.
      std::fflush(stdout);
      std::fflush(stderr);
      // mpirun ends the ranks by resuming them first (SIGCONT, then SIGTERM a second later),
      // a stopped one too, while other survivors may still be asking who stopped (blame waits
      // up to 1 s for answers): a rank resumed in that window answers, and they would blame
      // nobody. Give them that long twice over before the abort.
      std::this_thread::sleep_for(std::chrono::seconds(2));
      MPI_Abort(MPI_COMM_WORLD, exit_code);
    }
    MPI_Finalize();
  }
#endif
  return exit_code;
}

}  // namespace weft::tools
