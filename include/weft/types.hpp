// Element types and reduction operators shared by the C++ API, the algorithms and the tools.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "weft/export.h"

namespace weft {

/// Element type of a collective's buffers. Values match the C API's weftDataType_t.
enum class DataType : uint8_t {
  kInt8 = 0,
  kUint8 = 1,
  kInt32 = 2,
  kUint32 = 3,
  kInt64 = 4,
  kUint64 = 5,
  kFloat16 = 6,
  kFloat32 = 7,
  kFloat64 = 8,
  kBFloat16 = 9,
};
inline constexpr int kNumDataTypes = 10;

/// Reduction operator. kAvg is a sum divided by the rank count (integer division for
/// integer types). Values match the C API's weftRedOp_t.
enum class ReduceOp : uint8_t { kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4 };
inline constexpr int kNumReduceOps = 5;

/// The collectives weft implements.
enum class CollectiveKind : uint8_t { kAllreduce, kAllgather, kReduceScatter, kBroadcast, kBarrier };
inline constexpr int kNumCollectiveKinds = 5;

/// True when `type` is one of the enumerators (guards values that came through the C API).
constexpr bool is_valid(DataType type) { return static_cast<int>(type) < kNumDataTypes; }
constexpr bool is_valid(ReduceOp op) { return static_cast<int>(op) < kNumReduceOps; }
namespace detail {
// At namespace scope: a table local to size_of() is built on the stack at every call
// (callgrind: ~30 instructions per collective call).
inline constexpr size_t kElementBytes[kNumDataTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
}  // namespace detail

/// Bytes per element; 0 for a value outside the enum. Inline: every call asks it several
/// times, and a small call takes ~150 ns.
constexpr size_t size_of(DataType type) {
  return is_valid(type) ? detail::kElementBytes[static_cast<int>(type)] : 0;
}

/// Short names (C strings: this Abseil's StrCat does not take std::string_view) as nccl-tests prints them: "float", "half", "bfloat16", "int8", ...
WEFT_API const char* name_of(DataType type);
/// "sum", "prod", "max", "min", "avg".
WEFT_API const char* name_of(ReduceOp op);
/// "allreduce", "allgather", "reduce_scatter", "broadcast", "barrier".
WEFT_API const char* name_of(CollectiveKind kind);

/// Accepts the names above and common aliases ("f32", "float32", "fp16", "bf16", "i32", ...).
WEFT_API std::optional<DataType> parse_data_type(std::string_view name);
WEFT_API std::optional<ReduceOp> parse_reduce_op(std::string_view name);
WEFT_API std::optional<CollectiveKind> parse_collective(std::string_view name);

}  // namespace weft
