// The host fallback for device buffers: a collective on device memory runs over any host
// path (shm, tcp, ucx) piece by piece through pinned host buffers. The pieces are pipelined:
// while the host collective runs on one piece, the copier brings the next one in and takes
// the last one out (two buffers each way). Every piece is a collective call of its own on
// host buffers, so every rank must cut the same pieces: they do, given the same
// WEFT_STAGING_BYTES (the call check refuses a mismatch, as any other).
//
// Shapes, per piece of `s` elements of each rank's block: allreduce and broadcast take s
// elements of the vector; allgather sends s elements of this rank's block and gets the s of
// every rank (copied out in rows, one per rank, into their blocks); reduce_scatter sends the
// s of every rank's block (copied in the same way) and gets s of its own.
#pragma once

#include <array>
#include <cstddef>
#include <memory>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "collectives/collective.hpp"
#include "src/device/copier.hpp"

namespace weft {

class Staging {
 public:
  /// Pins (or, standing in, allocates) four buffers of `piece_bytes` through `copier`.
  static absl::StatusOr<std::unique_ptr<Staging>> create(std::unique_ptr<device::Copier> copier,
                                                         size_t piece_bytes);

  /// Runs `args` (on device buffers, ordered after the work queued on `stream`) as pieces,
  /// each handed to `run_host` as a call on host buffers, through the copier's own queue.
  /// Returns once the results are in `args.recv`.
  absl::Status run(const CollectiveArgs& args, int rank, int size, void* stream,
                   absl::FunctionRef<absl::Status(CollectiveArgs&)> run_host);
  device::Copier& copier() { return *copier_; }

  /// How many pieces (host calls) `args` takes: at least one, as a call with nothing to move
  /// is still made by every rank. An error where a piece would hold no element.
  absl::StatusOr<uint32_t> pieces(const CollectiveArgs& args, int size) const;
  /// Elements of each rank's block in one piece (the last may hold fewer).
  absl::StatusOr<size_t> per_piece(const CollectiveArgs& args, int size) const;

  /// A call ordered on the caller's `stream` (src/engine.hpp), its pieces numbered from
  /// `first`. On the caller's thread, queues the stream's side: it waits until the calls
  /// before have left the buffers, and for each piece copies it in (then kIn), waits for the
  /// engine (kDone), and copies its results out (then kOut), keeping one piece ahead so
  /// that copies overlap the host calls. Every op goes on that stream, so the engine only
  /// waits for work queued before a stream's wait: no order CUDA cannot see.
  absl::Status queue_on(void* stream, const CollectiveArgs& args, int rank, int size,
                        uint32_t first);
  /// The engine's side of that call: for each piece, waits for kIn, runs `run_host` on it and
  /// writes kDone. On an error it stops; the caller then writes kDone for the call's last
  /// piece, so the stream goes on.
  absl::Status run_queued(const CollectiveArgs& args, int rank, int size, uint32_t first,
                          absl::FunctionRef<absl::Status(CollectiveArgs&)> run_host);

 private:
  // Where a copy is queued: the copier's own queue, or a caller's stream.
  struct Queue {
    bool on_stream = false;
    void* stream = nullptr;
  };
  Staging(std::unique_ptr<device::Copier> copier, size_t piece_bytes)
      : copier_(std::move(copier)), piece_bytes_(piece_bytes) {}
  absl::Status run_pieces(const CollectiveArgs& args, int rank, int size,
                          absl::FunctionRef<absl::Status(CollectiveArgs&)> run_host);
  absl::Status bring_in(Queue q, const CollectiveArgs& args, int size, size_t first, size_t n,
                        std::byte* to);
  absl::Status take_out(Queue q, const CollectiveArgs& args, int size, size_t first, size_t n,
                        const std::byte* from);
  absl::Status copy(Queue q, void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                    size_t width, size_t height);

  std::unique_ptr<device::Copier> copier_;
  size_t piece_bytes_;
  std::array<std::byte*, 2> in_{}, out_{};
};

}  // namespace weft
