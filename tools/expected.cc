#include "tools/expected.hpp"

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

}  // namespace

void fill(void* buf, size_t count, DataType type, ReduceOp op, int rank, size_t first_index) {
  const size_t elem = size_of(type);
  auto* out = static_cast<std::byte*>(buf);
  const bool s = is_signed(type);
  for (size_t i = 0; i < count; ++i) store(out + i * elem, type, input(op, s, rank, first_index + i), 1);
}

size_t count_wrong_reduced(const void* buf, size_t count, DataType type, ReduceOp op,
                           int nranks, size_t first_index) {
  const size_t elem = size_of(type);
  const auto* in = static_cast<const std::byte*>(buf);
  const bool s = is_signed(type);
  const int divisor = op == ReduceOp::kAvg ? nranks : 1;
  size_t wrong = 0;
  std::byte want[8];
  for (size_t i = 0; i < count; ++i) {
    store(want, type, reduced(op, s, nranks, first_index + i), divisor);
    wrong += std::memcmp(want, in + i * elem, elem) != 0;
  }
  return wrong;
}

size_t count_wrong_copied(const void* buf, size_t count, DataType type, ReduceOp op, int rank,
                          size_t first_index) {
  const size_t elem = size_of(type);
  const auto* in = static_cast<const std::byte*>(buf);
  const bool s = is_signed(type);
  size_t wrong = 0;
  std::byte want[8];
  for (size_t i = 0; i < count; ++i) {
    store(want, type, input(op, s, rank, first_index + i), 1);
    wrong += std::memcmp(want, in + i * elem, elem) != 0;
  }
  return wrong;
}

}  // namespace weft::expected
