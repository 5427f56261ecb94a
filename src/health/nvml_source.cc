#include "src/health/nvml_source.hpp"

#include <dlfcn.h>

#include <cstdio>
#include <optional>
#include <type_traits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "src/health/nvml_api.hpp"

namespace weft::health {
namespace {

using nvml::Device;
using nvml::EventSet;
using nvml::Return;

// nvmlEventSetWait_v2 with a 0 ms timeout returns at once; this bounds one sample's drain.
constexpr int kMaxEventsPerSample = 1024;

std::optional<unsigned> parse_hex(absl::string_view text, unsigned max) {
  if (text.empty() || text.size() > 8) return std::nullopt;
  unsigned value = 0;
  for (char c : text) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return std::nullopt;
    value = value * 16 + (absl::ascii_isdigit(c) ? c - '0' : absl::ascii_tolower(c) - 'a' + 10);
  }
  if (value > max) return std::nullopt;
  return value;
}

Device as_device(void* handle) { return static_cast<Device>(handle); }

}  // namespace

std::string normalize_pci_bus_id(std::string_view text) {
  absl::string_view bus_id =
      absl::StripAsciiWhitespace(absl::string_view(text.data(), text.size()));
  std::vector<absl::string_view> parts = absl::StrSplit(bus_id, ':');
  if (parts.size() == 2) parts.insert(parts.begin(), "0");
  if (parts.size() == 3) {
    std::pair<absl::string_view, absl::string_view> dev_fn = absl::StrSplit(parts[2], '.');
    if (dev_fn.second.empty()) dev_fn.second = "0";
    auto domain = parse_hex(parts[0], 0xffffffffu);
    auto bus = parse_hex(parts[1], 0xff);
    auto device = parse_hex(dev_fn.first, 0x1f);
    auto function = parse_hex(dev_fn.second, 0x7);
    if (domain && bus && device && function) {
      return absl::StrFormat("%04x:%02x:%02x.%x", *domain, *bus, *device, *function);
    }
  }
  return absl::AsciiStrToLower(bus_id);
}

NvmlSource::NvmlSource(std::string library_path)
    : library_path_(std::move(library_path)), api_(std::make_unique<nvml::Api>()) {}

NvmlSource::~NvmlSource() { close(); }

void NvmlSource::close() {
  if (event_set_ != nullptr && api_->event_set_free != nullptr) {
    api_->event_set_free(static_cast<EventSet>(event_set_));
  }
  event_set_ = nullptr;
  if (initialized_) api_->shutdown();
  initialized_ = false;
  if (library_ != nullptr) dlclose(library_);
  library_ = nullptr;
  gpus_.clear();
}

absl::Status NvmlSource::open() {
  if (library_path_ == "none") return absl::OkStatus();
  if (library_ != nullptr) return absl::FailedPreconditionError("NVML is already open");
  dlerror();  // clear any earlier error
  library_ = dlopen(library_path_.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library_ == nullptr) {
    const char* error = dlerror();
    std::string reason = error != nullptr ? error : "dlopen failed";
    if (reason.find(library_path_) == std::string::npos) {
      reason = absl::StrCat(library_path_, ": ", reason);
    }
    return absl::NotFoundError(absl::StrCat("NVML not loaded (", reason,
                                            "); GPU counters are off; set WEFT_NVML_LIBRARY "
                                            "to its path, or to none"));
  }
  absl::Status status = resolve_symbols();
  if (status.ok()) {
    Return rc = api_->init();
    if (rc == nvml::kSuccess) {
      initialized_ = true;
      status = list_gpus();
    } else {
      status = absl::UnavailableError(
          absl::StrCat("NVML (", library_path_, ") did not start: nvmlInit_v2: ", error_string(rc),
                       "; GPU counters are off"));
    }
  }
  if (!status.ok()) {
    close();
    return status;
  }
  register_xid_events();
  return absl::OkStatus();
}

