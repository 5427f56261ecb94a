// The algorithm registry: every algorithm has its own file, a name and a description, and
// can be forced by name (CallOptions::algorithm, WEFT_ALGORITHM) or listed (`weft info`).
#pragma once

#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "collectives/collective.hpp"

namespace weft {

using RunFn = absl::Status (*)(const AlgoContext& ctx, const CollectiveArgs& args);

/// The links an algorithm moves data over, so that the choice can skip one that would cross an
/// isolated link (src/route.hpp). The call check itself runs over kRounds.
enum class LinkPattern : uint8_t {
  kRing,       ///< ring neighbours only (two ranks: the one link)
  kRounds,     ///< the call check's rounds: ring positions one bit apart (rounds_link)
  kEveryPair,  ///< every rank with every other
};
/// Which patterns every link of is in use now; the default: all of them.
struct UsableLinks {
  bool ring = true;
  bool rounds = true;
  bool every_pair = true;
  bool allows(LinkPattern p) const {
    return p == LinkPattern::kRing ? ring : p == LinkPattern::kRounds ? rounds : every_pair;
  }
};

struct Algorithm {
  const char* name;
  CollectiveKind kind;
  const char* description;
  RunFn run;
  bool needs_power_of_two_ranks = false;  ///< refused by name on other rank counts
  /// Moves data in the call check's own pattern and carries the check in band
  /// (AlgoContext::agreement); the others run the check's rounds first.
  bool carries_agreement = false;
  bool needs_two_ranks = false;  ///< refused by name on other rank counts
  /// Sends the call check to every peer at once (CallAgreement::direct), so that ranks that
  /// ran the rounds answer it off them (trade_states_off_the_rounds); on at most
  /// kMostDirectRanks ranks, refused by name on more.
  bool checks_every_rank = false;
  LinkPattern links = LinkPattern::kRing;
};

/// The most ranks the direct exchange runs on: it keeps a round per peer on the stack (about
/// 1 KiB each), and it was measured up to 16 ranks.
inline constexpr int kMostDirectRanks = 16;

/// Every algorithm, grouped by collective; the first of each collective is its default.
const std::vector<Algorithm>& all_algorithms();

/// The algorithm `name` for `kind`, or nullptr.
const Algorithm* find_algorithm(CollectiveKind kind, std::string_view name);

/// `name` when given (an unknown name is an error listing the known ones); otherwise the
/// best algorithm for a message of `bytes` (the whole output for allgather) on `nranks`,
/// `shm_only` when every link of the communicator is over shared memory, among those whose
/// links are all `usable` (the collective's first algorithm when none is: the barrier has
/// only one).
absl::StatusOr<const Algorithm*> choose_algorithm(CollectiveKind kind, std::string_view name,
                                                  size_t bytes, int nranks,
                                                  size_t small_message_bytes, bool shm_only,
                                                  UsableLinks usable = {});

/// The link to the other rank, for algorithms made for two ranks (choose_algorithm refuses
/// them by name on other counts, so any other count here is a bug: Internal).
inline absl::StatusOr<transport::Pair*> link_to_the_other_rank(const AlgoContext& ctx,
                                                               Deadline deadline,
                                                               const char* what) {
  if (ctx.size != 2) return absl::InternalError(absl::StrCat(what, " run on ", ctx.size, " ranks"));
  const Schedule& ring = *ctx.schedule;
  return ctx.links->link(ring.rank_at(ring.position_of(ctx.rank) + 1), deadline);
}

// The algorithms, one file each.
absl::Status allreduce_ring(const AlgoContext& ctx, const CollectiveArgs& args);
absl::Status allreduce_recursive_doubling(const AlgoContext& ctx, const CollectiveArgs& args);
absl::Status allreduce_exchange(const AlgoContext& ctx, const CollectiveArgs& args);
absl::Status allreduce_push(const AlgoContext& ctx, const CollectiveArgs& args);
absl::Status allreduce_direct(const AlgoContext& ctx, const CollectiveArgs& args);
absl::Status allgather_ring(const AlgoContext& ctx, const CollectiveArgs& args);
absl::Status allgather_recursive_doubling(const AlgoContext& ctx, const CollectiveArgs& args);
absl::Status allgather_direct(const AlgoContext& ctx, const CollectiveArgs& args);
absl::Status reduce_scatter_ring(const AlgoContext& ctx, const CollectiveArgs& args);
absl::Status reduce_scatter_recursive_doubling(const AlgoContext& ctx,
                                               const CollectiveArgs& args);
absl::Status reduce_scatter_recursive_halving(const AlgoContext& ctx, const CollectiveArgs& args);
absl::Status broadcast_chain(const AlgoContext& ctx, const CollectiveArgs& args);
absl::Status broadcast_recursive_doubling(const AlgoContext& ctx, const CollectiveArgs& args);
absl::Status barrier_recursive_doubling(const AlgoContext& ctx, const CollectiveArgs& args);

}  // namespace weft
