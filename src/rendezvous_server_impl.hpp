// The rendezvous server's inside, shared by its two files: rendezvous_server.cc runs the
// thread (one poll() over non-blocking sockets, bounded by the deadline) and hands out the
// table; rendezvous_admission.cc decides who gets in (hello, proof of the job secret, a
// place in the table). Private to them.
#pragma once

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "src/bootstrap_wire.hpp"
#include "src/base/job_secret.hpp"
#include "src/base/mutex.hpp"
#include "src/base/refusal_log.hpp"
#include "src/rendezvous_server.hpp"

namespace weft {

namespace wire = bootstrap_wire;

class RendezvousServer::Impl {
 public:
  Impl(wire::UniqueFd listen, wire::UniqueFd wake, RendezvousAddress address, uint64_t job_id,
       const JobSecret& secret, int size, Deadline deadline)
      : address_(address), job_id_(job_id), secret_(secret), deadline_(deadline),
        listen_(std::move(listen)), wake_(std::move(wake)),
        refusals_(absl::StrCat("rendezvous ", address.to_string())) {
    if (size > 0) set_size(size, "when the rendezvous started");
  }

  void run() {
    result_ = serve();
    // Connections that never proved themselves are strangers, counted before they close.
    for (const auto& c : conns_) {
      if (!c->fd.valid() || c->state == Conn::State::kWaiting || c->state == Conn::State::kReplying) continue;
      refusals_.counted(c->state == Conn::State::kProof ? "a truncated proof"
                        : c->in.empty()                  ? "silent"
                                                         : "a truncated hello",
                        absl::StrCat("closed a connection from ", c->peer,
                                     " that had not proven itself when the rendezvous ended"));
    }
    refusals_.flush();
    conns_.clear();
    listen_.reset();
    done_.store(true, std::memory_order_release);
  }

  const RendezvousAddress address_;
  const uint64_t job_id_;
  const JobSecret secret_;
  const Deadline deadline_;
  wire::UniqueFd listen_, wake_;
  std::thread thread_;
  std::atomic<bool> done_{false};
  Mutex join_mu_;
  bool joined_ ABSL_GUARDED_BY(join_mu_) = false;
  absl::Status result_;  // written by the thread before done_; read after join

 private:
  static constexpr int kMaxPendingHellos = 1024;
  static constexpr int kMaxLogLines = 32;

  struct Conn {
    wire::UniqueFd fd;
    std::string peer;
    // kHello: reading the hello; kChallenging: sending the challenge; kProof: reading the
    // rank's proof; kWaiting: a registered rank; kReplying: sending the table or a refusal.
    enum class State { kHello, kChallenging, kProof, kWaiting, kReplying } state = State::kHello;
    std::string in;              // the hello (or proof) so far; never longer than `need`
    size_t need = wire::kHelloHeaderBytes;
    std::string hello;           // the whole hello, kept while the rank proves itself
    Proof expected{};            // the proof the rank must send
    int rank = -1;               // set once registered
    std::shared_ptr<const std::string> out;
    size_t sent = 0;
    bool carries_table = false;  // a registered rank's table, not an error reply
  };

  absl::Status serve();
  void accept_all();
  void read_hello(Conn& c);
  void handle_hello(Conn& c);
  void read_proof(Conn& c);
  void admit(Conn& c);
  void refuse(Conn& c, absl::StatusCode code, const std::string& why);
  void complete();
  void flush(Conn& c);
  absl::Status time_out();

  void set_size(int size, std::string source) {
    size_ = size;
    size_source_ = std::move(source);
    by_rank_.assign(size, nullptr);
    blobs_.assign(size, std::string());
  }
  void log(const std::string& what) {
    // Bounded: a port scanner must not flood the job's stderr.
    if (++logged_ <= kMaxLogLines) {
      std::fprintf(stderr, "weft: rendezvous %s: %s%s\n", address_.to_string().c_str(),
                   what.c_str(), logged_ == kMaxLogLines ? " (further messages suppressed)" : "");
    }
  }
  /// Closes a stranger's connection: `kind` counts it; a refusal worth reading (not just a
  /// connection that said too little) may also be logged in full (RefusalLog).
  void drop(Conn& c, const std::string& kind, const std::string& why, bool worth_a_line) {
    const std::string detail = absl::StrCat("ignored a connection from ", c.peer, ": ", why);
    if (worth_a_line) {
      refusals_.refused(kind, detail);
    } else {
      refusals_.counted(kind, detail);
    }
    c.fd.reset();
  }

  std::vector<std::unique_ptr<Conn>> conns_;
  int size_ = 0;  // 0 until known
  std::string size_source_;
  std::vector<Conn*> by_rank_;
  std::vector<std::string> blobs_;
  int arrived_ = 0;
  bool complete_ = false;
  int delivered_ = 0;
  std::vector<int> undelivered_;
  int logged_ = 0;
  RefusalLog refusals_;
  absl::Time listen_paused_until_ = absl::InfinitePast();
};

}  // namespace weft
