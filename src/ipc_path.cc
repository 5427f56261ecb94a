#include "src/ipc_path.hpp"

#include <algorithm>

#include "collectives/reduce.hpp"
#include "collectives/reduce_device.hpp"
#include "src/device/device.hpp"

namespace weft {

using device::Word;

IpcPath::IpcPath(std::unique_ptr<transport::cuda_ipc::Context> context, device::Copier& copier,
                 bool stand_in, std::byte* scratch)
    : context_(std::move(context)), copier_(copier), stand_in_(stand_in), scratch_(scratch) {}

absl::Status IpcPath::queue_on(void* stream, const CollectiveArgs& args, int rank, int size,
                               uint32_t first, size_t per_piece, uint32_t pieces) {
  const bool moves = args.kind != CollectiveKind::kBarrier && args.count > 0;
  for (uint32_t k = 0; k < pieces; ++k) {
    const uint32_t p = first + k;
    const size_t at = size_t{k} * per_piece;
    const size_t len = moves ? std::min(per_piece, args.count - at) : 0;
    // This rank has read the piece before, on whichever stream its call was, so its check of
    // piece p says so; and every rank has read piece p - 2 out of slot p % 2 (the check of
    // piece p - 1 returned before that read).
    if (k == 0) {
      if (auto s = copier_.wait_on(stream, Word::kOut, p - 1); !s.ok()) return s;
    }
    if (moves) {
      if (auto s = bring_in(stream, args, rank, size, at, len, p); !s.ok()) return s;
    }
    if (auto s = copier_.signal_on(stream, Word::kIn, p); !s.ok()) return s;
    if (auto s = copier_.wait_on(stream, Word::kDone, p); !s.ok()) return s;
    if (moves) {
      if (auto s = read_out(stream, args, rank, size, at, len, p); !s.ok()) return s;
    }
    if (auto s = copier_.signal_on(stream, Word::kOut, p); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status IpcPath::run_queued(const CollectiveArgs& args, uint32_t first, uint32_t pieces,
                                 absl::FunctionRef<absl::Status()> agree) {
  for (uint32_t k = 0; k < pieces; ++k) {
    const uint32_t p = first + k;
    if (auto s = device::await_word(copier_, Word::kIn, p, args.deadline,
                                    k == 0 ? "the work queued on the caller's stream before the call"
                                           : "the caller's stream copying a piece in");
        !s.ok()) {
      return s;
    }
    if (auto s = agree(); !s.ok()) return s;
    copier_.write(Word::kDone, p);
  }
  return absl::OkStatus();
}

absl::Status IpcPath::bring_in(void* stream, const CollectiveArgs& args, int rank, int size,
                               size_t at, size_t len, uint32_t p) {
  if (args.kind == CollectiveKind::kBroadcast && rank != args.root) return absl::OkStatus();
  const size_t e = args.elem_bytes();
  // Reduce_scatter brings every rank's block, in rows of len elements; the others one row.
  const size_t rows = args.kind == CollectiveKind::kReduceScatter ? static_cast<size_t>(size) : 1;
  size_t src_pitch = args.kind == CollectiveKind::kReduceScatter ? args.count * e : len * e;
  const std::byte* src = args.send + at * e;
  // The copy into the slot is a kernel that skips it once this rank failed (kStop): a peer
  // may still read the slot. A kernel cannot read pageable host memory, so an input there
  // comes in through the scratch buffer first, with a plain copy.
  if (!stand_in_ && device::memory_kind(src) != device::MemoryKind::kDevice) {
    if (auto s = copier_.copy_on(stream, scratch_, len * e, src, src_pitch, len * e, rows); !s.ok()) {
      return s;
    }
    src = scratch_;
    src_pitch = len * e;
  }
  return copier_.copy_unless_stopped_on(stream, context_->pair(rank).slot(p), len * e, src,
                                        src_pitch, len * e, rows);
}

absl::Status IpcPath::read_out(void* stream, const CollectiveArgs& args, int rank, int size,
                               size_t at, size_t len, uint32_t p) {
  const size_t e = args.elem_bytes();
  auto slot = [&](int r) { return context_->pair(r).slot(p); };
  switch (args.kind) {
    case CollectiveKind::kAllgather:
      for (int r = 0; r < size; ++r) {
        if (auto s = copy(stream, args.recv + (r * args.count + at) * e, slot(r), len * e); !s.ok()) {
          return s;
        }
      }
      return absl::OkStatus();
    case CollectiveKind::kBroadcast:
      return copy(stream, args.recv + at * e, slot(args.root), len * e);
    case CollectiveKind::kAllreduce:
    case CollectiveKind::kReduceScatter: {
      // Allreduce reads the whole piece of every slot; reduce_scatter the row of this rank.
      const size_t row = args.kind == CollectiveKind::kReduceScatter ? rank * len * e : 0;
      std::byte* out = args.recv + at * e;
      if (size == 1) return copy(stream, out, slot(0) + row, len * e);
      for (int r = 1; r < size; ++r) {
        const std::byte* a = r == 1 ? slot(0) + row : out;
        if (auto s = reduce(stream, out, a, slot(r) + row, len, args); !s.ok()) return s;
      }
      if (args.op == ReduceOp::kAvg) return finish_average(stream, out, len, args, size);
      return absl::OkStatus();
    }
    case CollectiveKind::kBarrier:
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::Status IpcPath::copy(void* stream, void* dst, const void* src, size_t bytes) {
  return copier_.copy_on(stream, dst, bytes, src, bytes, bytes, 1);
}

absl::Status IpcPath::reduce(void* stream, void* out, const void* a, const void* b, size_t count,
                             const CollectiveArgs& args) {
  if (!stand_in_) return reduce_on_device(out, a, b, count, args.type, args.op, stream);
  const ReduceFn fn = reduce_fn(args.type, args.op);
  static_cast<device::StandInStream*>(stream)->enqueue([=] { fn(out, a, b, count); });
  return absl::OkStatus();
}

absl::Status IpcPath::finish_average(void* stream, void* buf, size_t count,
                                     const CollectiveArgs& args, int size) {
  if (!stand_in_) return finish_average_on_device(buf, count, args.type, size, stream);
  const DataType type = args.type;
  static_cast<device::StandInStream*>(stream)->enqueue(
      [=] { weft::finish_average(buf, count, type, size); });
  return absl::OkStatus();
}

}  // namespace weft
