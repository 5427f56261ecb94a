// One round of the recursive-doubling family that trades a group of equal blocks each way
// with the partner, the call check's state in band ahead of them (collectives/call_check.hpp).
// Recursive-doubling allgather and recursive-halving reduce-scatter both move data this way;
// they differ in which blocks leave, where the partner's land and how they are sent. A
// template, so that the two lambdas inline: a small call runs this loop once or twice, and
// calls through function references cost it ~150 instructions (callgrind, 16-byte allgather).
#pragma once

#include <cstddef>

#include "absl/status/status.h"
#include "collectives/call_check.hpp"
#include "collectives/stream.hpp"

namespace weft {

/// Sends our state and, unless a mismatch is known, our `count` blocks of `block` bytes over
/// `pair`, and hears the partner's state and blocks. `ours(i)` is our block i, sent in order
/// and left in place until the round ends; `theirs(i)` gives the Landing of the partner's
/// block i (copied or reduced). `offer`: the partner may read our blocks from our memory
/// (Pair::offer_some); else they are copied through the link (send_some). `idle` (or null)
/// runs when a pass moved nothing. A group of up to AgreementRound::kCarryBytes rides in the
/// state's own write, and the partner's is read with its state; so is a single larger block
/// bound for a plain copy (AgreementRound::kReadWithStateUpTo). Once a mismatch is known the
/// blocks stay put; `round`'s verdict then says so.
template <typename Ours, typename Theirs>
absl::Status trade_blocks(transport::Pair& pair, AgreementRound& round, size_t count,
                          size_t block, Ours ours, Theirs theirs, bool offer, IdleCopy* idle,
                          Waiter& waiter) {
  size_t out = 0, in = 0;  // blocks fully sent / landed
  size_t sent = 0;         // bytes of block `out` sent
  Landing landing = theirs(0);
  if (block > 0 && count * block <= AgreementRound::kCarryBytes) {
    // One block is read straight to where it lands; several, out of the round's buffer.
    round.expect_carried(count * block, count == 1 ? landing.direct_destination() : nullptr);
    if (round.data_follows()) {
      if (count == 1) {
        round.carry_in_place(ours(0), block);  // left in place until the round ends
      } else {
        for (size_t i = 0; i < count; ++i) round.carry(ours(i), block);
      }
      out = count;
    }
  } else if (count == 1 && landing.direct_destination() != nullptr) {
    round.expect_carried(block, landing.direct_destination());  // read with the state
  }
  while (!round.sent() || !round.merged() ||
         (round.data_follows() && (out < count || in < count))) {
    bool moved = false;
    if (!round.sent()) {
      auto k = round.send(pair, block > 0 && out < count);
      if (!k.ok()) return k.status();
      moved |= *k > 0;
    }
    if (round.sent() && out < count && round.data_follows()) {
      const std::byte* from = ours(out) + sent;
      auto k = offer ? pair.offer_some(from, block - sent) : pair.send_some(from, block - sent);
      if (!k.ok()) return round.unless_calls_differ(pair, k.status());
      sent += *k;
      moved |= *k > 0;
      if (sent == block) out++, sent = 0;
    }
    // Ours leaves before we look for theirs: looking costs a cross-core cache miss (~0.1 us).
    if (!round.merged()) {
      auto k = round.receive(pair);
      if (!k.ok()) return k.status();
      moved |= *k > 0;
    }
    if (round.merged() && in < count && round.data_follows()) {
      auto got = round.receive_data(pair, landing);
      if (!got.ok()) return got.status();
      moved |= *got > 0;
      if (landing.done() && ++in < count) landing = theirs(in);
    }
    if (!moved && idle != nullptr) moved = idle->step();
    if (absl::Status s = waiter.after_pass(moved, &pair); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace weft
