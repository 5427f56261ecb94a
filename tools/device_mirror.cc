#include "tools/device_mirror.hpp"

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "src/base/env.hpp"
#include "src/device/copier.hpp"
#include "src/device/device.hpp"

namespace weft::tools {
namespace {

// Host memory and a StandInStream (WEFT_DEVICE_STAND_IN=on): weft stages every buffer as
// if it were a device's, so the bench runs the device path's scheduling where there is no GPU.
class StandInMirror : public DeviceMirror {
 public:
  static absl::StatusOr<std::unique_ptr<DeviceMirror>> open(size_t bytes) {
    auto m = std::make_unique<StandInMirror>();
    m->memory_.reset(static_cast<std::byte*>(std::aligned_alloc(4096, 2 * bytes)));
    if (!m->memory_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot allocate two stand-in device buffers of ", bytes, " bytes; lower -e"));
    }
    std::memset(m->memory_.get(), 0, 2 * bytes);  // faulted in here, not in a timed call
    m->send_ = m->memory_.get();
    m->recv_ = m->send_ + bytes;
    m->bytes_ = bytes;
    return std::unique_ptr<DeviceMirror>(std::move(m));
  }
  std::string describe() const override {
    return "host memory standing in for a GPU's (WEFT_DEVICE_STAND_IN=on), on a stand-in stream";
  }
  bool on_gpu() const override { return false; }
  void* stream() override { return &stream_; }
  absl::Status synchronize() override {
    stream_.synchronize();
    return absl::OkStatus();
  }

 protected:
  absl::Status copy(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }

 private:
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> memory_;
  device::StandInStream stream_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceMirror>> DeviceMirror::open(size_t bytes, int local_rank) {
  auto config = Config::from_env();
  if (!config.ok()) return config.status();
  if (config->device_stand_in) return StandInMirror::open(bytes);
  if (const auto& gpus = device::gpus(); !gpus.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--memory device needs a GPU, but ", gpus.status().message(),
        " Leave out --memory device to bench host buffers, or set ", env::kDeviceStandIn.name,
        "=on to run the device path's scheduling on host memory standing in"));
  }
  return open_gpu_mirror(bytes, local_rank, config->timeout);
}

Placement DeviceMirror::on_device(const Placement& at, Buffers& host) const {
  const auto move = [&](std::byte* p) {
    const bool in_send = p >= host.send() && p < host.send() + host.bytes();
    return in_send ? send_ + (p - host.send()) : recv_ + (p - host.recv());
  };
  return {move(at.send), move(at.recv)};
}

absl::Status DeviceMirror::upload(const Call& call, Buffers& host, int nranks) {
  // What prepare() wrote, in either buffer, lies within the call's size (the larger of its
  // input and its result).
  const size_t bytes = bytes_of(call, nranks);
  absl::Status s = copy(send_, host.send(), bytes);
  return s.ok() ? copy(recv_, host.recv(), bytes) : s;
}

absl::StatusOr<std::byte*> DeviceMirror::download(const Call& call, const std::byte* result,
                                                  Buffers& host, int nranks) {
  const bool in_send = result >= send_ && result < send_ + bytes_;
  std::byte* to = in_send ? host.send() + (result - send_) : host.recv() + (result - recv_);
  if (absl::Status s = copy(to, result, result_elements(call, nranks) * size_of(call.type)); !s.ok()) {
    return s;
  }
  return to;
}

#ifndef WEFT_HAVE_CUDA
absl::StatusOr<std::unique_ptr<DeviceMirror>> open_gpu_mirror(size_t, int, absl::Duration) {
  return absl::FailedPreconditionError("--memory device: this weft was built without CUDA");
}
#endif

}  // namespace weft::tools
