// device.hpp for a build without CUDA: no GPU can be used, and the error says why.
#include "absl/strings/str_cat.h"
#include "src/device/copier.hpp"
#include "src/device/device.hpp"

namespace weft::device {

const CudaBuild& cuda_build() {
  static const CudaBuild b{};
  return b;
}

const absl::StatusOr<Gpus>& gpus() {
  static const absl::StatusOr<Gpus> g = absl::FailedPreconditionError(
      "this weft was built without CUDA (the CUDA toolkit was not found, or WEFT_WITH_CUDA=OFF): "
      "rebuild with the toolkit installed to use GPUs.");
  return g;
}

MemoryKind memory_kind(const void*) { return MemoryKind::kHost; }

bool either_on_device(const void*, const void*) { return false; }

absl::Status require_gpu(const char* what) {
  return absl::FailedPreconditionError(
      absl::StrCat(what, ": device memory and CUDA streams need a GPU, but ", gpus().status().message(),
                   " Pass host buffers and a NULL stream to run on the CPU."));
}

absl::Status load_kernels() { return absl::OkStatus(); }

absl::StatusOr<std::unique_ptr<Copier>> cuda_copier() {
  return require_gpu("copying device buffers to and from the host");
}

std::string describe() { return std::string(gpus().status().message()); }

}  // namespace weft::device
