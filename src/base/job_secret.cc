#include "src/base/job_secret.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>
#include <sys/random.h>

#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "src/base/env.hpp"

namespace weft {
namespace {

template <size_t N>
std::array<uint8_t, N> random_bytes() {
  std::array<uint8_t, N> out{};
  size_t got = 0;
  while (got < N) {
    const ssize_t n = getrandom(out.data() + got, N - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (errno != EINTR) {
      // Without randomness there is no secret worth the name; refuse to run unprotected.
      std::fprintf(stderr, "weft: getrandom failed: %s\n", std::strerror(errno));
      std::abort();
    }
  }
  return out;
}

}  // namespace

Nonce fresh_nonce() { return random_bytes<16>(); }
JobSecret fresh_secret() { return random_bytes<16>(); }

absl::StatusOr<JobSecret> secret_from_text(std::string_view text) {
  if (text.empty()) return absl::InvalidArgumentError("an empty job secret proves nothing");
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest);
  JobSecret s{};
  std::memcpy(s.data(), digest, s.size());
  return s;
}

absl::StatusOr<JobSecret> job_secret(const JobSecret& from_id) {
  const std::string text = env_value(env::kJobSecret);
  if (text.empty()) return from_id;
  if (text.size() < kShortestGoodSecret) {
    static std::once_flag once;
    std::call_once(once, [&] {
      std::fprintf(stderr,
                   "weft: WARNING: WEFT_JOB_SECRET has %zu characters: a secret that short can "
                   "be guessed, and whoever guesses it can join this job. Use %zu or more random "
                   "characters (openssl rand -hex 16)\n",
                   text.size(), kShortestGoodSecret);
    });
  }
  return secret_from_text(text);
}

Proof prove(const JobSecret& secret, std::string_view role,
            std::initializer_list<std::string_view> transcript) {
  std::string message;
  auto append = [&](std::string_view part) {
    const uint32_t len = static_cast<uint32_t>(part.size());
    for (int i = 0; i < 4; ++i) message.push_back(static_cast<char>(len >> (8 * i)));
    message.append(part);
  };
  append(role);
  for (std::string_view part : transcript) append(part);
  Proof out{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), out.data(), &len);
  return out;
}

bool same_proof(const Proof& a, const Proof& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace weft
