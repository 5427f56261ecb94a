// device.hpp with the CUDA runtime (linked statically: a machine without the driver still
// loads libweft, and CUDA answers every question with an error instead).
#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "src/device/copy_unless.hpp"
#include "src/device/device.hpp"

namespace weft::device {
namespace {

std::string cuda_words(cudaError_t e) {
  return absl::StrCat(cudaGetErrorName(e), ": ", cudaGetErrorString(e));
}

absl::StatusOr<Gpus> ask_cuda() {
  Gpus g;
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    cudaGetLastError();  // not sticky, but leave nothing behind for the caller's checks
    return absl::FailedPreconditionError(absl::StrCat(
        "CUDA reports no usable GPU (", cuda_words(e),
        "); is the NVIDIA driver loaded and a GPU visible (nvidia-smi, CUDA_VISIBLE_DEVICES)?"));
  }
  if (count == 0) {
    return absl::FailedPreconditionError(
        "CUDA sees no GPU (CUDA_VISIBLE_DEVICES may hide them all)");
  }
  cudaDriverGetVersion(&g.driver_version);
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) {
      g.names.push_back("(unreadable)");
      continue;
    }
    g.names.push_back(absl::StrCat(prop.name, " (sm_", prop.major, prop.minor, ")"));
  }
  return g;
}

}  // namespace

const CudaBuild& cuda_build() {
  static const CudaBuild b{true, WEFT_CUDA_TOOLKIT, WEFT_CUDA_ARCHITECTURES};
  return b;
}

const absl::StatusOr<Gpus>& gpus() {
  static const absl::StatusOr<Gpus> g = ask_cuda();
  return g;
}

MemoryKind memory_kind(const void* p) {
  if (p == nullptr || !gpus().ok()) return MemoryKind::kHost;
  // Every collective asks this of its two buffers, and CUDA takes about a microsecond to
  // answer: the last pointers each thread asked about are kept. An address cannot change its
  // kind: with unified addressing, device allocations come from a range the driver reserves.
  struct Known {
    const void* p = nullptr;
    MemoryKind kind = MemoryKind::kHost;
  };
  thread_local Known known[4];
  thread_local unsigned next = 0;
  for (const Known& k : known) {
    if (k.p == p) return k.kind;
  }
  cudaPointerAttributes a{};
  MemoryKind kind = MemoryKind::kHost;
  if (cudaPointerGetAttributes(&a, p) == cudaSuccess) {
    if (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged) kind = MemoryKind::kDevice;
  } else {
    cudaGetLastError();
  }
  known[next++ % 4] = Known{p, kind};
  return kind;
}

bool either_on_device(const void* a, const void* b) {
  static const bool usable = gpus().ok();
  return usable &&
         (memory_kind(a) == MemoryKind::kDevice || memory_kind(b) == MemoryKind::kDevice);
}

absl::Status require_gpu(const char* what) {
  const auto& g = gpus();
  if (g.ok()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      what, ": device memory and CUDA streams need a GPU, but ", g.status().message(),
      " Pass host buffers and a NULL stream to run on the CPU."));
}

absl::Status load_kernels() {
  if (const cudaError_t e = load_copy_unless_kernels(); e != cudaSuccess) {
    return absl::FailedPreconditionError(absl::StrCat(
        "loading cuda_ipc's copy kernel: ", cudaGetErrorName(e), ": ", cudaGetErrorString(e),
        " (weft info says which GPU architectures this build has code for)"));
  }
  return absl::OkStatus();
}

std::string describe() {
  const CudaBuild& b = cuda_build();
  std::string line = absl::StrCat("CUDA ", b.toolkit, ", kernels for ", b.architectures, "; ");
  const auto& g = gpus();
  if (!g.ok()) return absl::StrCat(line, "no GPU here: ", g.status().message());
  absl::StrAppend(&line, "driver ", g->driver_version / 1000, ".", g->driver_version % 1000 / 10,
                  ", ", g->names.size(), " GPU", g->names.size() == 1 ? "" : "s", ":");
  for (size_t i = 0; i < g->names.size(); ++i) absl::StrAppend(&line, i ? "," : "", " ", g->names[i]);
  return line;
}

}  // namespace weft::device
