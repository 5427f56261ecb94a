// Fuzzes CallAgreement::decode (collectives/call_check.hpp): every collective call reads a
// partner's agreement state, and any route change it proposes, off the wire. Input: 3 bytes picking nranks (1..1<<20), then
// one or two messages. Any length must decode or fail cleanly; a state that decodes must
// re-encode to exactly its bytes and decode again, and verdict() must format it. Two
// decoded states are merged: the merge must be idempotent and, when both states agree on
// every rank they both name, order-free (as the header promises).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "collectives/call_check.hpp"

using weft::CallAgreement;

namespace {

using Wire = std::vector<std::byte>;

Wire encode(const CallAgreement& a) {
  Wire out(CallAgreement::kWireBytes);
  out.resize(a.encode(out.data()));
  return out;
}

// Decodes from a buffer of exactly `len` bytes, so a read past the end is caught.
std::optional<CallAgreement> decode(const uint8_t* data, size_t len, int nranks) {
  Wire in(len);
  if (len > 0) std::memcpy(in.data(), data, len);
  auto a = CallAgreement::decode(in.data(), in.size(), nranks);
  if (!a.ok()) return std::nullopt;
  const Wire again = encode(*a);
  if (again != in) __builtin_trap();
  auto b = CallAgreement::decode(again.data(), again.size(), nranks);
  if (!b.ok() || encode(*b) != again) __builtin_trap();
  (void)a->verdict();
  return *a;
}

// The signature `a` records for `rank`, if it names that rank.
const weft::CallSignature* signature_of(const CallAgreement& a, uint32_t rank) {
  if (a.reference_rank == rank) return &a.reference;
  if (a.differing_rank == rank) return &a.differing;
  return nullptr;
}

bool consistent(const CallAgreement& a, const CallAgreement& b) {
  for (uint32_t rank : {a.reference_rank, a.differing_rank}) {
    const weft::CallSignature* other = signature_of(b, rank);
    if (rank != CallAgreement::kNoRank && other && !(*other == *signature_of(a, rank))) {
      return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const int nranks = static_cast<int>((data[0] | data[1] << 8 | data[2] << 16) % (1 << 20)) + 1;
  data += 3;
  size -= 3;
  if (size >= CallAgreement::kHeadBytes) {
    const Wire head(reinterpret_cast<const std::byte*>(data),
                    reinterpret_cast<const std::byte*>(data) + CallAgreement::kHeadBytes);
    // The head, plus a differing rank, plus a route change, as its flags say.
    const size_t n = CallAgreement::wire_bytes(head.data());
    const size_t differing = CallAgreement::kDifferingBytes, route = CallAgreement::kRouteBytes;
    if (n != CallAgreement::kHeadBytes && n != CallAgreement::kHeadBytes + differing &&
        n != CallAgreement::kHeadBytes + route && n != CallAgreement::kWireBytes) {
      __builtin_trap();
    }
  }
  (void)decode(data, size, nranks);  // the whole rest as one message: any length

  // Two messages: the first as long as its head says, the second the rest.
  if (size < CallAgreement::kHeadBytes) return 0;
  const Wire head(reinterpret_cast<const std::byte*>(data),
                  reinterpret_cast<const std::byte*>(data) + CallAgreement::kHeadBytes);
  const size_t first = std::min(size, CallAgreement::wire_bytes(head.data()));
  const auto a = decode(data, first, nranks);
  const auto b = decode(data + first, size - first, nranks);
  if (!a || !b) return 0;
  CallAgreement once = *a;
  once.merge(*b);
  CallAgreement twice = once;
  twice.merge(*b);
  if (encode(once) != encode(twice)) __builtin_trap();
  (void)once.verdict();
  if (consistent(*a, *b)) {
    CallAgreement other_way = *b;
    other_way.merge(*a);
    if (encode(other_way) != encode(once)) __builtin_trap();
  }
  return 0;
}
