// The device side of `weft bench --memory device`: a send and a receive buffer in device
// memory, and one stream on which every call is ordered, as nccl-tests lays them out. The
// bench still writes inputs and checks results in host memory (sweep.hpp's Buffers); the
// mirror carries them across, untimed. Where there is no GPU, WEFT_DEVICE_STAND_IN=on stands
// in: host memory and a device::StandInStream, which weft then treats as a device's.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tools/sweep.hpp"

namespace weft::tools {

class DeviceMirror {
 public:
  /// Buffers of `bytes` each on this rank's GPU (local rank modulo the GPUs this process
  /// sees, which becomes the current device, as nccl-tests picks it), or standing in; an
  /// error that says what to do where neither is possible.
  static absl::StatusOr<std::unique_ptr<DeviceMirror>> open(size_t bytes, int local_rank);
  virtual ~DeviceMirror() = default;

  /// What the calls run on, for the header: "device memory of GPU 0 (NVIDIA H200)".
  virtual std::string describe() const = 0;
  /// Whether this is a real GPU's memory (a library that needs one may run).
  virtual bool on_gpu() const = 0;
  /// The stream every call is ordered on: a cudaStream_t, or a device::StandInStream*.
  virtual void* stream() = 0;
  /// Returns once everything queued on the stream has run; an error, not a hang, when a
  /// library's call on it never completes (WEFT_TIMEOUT).
  virtual absl::Status synchronize() = 0;

  /// `at` (pointers into `host`) moved to the same offsets of the device buffers.
  Placement on_device(const Placement& at, Buffers& host) const;
  /// After sweep.hpp's prepare(): a call's inputs and result area, from `host` to the device.
  absl::Status upload(const Call& call, Buffers& host, int nranks);
  /// A result the library left at `result` (device memory), copied back to the same offset
  /// of `host`; returns where it now lies in host memory.
  absl::StatusOr<std::byte*> download(const Call& call, const std::byte* result, Buffers& host,
                                      int nranks);

 protected:
  /// Copies `bytes` between host and device memory (either way); returns once done.
  virtual absl::Status copy(void* dst, const void* src, size_t bytes) = 0;
  std::byte* send_ = nullptr;
  std::byte* recv_ = nullptr;
  size_t bytes_ = 0;  ///< of each buffer
};

/// The mirror on a GPU (device_mirror_cuda.cc, built with CUDA only); open() calls it
/// unless standing in. synchronize() gives up after `timeout` (WEFT_TIMEOUT).
absl::StatusOr<std::unique_ptr<DeviceMirror>> open_gpu_mirror(size_t bytes, int local_rank,
                                                               absl::Duration timeout);

}  // namespace weft::tools
