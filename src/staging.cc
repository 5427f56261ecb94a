#include "src/staging.hpp"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace weft {
namespace {

// Host rows per piece: one per rank where every rank's block takes part, else one.
size_t rows(const CollectiveArgs& args, int size) {
  return args.kind == CollectiveKind::kAllgather || args.kind == CollectiveKind::kReduceScatter
             ? static_cast<size_t>(size)
             : 1;
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

// Piece [first, first + n) of every block: into one host buffer, in rows of n elements.
absl::Status Staging::bring_in(const CollectiveArgs& args, int size, size_t first, size_t n,
                               std::byte* to) {
  const size_t e = args.elem_bytes();
  if (args.kind == CollectiveKind::kReduceScatter) {
    return copier_->copy(to, n * e, args.send + first * e, args.count * e, n * e, rows(args, size));
  }
  return copier_->copy(to, n * e, args.send + first * e, n * e, n * e, 1);
}

absl::Status Staging::take_out(const CollectiveArgs& args, int size, size_t first, size_t n,
                               const std::byte* from) {
  const size_t e = args.elem_bytes();
  if (args.kind == CollectiveKind::kAllgather) {
    return copier_->copy(args.recv + first * e, args.count * e, from, n * e, n * e, rows(args, size));
  }
  return copier_->copy(args.recv + first * e, n * e, from, n * e, n * e, 1);
}

absl::Status Staging::run(const CollectiveArgs& args, int rank, int size,
                          absl::FunctionRef<absl::Status(Deadline)> ready,
                          absl::FunctionRef<absl::Status(CollectiveArgs&)> run_host) {
  if (auto s = ready(args.deadline); !s.ok()) return s;
  absl::Status s = run_pieces(args, rank, size, run_host);
  // A call that failed may have left copies queued: none may touch the caller's buffers, or
  // this call's host buffers under the next call, once it returned.
  if (!s.ok()) (void)copier_->drain(Deadline::after(absl::Seconds(10)));
  return s;
}

absl::Status Staging::run_pieces(const CollectiveArgs& args, int rank, int size,
                                 absl::FunctionRef<absl::Status(CollectiveArgs&)> run_host) {
  const size_t e = args.elem_bytes();
  const size_t per_piece = piece_bytes_ / (e * rows(args, size));
  if (per_piece == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "WEFT_STAGING_BYTES=", piece_bytes_, " holds no piece of a ", size, "-rank ",
        name_of(args.kind), " of ", name_of(args.type), ": raise it to at least ",
        e * rows(args, size)));
  }
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
    if (auto s = bring_in(args, size, 0, piece_len(0), in_[0]); !s.ok()) return s;
    auto m = copier_->mark();
    if (!m.ok()) return m.status();
    in_mark[0] = *m;
  }
  for (size_t k = 0; k < pieces; ++k) {
    const size_t b = k % 2;
    // The next piece comes in while this one is reduced or moved.
    if (sends && k + 1 < pieces) {
      if (auto s = bring_in(args, size, piece_at(k + 1), piece_len(k + 1), in_[1 - b]); !s.ok()) return s;
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
    if (auto s = take_out(args, size, piece_at(k), piece_len(k), out_[b]); !s.ok()) return s;
    auto m = copier_->mark();
    if (!m.ok()) return m.status();
    out_mark[b] = *m;
  }
  return copier_->wait(out_mark[(pieces - 1) % 2], args.deadline);
}

}  // namespace weft
