// The communicator's calls on host buffers: validation, the algorithm's choice, the call
// check, and what a failed call leaves behind. Its making is comm_create.cc's, its links and
// their route comm_links.cc's, its calls on device buffers comm_device.cc's.
#include "src/comm.hpp"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "collectives/call_check.hpp"
#include "collectives/stream.hpp"
#include "src/blame.hpp"

namespace weft::detail {

Comm::Comm(int rank, int size, Config config)
    : rank_(rank),
      size_(size),
      config_(std::move(config)),
      timeout_ns_(std::max<int64_t>(absl::ToInt64Nanoseconds(config_.timeout), 0)),
      route_history_(rank) {}

Comm::~Comm() {
  // Calls still queued on streams finish first, as NCCL's ncclCommDestroy lets them; past
  // the deadline they are aborted, and their streams let go on.
  stop_engine(/*may_abort=*/true);
  // What the links still owe their peers leaves before they close: the tail of the last
  // call's bytes, which the peer may still be reading, and the acknowledgements of what this
  // rank read. A rank that finished its last call first and left at once would otherwise
  // close a connection under a peer still inside that call (tcp: its link then loses the
  // path and fails the call). Bounded, and skipped after a failure; a peer that closed ends
  // its link's wait at once.
  if (failed_.load(std::memory_order_acquire) || aborted_.load(std::memory_order_relaxed)) return;
  CallLock calls(tender_ != nullptr ? &calls_mu_ : nullptr);
  const Deadline deadline = Deadline::after(absl::Seconds(10));
  Backoff backoff;
  while (tend_links() && !deadline.expired()) backoff.pause();
}

absl::Status Comm::validate(const CollectiveArgs& args) const {
  // Named for errors only: this runs on every call.
  const auto what = [&] { return name_of(args.kind); };
  if (failed_.load(std::memory_order_acquire) || aborted_.load(std::memory_order_relaxed)) {
    return absl::FailedPreconditionError(absl::StrCat(
        what(), " on rank ", rank_, ": this communicator failed earlier (",
        async_error().message(), "); destroy it and create a new one"));
  }
  if (!is_valid(args.type)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what(), ": unknown data type ", static_cast<int>(args.type)));
  }
  if (!is_valid(args.op)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what(), ": unknown reduction op ", static_cast<int>(args.op)));
  }
  if (args.kind == CollectiveKind::kBroadcast && (args.root < 0 || args.root >= size_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("broadcast: root ", args.root, " is not a rank of 0..", size_ - 1));
  }
  // Allgather and reduce_scatter touch size * count elements of one buffer.
  const bool per_rank = counts_per_rank(args.kind);
  // A multiplication that must not overflow, not a division: divisions cost ~15 cycles each.
  const size_t unit = args.elem_bytes() * (per_rank ? static_cast<size_t>(size_) : 1);
  size_t bytes = 0;
  if (__builtin_mul_overflow(args.count, unit, &bytes) ||
      bytes > std::numeric_limits<size_t>::max() / 2) {
    return absl::InvalidArgumentError(absl::StrCat(what(), ": count ", args.count, " of ",
                                                   name_of(args.type), " overflows a byte count"));
  }
  if (args.count > 0 && args.kind != CollectiveKind::kBarrier) {
    const bool needs_send = args.kind != CollectiveKind::kBroadcast || args.root == rank_;
    if (args.recv == nullptr || (needs_send && args.send == nullptr)) {
      return absl::InvalidArgumentError(absl::StrCat(what(), " on rank ", rank_, ": ",
                                                     args.recv == nullptr ? "recv" : "send",
                                                     " buffer is null but count is ", args.count));
    }
  }
  return absl::OkStatus();
}

absl::Status Comm::with_links(absl::FunctionRef<absl::Status(LinkProvider&)> body) {
  if (absl::Status s = settle(/*copied_out=*/false); !s.ok()) return s;
  if (absl::Status s = async_error(); !s.ok()) return s;
  CallLock calls(tender_ != nullptr ? &calls_mu_ : nullptr);
  TendingScope tending(this);
  absl::Status s = body(*this);
  end_call_on_links();
  return s;
}

absl::Status Comm::run(CollectiveArgs& args, const CallOptions& options) {
  if (absl::Status s = validate(args); !s.ok()) return s;
  const bool device = on_device(args, options);
  if (device && options.stream != nullptr) {
    // Refused at the call, with the communicator still usable.
    if (absl::Status s = open_staging(name_of(args.kind)); !s.ok()) return s;
    if (absl::Status s = staging_->copier().check_stream(options.stream); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(name_of(args.kind), " on rank ", rank_, ": ",
                                                 s.message()));
    }
  }
  if (device && returns_at_once(args, options)) return submit(args, options);
  // Standing in with a NULL stream: the call runs here through the staging buffers, once the
  // calls before have copied their results out of them.
  if (absl::Status s = settle(/*copied_out=*/device); !s.ok()) return s;
  if (device) return run_staged(args, options);
  return run_host(args, options);
}

