// A shared-memory link: one ring each way between two processes of one host.
#pragma once

#include "transport/shm/ring.hpp"
#include "transport/transport.hpp"

namespace weft::transport::shm {

/// Whether process `pid` still runs (a zombie does not); true when unsure.
bool process_alive(int32_t pid);

class ShmPair : public Pair {
 public:
  /// `inbound` was created by this rank, `outbound` attached from the peer.
  ShmPair(int peer, int32_t peer_pid, Ring inbound, Ring outbound);
  ~ShmPair() override;

  int peer() const override { return peer_; }
  absl::StatusOr<size_t> send_some(const std::byte* data, size_t len) override;
  absl::StatusOr<size_t> recv_some(size_t max, Sink sink) override;
  absl::Status check_peer() override;
  PairStats stats() const override { return stats_; }

 private:
  absl::Status peer_gone(const char* why);

  int peer_;
  int32_t peer_pid_;
  Ring inbound_;
  Ring outbound_;
  PairStats stats_;
};

}  // namespace weft::transport::shm
