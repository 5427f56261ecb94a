#include <array>
#include <string>

#include "absl/strings/ascii.h"
#include "weft/types.hpp"

namespace weft {
namespace {

struct TypeRow {
  DataType type;
  size_t bytes;
  const char* name;
  std::array<std::string_view, 3> aliases;
};
constexpr std::array<TypeRow, kNumDataTypes> kTypes = {{
    {DataType::kInt8, 1, "int8", {"i8", "char", "int8_t"}},
    {DataType::kUint8, 1, "uint8", {"u8", "uchar", "uint8_t"}},
    {DataType::kInt32, 4, "int32", {"i32", "int", "int32_t"}},
    {DataType::kUint32, 4, "uint32", {"u32", "uint", "uint32_t"}},
    {DataType::kInt64, 8, "int64", {"i64", "long", "int64_t"}},
    {DataType::kUint64, 8, "uint64", {"u64", "ulong", "uint64_t"}},
    {DataType::kFloat16, 2, "half", {"f16", "fp16", "float16"}},
    {DataType::kFloat32, 4, "float", {"f32", "fp32", "float32"}},
    {DataType::kFloat64, 8, "double", {"f64", "fp64", "float64"}},
    {DataType::kBFloat16, 2, "bfloat16", {"bf16", "bfloat", "bf16"}},
}};
constexpr std::array<const char*, kNumReduceOps> kOps = {"sum", "prod", "max", "min", "avg"};
constexpr std::array<const char*, kNumCollectiveKinds> kKinds = {
    "allreduce", "allgather", "reduce_scatter", "broadcast", "barrier"};

// size_of() lives in the header; the table must say the same.
constexpr bool sizes_agree() {
  for (const TypeRow& row : kTypes) {
    if (size_of(row.type) != row.bytes) return false;
  }
  return true;
}
static_assert(sizes_agree(), "kTypes and size_of() disagree on an element size");
}  // namespace

const char* name_of(DataType type) {
  return is_valid(type) ? kTypes[static_cast<int>(type)].name : "invalid";
}
const char* name_of(ReduceOp op) {
  return is_valid(op) ? kOps[static_cast<int>(op)] : "invalid";
}
const char* name_of(CollectiveKind kind) {
  const int i = static_cast<int>(kind);
  return i < kNumCollectiveKinds ? kKinds[i] : "invalid";
}

std::optional<DataType> parse_data_type(std::string_view name) {
  const std::string n = absl::AsciiStrToLower(std::string(name));
  for (const TypeRow& row : kTypes) {
    if (n == row.name) return row.type;
    for (std::string_view alias : row.aliases) {
      if (n == alias) return row.type;
    }
  }
  return std::nullopt;
}

std::optional<ReduceOp> parse_reduce_op(std::string_view name) {
  const std::string n = absl::AsciiStrToLower(std::string(name));
  for (int i = 0; i < kNumReduceOps; ++i) {
    if (n == kOps[i]) return static_cast<ReduceOp>(i);
  }
  return std::nullopt;
}

std::optional<CollectiveKind> parse_collective(std::string_view name) {
  std::string n = absl::AsciiStrToLower(std::string(name));
  for (char& c : n) {
    if (c == '-') c = '_';
  }
  if (n == "reducescatter") n = "reduce_scatter";
  for (int i = 0; i < kNumCollectiveKinds; ++i) {
    if (n == kKinds[i]) return static_cast<CollectiveKind>(i);
  }
  return std::nullopt;
}

}  // namespace weft