absl::Status NvmlSource::resolve_symbols() {
  std::vector<std::string> missing;
  auto resolve = [&](const char* symbol, auto& fn) {
    using Fn = std::remove_reference_t<decltype(fn)>;
    fn = reinterpret_cast<Fn>(dlsym(library_, symbol));
    if (fn == nullptr) missing.push_back(symbol);
  };
  resolve("nvmlInit_v2", api_->init);
  resolve("nvmlShutdown", api_->shutdown);
  resolve("nvmlDeviceGetCount_v2", api_->get_count);
  resolve("nvmlDeviceGetHandleByIndex_v2", api_->get_handle_by_index);
  resolve("nvmlDeviceGetPciInfo_v3", api_->get_pci_info);
  if (api_->get_pci_info == nullptr) {
    missing.pop_back();  // the original call will do
    resolve("nvmlDeviceGetPciInfo", api_->get_pci_info_v1);
  }
  if (!missing.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        library_path_, " is not a usable NVML: it lacks ", absl::StrJoin(missing, ", "),
        "; GPU counters are off; set WEFT_NVML_LIBRARY to the driver's "
        "libnvidia-ml.so.1"));
  }
  // The rest is optional: each one missing turns off only what it reads.
  resolve("nvmlErrorString", api_->error_string);
  resolve("nvmlDeviceGetTotalEccErrors", api_->get_total_ecc_errors);
  resolve("nvmlDeviceGetNvLinkState", api_->get_nvlink_state);
  resolve("nvmlDeviceGetNvLinkRemotePciInfo_v2", api_->get_nvlink_remote_pci_info);
  resolve("nvmlDeviceGetNvLinkErrorCounter", api_->get_nvlink_error_counter);
  resolve("nvmlDeviceGetFieldValues", api_->get_field_values);
  resolve("nvmlEventSetCreate", api_->event_set_create);
  resolve("nvmlDeviceRegisterEvents", api_->register_events);
  resolve("nvmlEventSetWait_v2", api_->event_set_wait);
  resolve("nvmlEventSetFree", api_->event_set_free);
  if (!missing.empty()) {
    std::fprintf(stderr, "weft: health: nvml: %s lacks %s; the counters they read are off\n",
                 library_path_.c_str(), absl::StrJoin(missing, ", ").c_str());
  }
  return absl::OkStatus();
}

absl::Status NvmlSource::list_gpus() {
  unsigned count = 0;
  if (Return rc = api_->get_count(&count); rc != nvml::kSuccess) {
    return absl::UnavailableError(absl::StrCat("NVML (", library_path_,
                                               "): nvmlDeviceGetCount_v2: ", error_string(rc),
                                               "; GPU counters are off"));
  }
  gpus_.resize(count);
  for (unsigned i = 0; i < count; ++i) {
    Gpu& gpu = gpus_[i];
    Device device = nullptr;
    if (Return rc = api_->get_handle_by_index(i, &device); rc != nvml::kSuccess) {
      report_once(absl::StrCat("handle ", i),
                  absl::StrCat("gpu ", i, ": nvmlDeviceGetHandleByIndex_v2"), rc);
      continue;  // keeps NVML's numbering; a GPU without a handle reports nothing
    }
    gpu.handle = device;
    nvml::PciInfo pci{};
    Return rc = api_->get_pci_info != nullptr ? api_->get_pci_info(device, &pci)
                                              : api_->get_pci_info_v1(device, &pci);
    if (rc != nvml::kSuccess) {
      report_once(absl::StrCat("pci ", i), absl::StrCat("gpu ", i, ": nvmlDeviceGetPciInfo"), rc);
      continue;
    }
    pci.bus_id[sizeof(pci.bus_id) - 1] = '\0';
    pci.bus_id_legacy[sizeof(pci.bus_id_legacy) - 1] = '\0';
    gpu.bus_id =
        normalize_pci_bus_id(api_->get_pci_info != nullptr ? pci.bus_id : pci.bus_id_legacy);
  }
  return absl::OkStatus();
}

std::vector<std::string> NvmlSource::gpu_bus_ids() const {
  std::vector<std::string> ids;
  for (const Gpu& gpu : gpus_) ids.push_back(gpu.bus_id);
  return ids;
}

void NvmlSource::set_peers(int self_gpu, std::vector<std::string> bus_id_by_rank) {
  self_gpu_ = self_gpu;
  rank_by_bus_id_.clear();
  for (int rank = 0; rank < static_cast<int>(bus_id_by_rank.size()); ++rank) {
    std::string bus_id = normalize_pci_bus_id(bus_id_by_rank[rank]);
    // Two ranks on one GPU: the far end of a link names the first of them.
    if (!bus_id.empty()) rank_by_bus_id_.emplace(std::move(bus_id), rank);
  }
}

int NvmlSource::peer_of(const std::string& bus_id) const {
  auto it = rank_by_bus_id_.find(bus_id);
  return it == rank_by_bus_id_.end() ? -1 : it->second;
}

