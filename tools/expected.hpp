// Inputs whose reductions are exact in every type, and the results to expect, as nccl-tests
// chooses them: small integers for sum, min, max and avg (values in [-5, 5], or [0, 10] for
// unsigned types, so sums over up to 8 ranks are exact even in int8 and bfloat16), and
// factors of +-1 and 2 for prod, with at most 6 factors of 2 per element. Beyond 8 ranks
// sums may wrap in int8/uint8, which the checks follow, except for avg. Used by the tests and by
// `weft bench` / `weft run` to count wrong elements.
#pragma once

#include <cstddef>

#include "weft/types.hpp"

namespace weft::expected {

/// Fills buf[0..count) with rank `rank`'s input for elements first_index.. of a vector.
void fill(void* buf, size_t count, DataType type, ReduceOp op, int rank, size_t first_index);

/// Counts elements of buf[0..count) that differ (bitwise) from op over ranks 0..nranks-1 of
/// the inputs of elements first_index.. .
size_t count_wrong_reduced(const void* buf, size_t count, DataType type, ReduceOp op,
                           int nranks, size_t first_index);

/// Counts elements of buf[0..count) that differ from rank `rank`'s input for elements
/// first_index.. (made with `op`).
size_t count_wrong_copied(const void* buf, size_t count, DataType type, ReduceOp op, int rank,
                          size_t first_index);

}  // namespace weft::expected
