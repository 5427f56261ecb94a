// A byte count as people write one: a number, with K, M or G (powers of 1024) if they like.
// The command line's sizes and the byte settings read it alike.
#pragma once

#include <cstdint>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"

namespace weft {

/// "512", "64K", "1m", "2G"; nullopt for anything else, or a count past 2^64.
inline std::optional<uint64_t> parse_byte_count(absl::string_view text) {
  uint64_t unit = 1;
  if (!text.empty()) {
    switch (text.back()) {
      case 'K': case 'k': unit = uint64_t{1} << 10; break;
      case 'M': case 'm': unit = uint64_t{1} << 20; break;
      case 'G': case 'g': unit = uint64_t{1} << 30; break;
    }
    if (unit != 1) text.remove_suffix(1);
  }
  uint64_t v = 0;
  if (!absl::SimpleAtoi(text, &v) || v > UINT64_MAX / unit) return std::nullopt;
  return v * unit;
}

}  // namespace weft
