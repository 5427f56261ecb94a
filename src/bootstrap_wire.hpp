// Internal to the bootstrap: the rendezvous wire format (described in bootstrap.hpp), and the
// socket helpers the server and the client share. Every socket is non-blocking and every wait
// goes through poll() bounded by a Deadline.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "src/bootstrap.hpp"
#include "src/base/deadline.hpp"
#include "src/base/job_secret.hpp"
#include "src/unique_id.hpp"
#include "transport/tcp/address.hpp"

namespace weft::bootstrap_wire {

inline constexpr char kMagic[4] = {'W', 'E', 'F', 'T'};
inline constexpr uint16_t kProtocolVersion = 2;
// magic, version, pad, job, rank, size, blob_len, the rank's nonce
inline constexpr size_t kHelloHeaderBytes = 28 + sizeof(Nonce);
inline constexpr size_t kReplyHeaderBytes = 8;  // magic, code
/// The reply code of a challenge: the server's nonce and proof follow, and the rank answers
/// with its own proof before it hears anything else.
inline constexpr uint32_t kChallengeCode = 0x43484c47;  // "GLHC"; no absl::StatusCode
inline constexpr size_t kChallengeBytes = kReplyHeaderBytes + sizeof(Nonce) + sizeof(Proof);
/// Longest error message a reply carries; longer ones are cut.
inline constexpr uint32_t kMaxMessageBytes = 4096;

/// Owns a file descriptor and closes it.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  ~UniqueFd() { reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void reset();

 private:
  int fd_ = -1;
};

/// The fixed-size header of a hello; blob_len bytes of PeerInfo follow it.
struct Hello {
  bool magic_ok = false;
  uint16_t version = 0;
  uint64_t job_id = 0;
  uint32_t rank = 0, size = 0, blob_len = 0;
  Nonce nonce{};
};

/// The whole hello: header, then `blob`.
std::string encode_hello(uint64_t job_id, int rank, int size, const Nonce& nonce,
                         const std::string& blob);
/// Decodes the first kHelloHeaderBytes of `in`; shorter input yields magic_ok false.
Hello parse_hello_header(std::string_view in);
/// The length of the whole hello whose header is `header`, blob included; InvalidArgument
/// saying why (for the server's log) when it is no weft hello or its blob is over
/// kMaxPeerBlobBytes.
absl::StatusOr<size_t> hello_length(std::string_view header);

/// A refusal: the header with `code` (not OK), then `why` cut to kMaxMessageBytes.
std::string encode_error_reply(absl::StatusCode code, std::string_view why);
/// Success: the header with code 0, then every rank's blob, rank 0 first.
std::string encode_table_reply(const std::vector<std::string>& blobs);

/// The challenge: header with kChallengeCode, the server's nonce, and its proof over the
/// rank's whole hello and that nonce. The rank's answer is rank_proof(): 32 bytes.
std::string encode_challenge(const Nonce& nonce, const Proof& proof);
Proof server_proof(const JobSecret& secret, std::string_view hello, const Nonce& server_nonce);
Proof rank_proof(const JobSecret& secret, std::string_view hello, std::string_view challenge);

/// The fixed-size header of a reply.
struct ReplyHeader {
  bool magic_ok = false;
  uint32_t code = 0;  ///< absl::StatusCode; 0 means a table follows
};
/// Decodes the first kReplyHeaderBytes of `in`; shorter input yields magic_ok false.
ReplyHeader parse_reply_header(std::string_view in);

/// The first `n` bytes of `in` in hex, for "that is not weft" messages.
std::string hex_prefix(std::string_view in, size_t n);

/// A non-blocking listening socket on `address`, and the address it got (port 0: the port
/// the kernel chose).
absl::StatusOr<std::pair<UniqueFd, RendezvousAddress>> listen_on(const RendezvousAddress& address);

/// A rank's connection to the rendezvous: one blocking-style exchange built from non-blocking
/// calls and poll(), so that every wait honours the deadline.
struct Client {
  Deadline deadline;
  std::string where;  // the rendezvous address
  std::string who;    // "rank 3 of 8"
  UniqueFd fd;

  /// "timed out waiting for rank 3 of 8 to <doing> ...".
  absl::Status timed_out(std::string_view doing) const;
  /// Connects, retrying while nothing listens at `to` yet (the server may start later).
  absl::Status connect(const RendezvousAddress& to);
  /// Waits until the socket is ready for `events`.
  absl::Status wait_for(short events, std::string_view doing);
  /// Sends all of `data` (the hello).
  absl::Status write_all(std::string_view data);
  /// Receives exactly `len` bytes into `out` (part of the reply).
  absl::Status read_exact(char* out, size_t len);
  absl::StatusOr<uint32_t> read_u32();
};

}  // namespace weft::bootstrap_wire
