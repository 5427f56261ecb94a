// Element-wise reduction kernels for host memory, vectorised for the CPU this runs on.
#pragma once

#include <cstddef>

#include "weft/types.hpp"

namespace weft {

/// out[i] = a[i] op b[i] for i < count. `out` may alias `a` or `b` exactly (not partially).
/// kAvg reduces as kSum; the caller divides once at the end with finish_average().
using ReduceFn = void (*)(void* out, const void* a, const void* b, size_t count);

/// The kernel for (type, op); nullptr if either is not a valid enumerator.
ReduceFn reduce_fn(DataType type, ReduceOp op);

/// buf[i] /= nranks, in the type's own arithmetic (integer division for integers; f16 and
/// bf16 divide in float and round to nearest even).
void finish_average(void* buf, size_t count, DataType type, int nranks);

/// The instruction set the kernels were picked for: "avx2" or "generic".
const char* reduce_isa();

}  // namespace weft
