// Faults a running job picks up from a file (WEFT_INJECT_FILE), so that scripts/inject can
// set them on a virtual cluster while a job runs: the communicator's tender reads the file
// when it changes and applies it to the links. One fault per line; '#' starts a comment.
//
//   corrupt RATE IP [IP ...]   flip a bit in each byte received from a peer whose tcp
//                              address has one of these IPs, with probability RATE
//                              (after the sender's checksum, before the receiver's check)
//
// A link named by no line gets rate 0: removing the line (inject clear) ends the fault.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace weft::detail {

struct InjectedCorruption {
  double rate = 0;
  std::vector<std::string> ips;
};

/// Parses the file's text; an error names the line.
absl::StatusOr<std::vector<InjectedCorruption>> parse_inject_file(const std::string& text);

/// The rate for a peer whose published tcp address list is `tcp_address` ("ip:port,...").
double corruption_for(const std::vector<InjectedCorruption>& faults,
                      const std::string& tcp_address);

}  // namespace weft::detail
