// What happens to a tcp link's paths, told once: each path lost and each resumption is one
// line on stderr (the job's log) and a count the health monitor reads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "transport/tcp/path.hpp"
#include "transport/transport.hpp"

namespace weft::transport::tcp {

class LinkEvents {
 public:
  LinkEvents(int self_rank, int peer_rank, std::string peer_address)
      : self_(self_rank), peer_(peer_rank), peer_address_(std::move(peer_address)) {}

  int self() const { return self_; }
  int peer() const { return peer_; }

  /// `side` is "sending" or "receiving"; `at` the stream offset the side had reached.
  void path_lost(const char* side, const Path& path, uint64_t at);
  /// The sender resumes at `from` in `epoch` over `live` (names of the paths). A `quiet` one
  /// (weft diag probe moving a link from rail to rail, hundreds of times) is only counted.
  void resumed(uint32_t epoch, uint64_t from, uint64_t resent, const std::string& why,
               const std::string& live, bool quiet = false);
  /// A data frame whose CRC32C did not match: the receiver dropped it and asked again.
  void checksum_mismatch(const Path& path, uint64_t offset, uint32_t length);
  /// The error once no path is left in one direction: names the link and every path tried.
  absl::Status no_path_left(const char* side, const std::vector<Path*>& paths) const;
  /// Every path timed out: the link waits up to `wait_ms` for one through another rank.
  void stranded(int wait_ms);
  /// A path through another rank (`via`) joined the link as `path`.
  void path_added(const Path& path, const std::string& via);

  LinkCounter path_failures;
  LinkCounter resumptions;
  LinkCounter bytes_resent;
  LinkCounter checksum_errors;

 private:
  const int self_;
  const int peer_;
  const std::string peer_address_;
};

}  // namespace weft::transport::tcp
