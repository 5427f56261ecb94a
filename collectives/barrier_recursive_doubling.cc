// Barrier by recursive doubling: the call check's rounds (collectives/call_check.hpp) are a
// barrier already, since no rank finishes them before every rank's state has reached it,
// directly or through others. So the barrier is those rounds and nothing more: log2(N)
// exchanges, plus two for the extra positions of a rank count that is not a power of two.
#include "collectives/algorithm.hpp"
#include "collectives/call_check.hpp"

namespace weft {

absl::Status barrier_recursive_doubling(const AlgoContext& ctx, const CollectiveArgs& args) {
  if (ctx.agreement == nullptr) {
    return absl::InternalError("barrier (recursive doubling) run without its call check");
  }
  return agree(ctx, *ctx.agreement, args.deadline);
}

}  // namespace weft
