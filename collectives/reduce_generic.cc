// The reduction kernel table compiled for baseline x86-64 (SSE2 only; no extra -m flags, see
// CMakeLists.txt), used when the CPU lacks AVX2 or F16C. The plain types still vectorise
// with SSE2 at -O3, f16 included (through the branch-free conversions in reduce_kernels.hpp).
#include "collectives/reduce_kernels.hpp"

namespace weft::reduce_internal {
namespace {
constexpr ReduceTable kGenericTable = make_table<SoftF16>();
}  // namespace

const ReduceTable& generic_table() { return kGenericTable; }

}  // namespace weft::reduce_internal
