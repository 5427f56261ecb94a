#include "tools/stop.hpp"

#include <csignal>

namespace weft::tools {
namespace {

volatile std::sig_atomic_t g_stop = 0;

void on_stop(int) { g_stop = 1; }

}  // namespace

void catch_stop_signals() {
  struct sigaction action = {};
  action.sa_handler = on_stop;
  sigemptyset(&action.sa_mask);
  // SA_RESTART spares reads and writes; waits (poll, nanosleep) return EINTR, which the
  // library's loops take as one more pass.
  action.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &action, nullptr);
  // A second SIGINT or SIGTERM ends the process at once: a row stuck until its deadline
  // must not hold off the user's Ctrl-C for WEFT_TIMEOUT.
  action.sa_flags = SA_RESTART | SA_RESETHAND;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  // mpirun forwards SIGUSR1 to every rank and leaves the job be, where SIGINT and SIGTERM
  // make it kill the ranks a second later (Open MPI's odls_base_sigkill_timeout).
}

bool stop_requested() { return g_stop != 0; }

}  // namespace weft::tools
