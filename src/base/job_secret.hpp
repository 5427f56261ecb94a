// The job secret, and how a connection proves it knows the secret without sending it.
//
// Every bootstrap and tcp connection runs a challenge-response: each side sends a fresh
// random nonce, and each answers with HMAC-SHA256(secret, role, transcript), where the
// transcript holds both nonces and what the side claims to be. The secret never crosses the
// wire; a recorded exchange is useless later because the other side's nonce is new each
// time; a proof made for one role (say, the listener's) cannot be replayed as the other's.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace weft {

using JobSecret = std::array<uint8_t, 16>;
using Nonce = std::array<uint8_t, 16>;
using Proof = std::array<uint8_t, 32>;

/// What a failed proof may mean besides a stranger, for the messages that report one.
inline constexpr const char* kOtherSecretHint =
    "ranks holding different secrets (set the same WEFT_JOB_SECRET on every rank; with "
    "WEFT_COORDINATOR, every host must see the same WEFT_JOB_SECRET_FILE)";

/// Secrets shorter than this many characters draw a warning: they can be guessed.
inline constexpr size_t kShortestGoodSecret = 16;

/// Fresh random bytes from the kernel (getrandom(2)).
Nonce fresh_nonce();
JobSecret fresh_secret();

/// The secret a text names: SHA-256 of it, cut to 16 bytes. Empty text is InvalidArgument.
absl::StatusOr<JobSecret> secret_from_text(std::string_view text);

/// The secret a job uses: WEFT_JOB_SECRET's when set, else `from_id` (the unique id's).
/// Warns once per process when WEFT_JOB_SECRET is short enough to guess.
absl::StatusOr<JobSecret> job_secret(const JobSecret& from_id);

/// HMAC-SHA256 over `role` and each part, every one prefixed with its length so no two
/// different transcripts can be spelled the same.
Proof prove(const JobSecret& secret, std::string_view role,
            std::initializer_list<std::string_view> transcript);

/// Constant-time comparison, so a stranger cannot learn a proof byte by byte from timing.
bool same_proof(const Proof& a, const Proof& b);

/// Views raw bytes as a transcript part.
template <size_t N>
std::string_view as_text(const std::array<uint8_t, N>& bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), N};
}

}  // namespace weft
