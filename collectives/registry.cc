#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/algorithm.hpp"
#include "collectives/call_check.hpp"

namespace weft {

const std::vector<Algorithm>& all_algorithms() {
  static const std::vector<Algorithm> table = {
      {"ring", CollectiveKind::kAllreduce,
       "ring reduce-scatter then ring allgather, streamed; bandwidth-optimal for large messages",
       allreduce_ring},
      {"recursive_doubling", CollectiveKind::kAllreduce,
       "log2(N) whole-vector exchanges; latency-optimal for small messages",
       allreduce_recursive_doubling, /*needs_power_of_two_ranks=*/false,
       /*carries_agreement=*/true, /*needs_two_ranks=*/false,
       /*checks_every_rank=*/false, LinkPattern::kRounds},
      {"exchange", CollectiveKind::kAllreduce,
       "two ranks: each reduces the other's whole input into its output in one pass; "
       "mid-size messages over shm",
       allreduce_exchange, /*needs_power_of_two_ranks=*/false, /*carries_agreement=*/false,
       /*needs_two_ranks=*/true},
      {"push", CollectiveKind::kAllreduce,
       "two ranks over shm: each reduces its half and writes it into both outputs while it is "
       "in cache; large messages",
       allreduce_push, /*needs_power_of_two_ranks=*/false, /*carries_agreement=*/false,
       /*needs_two_ranks=*/true},
      {"direct", CollectiveKind::kAllreduce,
       "every rank sends its vector to every other at once and reduces all N in rank order, "
       "one exchange; small vectors, N up to 16 over shm",
       allreduce_direct, /*needs_power_of_two_ranks=*/false, /*carries_agreement=*/true,
       /*needs_two_ranks=*/false, /*checks_every_rank=*/true,
       LinkPattern::kEveryPair},
      {"ring", CollectiveKind::kAllgather, "each block streams once around the ring", allgather_ring},
      {"recursive_doubling", CollectiveKind::kAllgather,
       "log2(N) exchanges of doubling block groups; small messages, power-of-two N",
       allgather_recursive_doubling, /*needs_power_of_two_ranks=*/true,
       /*carries_agreement=*/true, /*needs_two_ranks=*/false,
       /*checks_every_rank=*/false, LinkPattern::kRounds},
      {"direct", CollectiveKind::kAllgather,
       "every rank sends its block to every other at once, one exchange; small blocks, "
       "N up to 16 over shm",
       allgather_direct, /*needs_power_of_two_ranks=*/false, /*carries_agreement=*/true,
       /*needs_two_ranks=*/false, /*checks_every_rank=*/true,
       LinkPattern::kEveryPair},
      {"ring", CollectiveKind::kReduceScatter,
       "N-1 streamed steps of receive, reduce, forward around the ring", reduce_scatter_ring},
      {"recursive_doubling", CollectiveKind::kReduceScatter,
       "recursive-doubling allreduce of the whole vector, keeping this rank's block; small "
       "messages",
       reduce_scatter_recursive_doubling, /*needs_power_of_two_ranks=*/false,
       /*carries_agreement=*/true, /*needs_two_ranks=*/false,
       /*checks_every_rank=*/false, LinkPattern::kRounds},
      {"recursive_halving", CollectiveKind::kReduceScatter,
       "log2(N) exchanges, each sending the half of the partial sums the partner keeps; small "
       "messages, power-of-two N",
       reduce_scatter_recursive_halving, /*needs_power_of_two_ranks=*/true,
       /*carries_agreement=*/true, /*needs_two_ranks=*/false,
       /*checks_every_rank=*/false, LinkPattern::kRounds},
      {"chain", CollectiveKind::kBroadcast,
       "the root streams along the ring; each rank forwards bytes as they land", broadcast_chain},
      {"recursive_doubling", CollectiveKind::kBroadcast,
       "the root's data rides the call check's log2(N) rounds; small messages",
       broadcast_recursive_doubling, /*needs_power_of_two_ranks=*/false,
       /*carries_agreement=*/true, /*needs_two_ranks=*/false,
       /*checks_every_rank=*/false, LinkPattern::kRounds},
      {"recursive_doubling", CollectiveKind::kBarrier,
       "the call check's log2(N) rounds, which no rank leaves before all have entered",
       barrier_recursive_doubling, /*needs_power_of_two_ranks=*/false,
       /*carries_agreement=*/true, /*needs_two_ranks=*/false,
       /*checks_every_rank=*/false, LinkPattern::kRounds},
  };
  return table;
}

// Two ranks over shm, above the small-message size: the push. It folds the ring's allgather
// into its reduce-scatter and beat the ring at every size from 128 KiB to 128 MiB (out of
// place +3-60%, in place +40-130%). Against the exchange it was level out of place at
// 128 KiB and ahead above, and 1.5-2x ahead in place. It needs shm (it runs the ring
// where it cannot write into the peer); over tcp the ring is the choice.

const Algorithm* find_algorithm(CollectiveKind kind, std::string_view name) {
  for (const Algorithm& a : all_algorithms()) {
    if (a.kind == kind && name == a.name) return &a;
  }
  return nullptr;
}

absl::StatusOr<const Algorithm*> choose_algorithm(CollectiveKind kind, std::string_view name,
                                                  size_t bytes, int nranks,
                                                  size_t small_message_bytes, bool shm_only,
                                                  UsableLinks usable) {
  const bool power_of_two = nranks > 1 && (nranks & (nranks - 1)) == 0;
  if (!name.empty()) {
    if (const Algorithm* a = find_algorithm(kind, name)) {
      if (a->needs_power_of_two_ranks && !power_of_two && nranks > 1) {
        return absl::InvalidArgumentError(absl::StrCat(name_of(kind), " algorithm '", a->name,
                                                       "' needs a power-of-two rank count, not ",
                                                       nranks));
      }
      if (a->checks_every_rank && nranks > kMostDirectRanks) {
        return absl::InvalidArgumentError(absl::StrCat(name_of(kind), " algorithm '", a->name,
                                                       "' runs on at most ", kMostDirectRanks,
                                                       " ranks, not ", nranks));
      }
      if (a->needs_two_ranks && nranks != 2) {
        return absl::InvalidArgumentError(absl::StrCat(name_of(kind), " algorithm '", a->name,
                                                       "' is for two ranks, not ", nranks));
      }
      return a;
    }
    std::vector<std::string> known;
    for (const Algorithm& a : all_algorithms()) {
      if (a.kind == kind) known.emplace_back(a.name);
    }
    return absl::InvalidArgumentError(absl::StrCat("no ", name_of(kind), " algorithm named '",
                                                   std::string(name), "'; known: ",
                                                   absl::StrJoin(known, ", ")));
  }
  static const std::vector<const Algorithm*> defaults = [] {
    std::vector<const Algorithm*> first(kNumCollectiveKinds, nullptr);
    for (const Algorithm& a : all_algorithms()) {
      if (first[static_cast<int>(a.kind)] == nullptr) first[static_cast<int>(a.kind)] = &a;
    }
    return first;
  }();
  const Algorithm* first = defaults[static_cast<int>(kind)];
  if (first == nullptr) {
    return absl::InternalError(absl::StrCat("no algorithm registered for ", name_of(kind)));
  }
  // By size, then back to the collective's first (the ring's) where that one's links are not
  // all in use.
  const Algorithm* by_size = [&]() -> const Algorithm* {
    // Looked up once: this runs on every call, and small calls take about a microsecond.
    static const Algorithm* const small_allreduce =
        find_algorithm(CollectiveKind::kAllreduce, "recursive_doubling");
    static const Algorithm* const pair_allreduce = find_algorithm(CollectiveKind::kAllreduce, "push");
    static const Algorithm* const direct_allreduce =
        find_algorithm(CollectiveKind::kAllreduce, "direct");
    static const Algorithm* const small_allgather =
        find_algorithm(CollectiveKind::kAllgather, "recursive_doubling");
    static const Algorithm* const direct_allgather =
        find_algorithm(CollectiveKind::kAllgather, "direct");
    static const Algorithm* const small_reduce_scatter =
        find_algorithm(CollectiveKind::kReduceScatter, "recursive_doubling");
    static const Algorithm* const halving_reduce_scatter =
        find_algorithm(CollectiveKind::kReduceScatter, "recursive_halving");
    static const Algorithm* const small_broadcast =
        find_algorithm(CollectiveKind::kBroadcast, "recursive_doubling");
    // The direct exchange, for what rides with the call check's state (for allgather `bytes`
    // is all N blocks), over shm only: its N-1 messages per rank cost little there, but over
    // tcp each is a system call and a packet, and across 4 virtual-cluster hosts recursive
    // doubling's 2 took 55-60 us to the direct exchange's 62-93 (allreduce and allgather,
    // 8-512 B).
    const bool direct = shm_only && nranks > 2 && nranks <= kMostDirectRanks &&
                        bytes <= small_message_bytes;
    // Measured up to 512 bytes with the state, when no more rode with it; the direct exchange
    // carries at most AgreementRound::kCarryBytes.
    constexpr size_t kDirectUpTo = 512 - CallAgreement::kHeadBytes;
    static_assert(kDirectUpTo <= AgreementRound::kCarryBytes);
    if (kind == CollectiveKind::kAllreduce && direct && bytes <= kDirectUpTo) {
      return direct_allreduce;
    }
    if (kind == CollectiveKind::kAllreduce && bytes <= small_message_bytes) return small_allreduce;
    if (kind == CollectiveKind::kAllreduce && nranks == 2 && shm_only) return pair_allreduce;
    if (kind == CollectiveKind::kAllgather && direct &&
        bytes / static_cast<size_t>(nranks) <= kDirectUpTo) {
      return direct_allgather;
    }
    if (kind == CollectiveKind::kAllgather && power_of_two && bytes <= small_message_bytes) {
      return small_allgather;
    }
    // `bytes` is one rank's block here; the recursive doubling moves all N of them, the
    // halving (N-1) in all, and needs a power of two.
    if (kind == CollectiveKind::kReduceScatter && bytes * static_cast<size_t>(nranks) <= small_message_bytes) {
      return power_of_two ? halving_reduce_scatter : small_reduce_scatter;
    }
    if (kind == CollectiveKind::kBroadcast && bytes <= small_message_bytes) return small_broadcast;
    return nullptr;
  }();
  return by_size != nullptr && usable.allows(by_size->links) ? by_size : first;
}

}  // namespace weft
