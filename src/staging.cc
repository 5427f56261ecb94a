#include "src/staging.hpp"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace weft {
namespace {

// Host rows per piece: one per rank where every rank's block takes part, else one.
size_t rows(const CollectiveArgs& args, int size) {
  return counts_per_rank(args.kind) ? static_cast<size_t>(size) : 1;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Staging>> Staging::create(std::unique_ptr<device::Copier> copier,
                                                         size_t piece_bytes) {
  std::unique_ptr<Staging> s(new Staging(std::move(copier), piece_bytes));
  for (auto* side : {&s->in_, &s->out_}) {
    for (std::byte*& b : *side) {
      auto buffer = s->copier_->host_buffer(piece_bytes);
      if (!buffer.ok()) return buffer.status();
      b = *buffer;
    }
  }
  return s;
}

absl::Status Staging::copy(Queue q, void* dst, size_t dst_pitch, const void* src,
                           size_t src_pitch, size_t width, size_t height) {
  return q.on_stream ? copier_->copy_on(q.stream, dst, dst_pitch, src, src_pitch, width, height)
                     : copier_->copy(dst, dst_pitch, src, src_pitch, width, height);
}

// Piece [first, first + n) of every block: into one host buffer, in rows of n elements.
absl::Status Staging::bring_in(Queue q, const CollectiveArgs& args, int size, size_t first,
                               size_t n, std::byte* to) {
  const size_t e = args.elem_bytes();
  if (args.kind == CollectiveKind::kReduceScatter) {
    return copy(q, to, n * e, args.send + first * e, args.count * e, n * e, rows(args, size));
  }
  return copy(q, to, n * e, args.send + first * e, n * e, n * e, 1);
}

absl::Status Staging::take_out(Queue q, const CollectiveArgs& args, int size, size_t first,
                               size_t n, const std::byte* from) {
  const size_t e = args.elem_bytes();
  if (args.kind == CollectiveKind::kAllgather) {
    return copy(q, args.recv + first * e, args.count * e, from, n * e, n * e, rows(args, size));
  }
  return copy(q, args.recv + first * e, n * e, from, n * e, n * e, 1);
}

absl::StatusOr<size_t> Staging::per_piece(const CollectiveArgs& args, int size) const {
  const size_t e = args.elem_bytes();
  const size_t n = piece_bytes_ / (e * rows(args, size));
  if (n == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "WEFT_STAGING_BYTES=", piece_bytes_, " holds no piece of a ", size, "-rank ",
        name_of(args.kind), " of ", name_of(args.type), ": raise it to at least ",
        e * rows(args, size)));
  }
  return n;
}

absl::StatusOr<uint32_t> Staging::pieces(const CollectiveArgs& args, int size) const {
  auto n = per_piece(args, size);
  if (!n.ok()) return n.status();
  if (args.kind == CollectiveKind::kBarrier || args.count == 0) return 1;
  const size_t pieces = (args.count + *n - 1) / *n;
  if (pieces > (uint32_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat(
        name_of(args.kind), " of ", args.count, " elements takes ", pieces,
        " pieces of WEFT_STAGING_BYTES=", piece_bytes_, ": raise it"));
  }
  return static_cast<uint32_t>(pieces);
}

