// The cuda_ipc path: a call ordered on a stream, between ranks of one host whose windows are
// mapped in each other's processes (transport/cuda_ipc/), moves its data GPU to GPU. The host
// only orders it: the engine runs the call check per piece, which returns once every rank has
// entered it.
//
// The caller's stream, for piece p of a call (pieces numbered across calls, as the staging
// path numbers them, and cut the same way: src/staging.hpp):
//   - copies the rank's part of the piece into its window's slot p % 2, then writes p into kIn;
//   - waits until the engine writes p into kDone;
//   - reads every rank's slot (this rank's too) into the results: copies for allgather and
//     broadcast, the GPU reduction kernels for allreduce and reduce_scatter, in rank order on
//     every rank, so that every rank's results are the same bits; then writes p into kOut;
//   - only then copies piece p + 1 in.
// The engine, for piece p: waits for kIn to reach p, runs the check, writes kDone.
//
// Why that is enough: a rank enters piece p's check once its stream has copied p in, and it
// copied p in after reading p - 1. So when the check returns, every rank's slot p % 2 holds
// piece p, and every rank has read piece p - 1 and left slot (p + 1) % 2 free for p + 1. The
// first piece of a call waits for kOut of the piece before it, on whichever stream and path
// that ran (a host call's check orders the ranks just as well), so that the order holds
// across streams too.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "collectives/collective.hpp"
#include "src/device/copier.hpp"
#include "transport/cuda_ipc/context.hpp"

namespace weft {

class IpcPath {
 public:
  /// `stand_in`: the copier stands in for the GPU (WEFT_DEVICE_STAND_IN), and the reductions
  /// run on the host, on the StandInStream. `scratch`: device memory of a slot's size,
  /// through which an input in host memory comes in (below).
  IpcPath(std::unique_ptr<transport::cuda_ipc::Context> context, device::Copier& copier,
          bool stand_in, std::byte* scratch);

  /// On the caller's thread: queues the stream's side of a call of `pieces` pieces of
  /// `per_piece` elements, numbered from `first`.
  absl::Status queue_on(void* stream, const CollectiveArgs& args, int rank, int size,
                        uint32_t first, size_t per_piece, uint32_t pieces);
  /// The engine's side of that call: for each piece, waits for kIn, runs `agree` (the call
  /// check on the host path, every rank in it) and writes kDone. On an error it stops; the
  /// engine then writes kDone for the call's last piece, so the stream goes on.
  absl::Status run_queued(const CollectiveArgs& args, uint32_t first, uint32_t pieces,
                          absl::FunctionRef<absl::Status()> agree);

 private:
  // Piece k (number p) of `args`: into this rank's slot, then out of every rank's.
  absl::Status bring_in(void* stream, const CollectiveArgs& args, int rank, int size, size_t at,
                        size_t len, uint32_t p);
  absl::Status read_out(void* stream, const CollectiveArgs& args, int rank, int size, size_t at,
                        size_t len, uint32_t p);
  absl::Status copy(void* stream, void* dst, const void* src, size_t bytes);
  // out = a op b over `count` elements, on the stream (GPU kernel, or the host standing in).
  absl::Status reduce(void* stream, void* out, const void* a, const void* b, size_t count,
                      const CollectiveArgs& args);
  absl::Status finish_average(void* stream, void* buf, size_t count, const CollectiveArgs& args,
                              int size);

  std::unique_ptr<transport::cuda_ipc::Context> context_;
  device::Copier& copier_;
  bool stand_in_;
  std::byte* scratch_;
};

}  // namespace weft