void NvmlSource::report_once(const std::string& key, std::string_view what, int nvml_return) {
  if (!reported_.insert(key).second) return;
  std::fprintf(stderr, "weft: health: nvml: %.*s failed: %s; left out of the counters\n",
               static_cast<int>(what.size()), what.data(), error_string(nvml_return).c_str());
}

std::string NvmlSource::error_string(int nvml_return) const {
  const char* text = api_->error_string != nullptr ? api_->error_string(nvml_return) : nullptr;
  return text != nullptr ? absl::StrCat(text, " (", nvml_return, ")")
                         : absl::StrCat("NVML error ", nvml_return);
}

void NvmlSource::register_xid_events() {
  if (api_->event_set_create == nullptr || api_->register_events == nullptr ||
      api_->event_set_wait == nullptr || api_->event_set_free == nullptr) {
    return;
  }
  EventSet set = nullptr;
  if (Return rc = api_->event_set_create(&set); rc != nvml::kSuccess) {
    report_once("event set", "nvmlEventSetCreate (XID events)", rc);
    return;
  }
  event_set_ = set;
  // Every GPU, because set_peers() (which names this rank's) comes later; the others' events
  // are counted and never reported.
  for (int i = 0; i < static_cast<int>(gpus_.size()); ++i) {
    Gpu& gpu = gpus_[i];
    if (gpu.handle == nullptr) continue;
    Return rc = api_->register_events(as_device(gpu.handle), nvml::kEventTypeXidCriticalError, set);
    if (rc != nvml::kSuccess) {
      report_once(absl::StrCat("xid ", i),
                  absl::StrCat(gpu_name(i), ": nvmlDeviceRegisterEvents (XID)"), rc);
    }
  }
}

void NvmlSource::drain_xid_events() {
  if (event_set_ == nullptr) return;
  for (int n = 0; n < kMaxEventsPerSample; ++n) {
    nvml::EventData event{};
    Return rc = api_->event_set_wait(static_cast<EventSet>(event_set_), &event, 0);
    if (rc == nvml::kErrorTimeout) return;  // none pending
    if (rc != nvml::kSuccess) {
      report_once("event wait", "nvmlEventSetWait_v2 (XID events)", rc);
      return;
    }
    if ((event.event_type & nvml::kEventTypeXidCriticalError) == 0) continue;
    for (Gpu& gpu : gpus_) {
      if (gpu.handle != nullptr && gpu.handle == event.device) ++gpu.xid_counts[event.event_data];
    }
  }
}

std::string NvmlSource::gpu_name(int index) const {
  Scope scope{.kind = ScopeKind::kGpu, .gpu = index, .device = gpus_[index].bus_id};
  return scope.name();
}

void NvmlSource::sample(absl::Time now, std::vector<Sample>& out) {
  if (!initialized_ || self_gpu_ < 0 || self_gpu_ >= static_cast<int>(gpus_.size()) ||
      gpus_[self_gpu_].handle == nullptr) {
    return;
  }
  drain_xid_events();
  sample_gpu(self_gpu_, now, out);
  sample_nvlinks(self_gpu_, now, out);
}

void NvmlSource::sample_gpu(int index, absl::Time now, std::vector<Sample>& out) {
  Gpu& gpu = gpus_[index];
  Sample sample;
  sample.scope = {.kind = ScopeKind::kGpu, .gpu = index, .device = gpu.bus_id};
  sample.time = now;
  constexpr std::pair<const char*, int> kEcc[] = {
      {"ecc_corrected", nvml::kMemoryErrorCorrected},
      {"ecc_uncorrected", nvml::kMemoryErrorUncorrected}};
  for (const auto& [name, type] : kEcc) {
    if (api_->get_total_ecc_errors == nullptr) break;
    unsigned long long count = 0;
    Return rc = api_->get_total_ecc_errors(as_device(gpu.handle), type, nvml::kVolatileEcc, &count);
    if (rc == nvml::kSuccess) {
      sample.counters.push_back(
          {.name = name, .value = static_cast<double>(count), .kind = CounterKind::kCumulative});
    } else {
      report_once(absl::StrCat(name, " ", index),
                  absl::StrCat(gpu_name(index), ": nvmlDeviceGetTotalEccErrors (", name, ")"), rc);
    }
  }
  for (const auto& [xid, count] : gpu.xid_counts) {
    sample.counters.push_back({.name = absl::StrCat("xid_", xid),
                               .value = static_cast<double>(count),
                               .kind = CounterKind::kCumulative,
                               .counted_here = true});
  }
  out.push_back(std::move(sample));
}

}  // namespace weft::health
