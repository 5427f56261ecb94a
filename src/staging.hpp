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

  /// Runs `args` (on device buffers) as pieces, each handed to `run_host` as a call on host
  /// buffers, once `ready(deadline)` says the inputs are (the work queued on the caller's
  /// stream before the call ran). Returns once the results are in `args.recv`.
  absl::Status run(const CollectiveArgs& args, int rank, int size,
                   absl::FunctionRef<absl::Status(Deadline)> ready,
                   absl::FunctionRef<absl::Status(CollectiveArgs&)> run_host);
  device::Copier& copier() { return *copier_; }

 private:
  Staging(std::unique_ptr<device::Copier> copier, size_t piece_bytes)
      : copier_(std::move(copier)), piece_bytes_(piece_bytes) {}
  absl::Status run_pieces(const CollectiveArgs& args, int rank, int size,
                          absl::FunctionRef<absl::Status(CollectiveArgs&)> run_host);
  absl::Status bring_in(const CollectiveArgs& args, int size, size_t first, size_t n, std::byte* to);
  absl::Status take_out(const CollectiveArgs& args, int size, size_t first, size_t n,
                        const std::byte* from);

  std::unique_ptr<device::Copier> copier_;
  size_t piece_bytes_;
  std::array<std::byte*, 2> in_{}, out_{};
};

}  // namespace weft
