#include "src/device/cuda_shared.hpp"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <charconv>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "src/device/shared_fd.hpp"

namespace weft::device {

struct CudaShared::Driver {
  PFN_cuMemGetAllocationGranularity_v10020 granularity = nullptr;
  PFN_cuMemCreate_v10020 create = nullptr;
  PFN_cuMemRelease_v10020 release = nullptr;
  PFN_cuMemAddressReserve_v10020 reserve = nullptr;
  PFN_cuMemAddressFree_v10020 free = nullptr;
  PFN_cuMemMap_v10020 map = nullptr;
  PFN_cuMemUnmap_v10020 unmap = nullptr;
  PFN_cuMemSetAccess_v10020 set_access = nullptr;
  PFN_cuMemExportToShareableHandle_v10020 export_handle = nullptr;
  PFN_cuMemImportFromShareableHandle_v10020 import_handle = nullptr;
};

namespace {

template <typename Fn>
bool find(const char* name, Fn& fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(name, &p, 10020, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess || p == nullptr) {
    return false;
  }
  fn = reinterpret_cast<Fn>(p);
  return true;
}

absl::Status driver_error(CUresult r, const char* what) {
  return absl::InternalError(absl::StrCat(what, " failed (CUresult ", static_cast<int>(r), ")"));
}

CUmemAllocationProp properties(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

}  // namespace

CudaShared::~CudaShared() {
  if (driver_ == nullptr) return;
  for (const Mapping& m : mappings_) unmap(*driver_, m);
}

void CudaShared::unmap(const Driver& driver, const Mapping& m) {
  driver.unmap(m.address, m.bytes);
  driver.free(m.address, m.bytes);
  driver.release(m.allocation);
  if (m.exported >= 0) {
    forget_fd(m.exported);
    close(m.exported);
  }
}

void CudaShared::release(std::byte* data) {
  const auto address = static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(data));
  for (auto it = mappings_.begin(); it != mappings_.end(); ++it) {
    if (it->address != address) continue;
    unmap(*driver_, *it);
    mappings_.erase(it);
    return;
  }
}

absl::Status CudaShared::load() {
  if (driver_ != nullptr) return absl::OkStatus();
  static const Driver* const loaded = [] {
    auto* d = new Driver;  // for the process's life, as the driver's own entry points are
    const bool all = find("cuMemGetAllocationGranularity", d->granularity) &&
                     find("cuMemCreate", d->create) && find("cuMemRelease", d->release) &&
                     find("cuMemAddressReserve", d->reserve) && find("cuMemAddressFree", d->free) &&
                     find("cuMemMap", d->map) && find("cuMemUnmap", d->unmap) &&
                     find("cuMemSetAccess", d->set_access) &&
                     find("cuMemExportToShareableHandle", d->export_handle) &&
                     find("cuMemImportFromShareableHandle", d->import_handle);
    return all ? d : nullptr;
  }();
  if (loaded == nullptr) {
    return absl::FailedPreconditionError(
        "this CUDA driver offers no virtual memory management (cuMemCreate and its kin), "
        "which cuda_ipc's windows need; update the NVIDIA driver, or set WEFT_CUDA_IPC=off");
  }
  driver_ = loaded;
  return absl::OkStatus();
}

absl::StatusOr<size_t> CudaShared::rounded(size_t bytes) {
  const CUmemAllocationProp prop = properties(device_);
  size_t granularity = 0;
  if (CUresult r = driver_->granularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
      r != CUDA_SUCCESS || granularity == 0) {
    return driver_error(r, "cuMemGetAllocationGranularity");
  }
  return (bytes + granularity - 1) / granularity * granularity;
}

absl::StatusOr<std::byte*> CudaShared::map(unsigned long long allocation, size_t bytes) {
  CUdeviceptr address = 0;
  if (CUresult r = driver_->reserve(&address, bytes, 0, 0, 0); r != CUDA_SUCCESS) {
    driver_->release(allocation);
    return driver_error(r, "cuMemAddressReserve");
  }
  if (CUresult r = driver_->map(address, bytes, 0, allocation, 0); r != CUDA_SUCCESS) {
    driver_->free(address, bytes);
    driver_->release(allocation);
    return driver_error(r, "cuMemMap");
  }
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device_;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (CUresult r = driver_->set_access(address, bytes, &access, 1); r != CUDA_SUCCESS) {
    driver_->unmap(address, bytes);
    driver_->free(address, bytes);
    driver_->release(allocation);
    return driver_error(r, "cuMemSetAccess (can this GPU reach the owner's: peer access?)");
  }
  mappings_.push_back(Mapping{address, bytes, allocation});
  return reinterpret_cast<std::byte*>(static_cast<uintptr_t>(address));
}

absl::StatusOr<std::pair<std::byte*, std::string>> CudaShared::share(size_t bytes) {
  if (absl::Status s = load(); !s.ok()) return s;
  auto size = rounded(bytes);
  if (!size.ok()) return size.status();
  const CUmemAllocationProp prop = properties(device_);
  CUmemGenericAllocationHandle allocation = 0;
  if (CUresult r = driver_->create(&allocation, *size, &prop, 0); r != CUDA_SUCCESS) {
    return driver_error(r, "cuMemCreate of cuda_ipc's window");
  }
  // Not cleared: every piece is copied in before any rank reads it, and a memset here would
  // go on the legacy default stream, ordered after the callers' blocking streams.
  auto p = map(allocation, *size);
  if (!p.ok()) return p.status();
  int fd = -1;
  if (CUresult r = driver_->export_handle(&fd, allocation, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
      r != CUDA_SUCCESS) {
    return driver_error(r, "cuMemExportToShareableHandle");
  }
  mappings_.back().exported = fd;  // map() just added it
  // The size rides with the handle: a peer's GPU may round by another granularity.
  return std::make_pair(*p, absl::StrCat(fd_handle(fd), "/", *size));
}

absl::StatusOr<std::byte*> CudaShared::open(std::string_view handle, size_t bytes) {
  if (absl::Status s = load(); !s.ok()) return s;
  const size_t slash = handle.find('/');
  size_t size = 0;
  const char* const end = handle.data() + handle.size();
  const char* const digits = slash == std::string_view::npos ? end : handle.data() + slash + 1;
  const auto [last, error] = std::from_chars(digits, end, size);
  if (slash == std::string_view::npos || error != std::errc() || last != end || size < bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", std::string(handle), "' is not a handle of ", bytes, " bytes of device memory"));
  }
  auto fd = take_fd(handle.substr(0, slash));
  if (!fd.ok()) return fd.status();
  CUmemGenericAllocationHandle allocation = 0;
  const CUresult r = driver_->import_handle(
      &allocation, reinterpret_cast<void*>(static_cast<uintptr_t>(*fd)),
      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  close(*fd);
  if (r != CUDA_SUCCESS) return driver_error(r, "cuMemImportFromShareableHandle");
  return map(allocation, size);
}

}  // namespace weft::device
