#include "tools/expected.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "collectives/half.hpp"

namespace weft::expected {
namespace {

// An element's input as an exact integer. Prod inputs are 1 or 2 (sign flipped on some
// elements for signed types) and only ranks below 6 contribute a 2, so products stay exact.
int64_t input(ReduceOp op, bool is_signed, int rank, size_t index) {
  if (op == ReduceOp::kProd) {
    int64_t v = (rank < 6 && (index + 3 * static_cast<size_t>(rank)) % 2 == 1) ? 2 : 1;
    if (is_signed && (index * 7 + static_cast<size_t>(rank)) % 5 == 0) v = -v;
    return v;
  }
  const int64_t v = static_cast<int64_t>((index * 13 + static_cast<size_t>(rank) * 7) % 11);
  return is_signed ? v - 5 : v;
}

int64_t reduced(ReduceOp op, bool is_signed, int nranks, size_t index) {
  int64_t acc = input(op, is_signed, 0, index);
  for (int r = 1; r < nranks; ++r) {
    const int64_t v = input(op, is_signed, r, index);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: acc += v; break;
      case ReduceOp::kProd: acc *= v; break;
      case ReduceOp::kMax: acc = v > acc ? v : acc; break;
      case ReduceOp::kMin: acc = v < acc ? v : acc; break;
    }
  }
  return acc;
}

bool is_signed(DataType t) {
  return t != DataType::kUint8 && t != DataType::kUint32 && t != DataType::kUint64;
}

// Writes integer `v` as `type`; for kAvg divides by `divisor` first as the type would.
void store(void* dst, DataType type, int64_t v, int divisor) {
  switch (type) {
    case DataType::kInt8: { int8_t x = static_cast<int8_t>(v / divisor); std::memcpy(dst, &x, 1); break; }
    case DataType::kUint8: { uint8_t x = static_cast<uint8_t>(v / divisor); std::memcpy(dst, &x, 1); break; }
    case DataType::kInt32: { int32_t x = static_cast<int32_t>(v / divisor); std::memcpy(dst, &x, 4); break; }
    case DataType::kUint32: { uint32_t x = static_cast<uint32_t>(v / divisor); std::memcpy(dst, &x, 4); break; }
    case DataType::kInt64: { int64_t x = v / divisor; std::memcpy(dst, &x, 8); break; }
    case DataType::kUint64: { uint64_t x = static_cast<uint64_t>(v / divisor); std::memcpy(dst, &x, 8); break; }
    case DataType::kFloat16: { uint16_t x = float_to_half(static_cast<float>(v) / static_cast<float>(divisor)); std::memcpy(dst, &x, 2); break; }
    case DataType::kBFloat16: { uint16_t x = float_to_bf16(static_cast<float>(v) / static_cast<float>(divisor)); std::memcpy(dst, &x, 2); break; }
    case DataType::kFloat32: { float x = static_cast<float>(v) / static_cast<float>(divisor); std::memcpy(dst, &x, 4); break; }
    case DataType::kFloat64: { double x = static_cast<double>(v) / divisor; std::memcpy(dst, &x, 8); break; }
  }
}

// The inputs repeat every kPeriod elements (11 for sum-like ops, 10 for prod), so one
// block of whole periods, built once per call, is copied or compared at memory speed.
constexpr size_t kPeriod = 110;
constexpr size_t kBlockElems = kPeriod * 64;

template <typename ValueOf>
void build_block(std::byte* block, DataType type, size_t first_index, ValueOf value_of) {
  const size_t elem = size_of(type);
  for (size_t i = 0; i < kBlockElems; ++i) value_of(block + i * elem, first_index + i);
}

size_t compare(const std::byte* in, size_t count, DataType type, const std::byte* block) {
  const size_t elem = size_of(type);
  size_t wrong = 0;
  for (size_t done = 0; done < count; done += kBlockElems) {
    const size_t n = std::min(kBlockElems, count - done);
    const std::byte* chunk = in + done * elem;
    if (std::memcmp(chunk, block, n * elem) == 0) continue;
    for (size_t i = 0; i < n; ++i) wrong += std::memcmp(chunk + i * elem, block + i * elem, elem) != 0;
  }
  return wrong;
}

}  // namespace

void fill(void* buf, size_t count, DataType type, ReduceOp op, int rank, size_t first_index) {
  const size_t elem = size_of(type);
  const bool s = is_signed(type);
  alignas(64) std::byte block[kBlockElems * 8];
  build_block(block, type, first_index, [&](std::byte* dst, size_t index) {
    store(dst, type, input(op, s, rank, index), 1);
  });
  auto* out = static_cast<std::byte*>(buf);
  for (size_t done = 0; done < count; done += kBlockElems) {
    std::memcpy(out + done * elem, block, std::min(kBlockElems, count - done) * elem);
  }
}

size_t count_wrong_reduced(const void* buf, size_t count, DataType type, ReduceOp op,
                           int nranks, size_t first_index) {
  const bool s = is_signed(type);
  const int divisor = op == ReduceOp::kAvg ? nranks : 1;
  alignas(64) std::byte block[kBlockElems * 8];
  build_block(block, type, first_index, [&](std::byte* dst, size_t index) {
    store(dst, type, reduced(op, s, nranks, index), divisor);
  });
  return compare(static_cast<const std::byte*>(buf), count, type, block);
}

size_t count_wrong_copied(const void* buf, size_t count, DataType type, ReduceOp op, int rank,
                          size_t first_index) {
  const bool s = is_signed(type);
  alignas(64) std::byte block[kBlockElems * 8];
  build_block(block, type, first_index, [&](std::byte* dst, size_t index) {
    store(dst, type, input(op, s, rank, index), 1);
  });
  return compare(static_cast<const std::byte*>(buf), count, type, block);
}

}  // namespace weft::expected