absl::Status Staging::queue_on(void* stream, const CollectiveArgs& args, int rank, int size,
                               uint32_t first) {
  const Queue q{true, stream};
  auto n = per_piece(args, size);
  if (!n.ok()) return n.status();
  auto count = pieces(args, size);
  if (!count.ok()) return count.status();
  using device::Word;
  // The calls before, on this stream or another, have copied their last piece out: the
  // buffers are free, and the words move forward in one order.
  if (auto s = copier_->wait_on(stream, Word::kOut, first - 1); !s.ok()) return s;
  const bool moves = args.kind != CollectiveKind::kBarrier && args.count > 0;
  const bool sends = moves && (args.kind != CollectiveKind::kBroadcast || rank == args.root);
  auto at = [&](uint32_t k) { return size_t{k} * *n; };
  auto len = [&](uint32_t k) { return std::min(*n, args.count - at(k)); };
  // Piece number p uses buffers p % 2; the stream keeps one piece ahead of the engine.
  auto bring = [&](uint32_t k) -> absl::Status {
    if (sends) {
      if (auto s = bring_in(q, args, size, at(k), len(k), in_[(first + k) % 2]); !s.ok()) return s;
    }
    return copier_->signal_on(stream, Word::kIn, first + k);
  };
  if (auto s = bring(0); !s.ok()) return s;
  for (uint32_t k = 0; k < *count; ++k) {
    // In piece k + 1 goes to the buffer piece k - 1 was read from: the stream passed that
    // piece's kDone wait above.
    if (k + 1 < *count) {
      if (auto s = bring(k + 1); !s.ok()) return s;
    }
    if (auto s = copier_->wait_on(stream, Word::kDone, first + k); !s.ok()) return s;
    if (moves) {
      if (auto s = take_out(q, args, size, at(k), len(k), out_[(first + k) % 2]); !s.ok()) return s;
    }
    if (auto s = copier_->signal_on(stream, Word::kOut, first + k); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Staging::run_queued(const CollectiveArgs& args, int rank, int size, uint32_t first,
                                 absl::FunctionRef<absl::Status(CollectiveArgs&)> run_host) {
  auto n = per_piece(args, size);
  if (!n.ok()) return n.status();
  auto count = pieces(args, size);
  if (!count.ok()) return count.status();
  using device::Word;
  const bool moves = args.kind != CollectiveKind::kBarrier && args.count > 0;
  CollectiveArgs piece = args;
  for (uint32_t k = 0; k < *count; ++k) {
    const uint32_t number = first + k;
    // Piece k is in, and (queued before it on the stream) piece k - 2 is out of out_[b].
    if (auto s = device::await_word(*copier_, Word::kIn, number, args.deadline,
                                    k == 0 ? "the work queued on the caller's stream before the call"
                                           : "the caller's stream copying a piece in");
        !s.ok()) {
      return s;
    }
    const size_t b = number % 2;
    piece.send = in_[b], piece.recv = out_[b];
    piece.count = moves ? std::min(*n, args.count - size_t{k} * *n) : 0;
    if (auto s = run_host(piece); !s.ok()) return s;
    copier_->write(Word::kDone, number);
  }
  return absl::OkStatus();
}

absl::Status Staging::run(const CollectiveArgs& args, int rank, int size, void* stream,
                          absl::FunctionRef<absl::Status(CollectiveArgs&)> run_host) {
  if (auto s = copier_->wait_for_stream(stream, args.deadline); !s.ok()) return s;
  absl::Status s = run_pieces(args, rank, size, run_host);
  // A call that failed may have left copies queued: none may touch the caller's buffers, or
  // this call's host buffers under the next call, once it returned.
  if (!s.ok()) (void)copier_->drain(Deadline::after(absl::Seconds(10)));
  return s;
}

absl::Status Staging::run_pieces(const CollectiveArgs& args, int rank, int size,
                                 absl::FunctionRef<absl::Status(CollectiveArgs&)> run_host) {
  const Queue q;  // the copier's own
  auto per = per_piece(args, size);
  if (!per.ok()) return per.status();
  const size_t per_piece = *per;
  CollectiveArgs piece = args;
  const size_t total = args.count;  // elements of each rank's block (of the vector)
  if (args.kind == CollectiveKind::kBarrier || total == 0) {
    piece.send = in_[0], piece.recv = out_[0];  // nothing moves; every rank still makes the call
    return run_host(piece);
  }
  const bool sends = args.kind != CollectiveKind::kBroadcast || rank == args.root;
  const size_t pieces = (total + per_piece - 1) / per_piece;
  auto piece_at = [&](size_t k) { return k * per_piece; };
  auto piece_len = [&](size_t k) { return std::min(per_piece, total - piece_at(k)); };
  std::array<uint64_t, 2> in_mark{}, out_mark{};
  if (sends) {
    if (auto s = bring_in(q, args, size, 0, piece_len(0), in_[0]); !s.ok()) return s;
    auto m = copier_->mark();
    if (!m.ok()) return m.status();
    in_mark[0] = *m;
  }
  for (size_t k = 0; k < pieces; ++k) {
    const size_t b = k % 2;
    // The next piece comes in while this one is reduced or moved.
    if (sends && k + 1 < pieces) {
      if (auto s = bring_in(q, args, size, piece_at(k + 1), piece_len(k + 1), in_[1 - b]); !s.ok()) return s;
      auto m = copier_->mark();
      if (!m.ok()) return m.status();
      in_mark[1 - b] = *m;
    }
    if (sends) {
      if (auto s = copier_->wait(in_mark[b], args.deadline); !s.ok()) return s;
    }
    if (k >= 2) {  // out_[b] held piece k - 2 until it went out
      if (auto s = copier_->wait(out_mark[b], args.deadline); !s.ok()) return s;
    }
    piece.send = in_[b], piece.recv = out_[b], piece.count = piece_len(k);
    if (auto s = run_host(piece); !s.ok()) return s;
    if (auto s = take_out(q, args, size, piece_at(k), piece_len(k), out_[b]); !s.ok()) return s;
    auto m = copier_->mark();
    if (!m.ok()) return m.status();
    out_mark[b] = *m;
  }
  return copier_->wait(out_mark[(pieces - 1) % 2], args.deadline);
}

}  // namespace weft
