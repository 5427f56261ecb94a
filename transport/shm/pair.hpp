// A shared-memory link: one ring each way between two processes of one host.
#pragma once

#include "src/base/process.hpp"
#include "transport/shm/ring.hpp"
#include "transport/transport.hpp"

namespace weft::transport::shm {

class ShmPair : public Pair {
 public:
  /// Sends of `single_copy_bytes` or more (0: none; Ring::kOffersWhenSlow: only while copies
  /// into the ring run slow) are offered to the peer to read straight from this process's
  /// memory, once the peer has found that it can. Writes into the peer's memory
  /// (write_to_peer) are offered where single copy pays, not for kOffersWhenSlow.
  ShmPair(int peer, int32_t peer_pid, Ring inbound, Ring outbound, size_t single_copy_bytes);
  ~ShmPair() override;

  int peer() const override { return peer_; }
  absl::StatusOr<size_t> send_some(const std::byte* data, size_t len) override;
  absl::StatusOr<size_t> offer_some(const std::byte* data, size_t len) override;
  absl::StatusOr<size_t> send_gathered(const Gather& from, size_t len) override;
  absl::StatusOr<size_t> recv_some(size_t max, Sink sink) override;
  absl::StatusOr<size_t> recv_scatter(const Scatter& to, size_t max) override;
  absl::Status check_peer() override;
  bool can_write_to_peer() const override {
    return writes_pay_ && inbound_.reads_sender_memory();
  }
  absl::Status write_to_peer(uint64_t address, const std::byte* data, size_t len) override;
  PairStats stats() const override;

 private:
  absl::Status peer_gone(const char* why);
  absl::StatusOr<size_t> sent(absl::StatusOr<size_t> n, size_t len);
  absl::Status ring_failed(const absl::Status& s);  // counts it, names the link
  absl::StatusOr<size_t> received(absl::StatusOr<size_t> n, size_t max);

  int peer_;
  int32_t peer_pid_;
  bool writes_pay_;  // process_vm_writev beats copies here (single_copy.hpp)
  Ring inbound_;
  Ring outbound_;
  LinkCounter bytes_sent_, bytes_received_, errors_;  // stats() reads them from any thread
};

}  // namespace weft::transport::shm