absl::Status Comm::run_host(CollectiveArgs& args, const CallOptions& options) {
  CallLock calls(tender_ != nullptr ? &calls_mu_ : nullptr);
  TendingScope tending(this);
  const size_t bytes = args.count * args.elem_bytes() *
                       (args.kind == CollectiveKind::kAllgather ? static_cast<size_t>(size_) : 1);
  // Without a per-call name the choice depends only on the kind and the size, and training
  // jobs repeat both: the last choice per kind is kept.
  LastChoice& last = last_choice_[static_cast<int>(args.kind)];
  if (!options.algorithm.empty() || last.algorithm == nullptr || last.bytes != bytes) {
    const std::string& name = options.algorithm.empty()
                                  ? forced_algorithm_[static_cast<int>(args.kind)]
                                  : options.algorithm;
    auto algorithm =
        choose_algorithm(args.kind, name, bytes, size_, config_.small_message_bytes, shm_only_,
                         route_.usable());
    if (!algorithm.ok()) return algorithm.status();
    const auto index = static_cast<uint8_t>(*algorithm - all_algorithms().data());
    if (!options.algorithm.empty()) return run_with(**algorithm, index, args, options);
    last = LastChoice{bytes, *algorithm, index};
  }
  return run_with(*last.algorithm, last.index, args, options);
}

absl::Status Comm::run_with(const Algorithm& chosen, uint8_t index, CollectiveArgs& args,
                            const CallOptions& options) {
  args.deadline = (options.timeout > absl::ZeroDuration() ? Deadline::after(options.timeout)
                                                          : Deadline::after_ns(timeout_ns_))
                      .cancelled_by(&aborted_);
  AlgoContext ctx;
  ctx.rank = rank_;
  ctx.size = size_;
  ctx.schedule = &route_.schedule();
  ctx.links = this;
  ctx.relay = Relay{relay_.get(), relay_bytes_};
  ctx.stream_block = stream_block_.get();
  ctx.direct = direct_.get();
  // Every call, even one with nothing to move, first agrees with the other ranks that they
  // make the same call: in band for the algorithms that move data in the check's pattern,
  // in rounds of its own before the others (collectives/call_check.hpp).
  CallAgreement known;
  known.reference_rank = static_cast<uint32_t>(rank_);
  known.reference = CallSignature::of(calls_++, args, index);
  if (isolation_ != nullptr && isolation_->pending()) {
    known.route = isolation_->proposal(monotonic_now());
  }
  const bool moves_data =
      !args.agree_only && (args.count > 0 || args.kind == CollectiveKind::kBarrier);
  const bool in_band = chosen.carries_agreement && moves_data;
  absl::Status s;
  if (in_band) {
    ctx.agreement = &known;
    s = chosen.run(ctx, args);
  } else {
    s = agree(ctx, known, args.deadline);
  }
  // A rank of the direct exchange took part (calls that differ): it waits for a state from
  // every rank, the rounds' partners or not.
  if (s.ok() && known.direct && !(in_band && chosen.checks_every_rank)) {
    s = trade_states_off_the_rounds(ctx, known, args.deadline);
  }
  if (s.ok()) s = known.verdict();
  // Every rank heard the same proposals and adopts the same change at the same point: before
  // the data moves where the check ran on its own (this very call runs on the new route; a
  // call in progress on a failing link can take seconds), after it where the data rode with
  // the check. The chosen algorithm stays: every rank chose it, and the old links still work.
  if (s.ok() && known.route && !in_band) adopt(*known.route);
  if (s.ok() && !in_band && moves_data) s = chosen.run(ctx, args);
  if (s.ok() && known.route && in_band) adopt(*known.route);
  if (!s.ok()) {
    // fail() closes the links, and what was lent to them goes with them.
    fail(s);
    if (size_ > 1 && worth_blaming(s) && !aborted_.load(std::memory_order_relaxed)) {
      s = blamed(s);
    }
    return absl::Status(s.code(), absl::StrCat("rank ", rank_, ": ", s.message()));
  }
  end_call_on_links();
  return s;
}

absl::Status Comm::blamed(const absl::Status& s) {
  // Long enough for a live rank's listener thread on a loaded host, short beside the deadline
  // that has usually just passed.
  const absl::Duration wait =
      std::clamp(config_.timeout / 10, absl::Milliseconds(200), absl::Seconds(1));
  const Blamed b = blame(s, control_init_, topology_.peers(), wait);
  blame_.store(b.conclusion.pack(), std::memory_order_release);
  MutexLock lock(&failure_mu_);
  failure_ = b.status;
  return b.status;
}

void Comm::fail(const absl::Status& s) {
  {
    MutexLock lock(&failure_mu_);
    failure_ = s;
  }
  failed_.store(true, std::memory_order_release);
  // Closing every link tells all peers at once, not only the ones this rank was waiting
  // on; otherwise ranks further along the ring would wait for their own deadline.
  MutexLock lock(&links_mu_);
  for (auto& l : links_) l.reset();
}

void Comm::abort() { aborted_.store(true, std::memory_order_relaxed); }

absl::Status Comm::async_error() const {
  if (failed_.load(std::memory_order_acquire)) {
    MutexLock lock(&failure_mu_);
    return failure_;
  }
  if (aborted_.load(std::memory_order_relaxed)) {
    return absl::AbortedError(absl::StrCat("rank ", rank_, ": Communicator::abort was called"));
  }
  return absl::OkStatus();
}

}  // namespace weft::detail
