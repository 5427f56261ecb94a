#include "tools/sweep.hpp"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "src/base/byte_count.hpp"
#include "tools/expected.hpp"

namespace weft::tools {

namespace {

size_t whole_elements(CollectiveKind kind, size_t bytes, DataType type, int nranks) {
  const size_t count = bytes / size_of(type);
  return counts_per_rank(kind) ? count / static_cast<size_t>(nranks) : count;
}

}  // namespace

bool below_one_element(CollectiveKind kind, size_t bytes, DataType type, int nranks) {
  return bytes > 0 && whole_elements(kind, bytes, type, nranks) == 0;
}

// nccl-tests rounds such a size down to 0 elements and prints a 0-byte row, which times a
// call that moves nothing and reads like a result; here it came out of -b 1 -d double
// unnoticed. Refusing would break the sweep a nccl-tests user writes to cover every type
// (-b 1 -d all, or -b 8 for allgather on many ranks), where what is meant is "from the
// smallest size each can do". So the size is raised to one element (per rank), the header
// says so, and the size column shows what ran. A size of 0 (-b 0 -i ...) stays a 0-byte
// call, as asked.
size_t count_for(CollectiveKind kind, size_t bytes, DataType type, int nranks) {
  return below_one_element(kind, bytes, type, nranks) ? 1 : whole_elements(kind, bytes, type, nranks);
}

std::vector<size_t> sweep_counts(CollectiveKind kind, const std::vector<size_t>& sizes,
                                 DataType type, int nranks) {
  std::vector<size_t> counts;
  for (size_t size : sizes) {
    const size_t count = count_for(kind, size, type, nranks);
    if (counts.empty() || counts.back() != count) counts.push_back(count);
  }
  return counts;
}

size_t bytes_of(const Call& call, int nranks) {
  const size_t bytes = call.count * size_of(call.type);
  return counts_per_rank(call.kind) ? bytes * static_cast<size_t>(nranks) : bytes;
}

size_t result_elements(const Call& call, int nranks) {
  return call.kind == CollectiveKind::kAllgather ? call.count * static_cast<size_t>(nranks)
                                                 : call.count;
}

double bus_factor(CollectiveKind kind, int nranks) {
  const double n = nranks;
  switch (kind) {
    case CollectiveKind::kAllreduce: return 2.0 * (n - 1) / n;
    case CollectiveKind::kAllgather:
    case CollectiveKind::kReduceScatter: return (n - 1) / n;
    default: return 1.0;
  }
}

bool parse_bytes(const char* text, size_t* out) {
  const std::optional<uint64_t> count = parse_byte_count(text);
  if (!count) return false;
  *out = static_cast<size_t>(*count);
  return true;
}

std::vector<size_t> sweep_sizes(size_t min_bytes, size_t max_bytes, size_t factor,
                                size_t increment) {
  std::vector<size_t> sizes;
  for (size_t s = min_bytes; s <= max_bytes;) {
    sizes.push_back(s);
    const size_t next = factor > 1 ? s * factor : s + increment;
    if (next <= s) break;  // 0 times a factor, or an overflow
    s = next;
  }
  return sizes;
}

void Buffers::Free::operator()(std::byte* p) const { std::free(p); }

absl::StatusOr<Buffers> Buffers::allocate(size_t bytes) {
  constexpr size_t kPage = 4096;
  if (bytes > SIZE_MAX / 4) {  // the rounding below would wrap to a small buffer
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate two buffers of ", bytes,
                                                     " bytes; lower -e"));
  }
  const size_t rounded = (bytes + kPage - 1) / kPage * kPage + kPage;
  Buffers b;
  b.send_.reset(static_cast<std::byte*>(std::aligned_alloc(kPage, rounded)));
  b.recv_.reset(static_cast<std::byte*>(std::aligned_alloc(kPage, rounded)));
  if (!b.send_ || !b.recv_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate two buffers of ", rounded, " bytes; lower -e"));
  }
  // Written once here, so the pages exist before anything is timed.
  std::memset(b.send_.get(), 0, rounded);
  std::memset(b.recv_.get(), 0, rounded);
  b.bytes_ = rounded;
  return b;
}

Placement place(const Call& call, Buffers& buffers, int rank) {
  std::byte* send = buffers.send();
  std::byte* recv = buffers.recv();
  if (!call.in_place) return {send, recv};
  const size_t slot = call.count * size_of(call.type) * static_cast<size_t>(rank);
  switch (call.kind) {
    case CollectiveKind::kAllgather: return {recv + slot, recv};
    case CollectiveKind::kReduceScatter: return {recv, recv + slot};
    default: return {recv, recv};
  }
}

void prepare(const Call& call, const Placement& at, int rank, int nranks) {
  const size_t elem = size_of(call.type);
  // The whole receive area, which in place also holds the inputs written next.
  std::byte* area = call.in_place && call.kind == CollectiveKind::kReduceScatter
                        ? at.send
                        : at.recv;
  const size_t area_elems = call.kind == CollectiveKind::kAllreduce ||
                                    call.kind == CollectiveKind::kBroadcast
                                ? call.count
                                : call.count * static_cast<size_t>(nranks);
  // 0xA5 in every byte is no input and no exact result of any type (e.g. int8 -91).
  std::memset(area, 0xA5, area_elems * elem);
  const auto first = static_cast<size_t>(rank) * call.count;
  switch (call.kind) {
    case CollectiveKind::kAllgather:
      expected::fill(at.send, call.count, call.type, call.op, rank, first);
      break;
    case CollectiveKind::kReduceScatter:
      expected::fill(at.send, call.count * static_cast<size_t>(nranks), call.type, call.op, rank, 0);
      break;
    default: expected::fill(at.send, call.count, call.type, call.op, rank, 0);
  }
}

uint64_t count_wrong(const Call& call, const std::byte* result, int rank, int nranks) {
  const size_t elem = size_of(call.type);
  switch (call.kind) {
    case CollectiveKind::kAllreduce:
      return expected::count_wrong_reduced(result, call.count, call.type, call.op, nranks, 0);
    case CollectiveKind::kReduceScatter:
      return expected::count_wrong_reduced(result, call.count, call.type, call.op, nranks,
                                           static_cast<size_t>(rank) * call.count);
    case CollectiveKind::kAllgather: {
      uint64_t wrong = 0;
      for (int p = 0; p < nranks; ++p) {
        const size_t first = static_cast<size_t>(p) * call.count;
        wrong += expected::count_wrong_copied(result + first * elem, call.count, call.type,
                                              call.op, p, first);
      }
      return wrong;
    }
    default:
      return expected::count_wrong_copied(result, call.count, call.type, call.op, call.root, 0);
  }
}

}  // namespace weft::tools
