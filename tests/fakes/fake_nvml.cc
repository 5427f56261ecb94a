// A fake libnvidia-ml.so.1 for tests: exactly the NVML entry points weft's NvmlSource calls
// (src/health/nvml_api.hpp), answering from a JSON state file that tests and scripts rewrite
// (write a temporary file, rename it over) while a job runs. WEFT_FAKE_NVML_STATE names it:
//
//   {"gpus": [
//     {"bus_id": "00000000:18:00.0",
//      "ecc": {"corrected": 0, "uncorrected": 0},
//      "nvlinks": [{"active": true, "remote_bus_id": "00000000:19:00.0",
//                   "crc_flit": 0, "crc_data": 0, "replay": 0, "recovery": 0}],
//      "xids": [79, 48],
//      "nvlink_error_counter_unsupported": false}]}
//
// Every call that returns counters reads the file whole again; the GPU count is fixed by
// nvmlInit_v2, which fails (NVML_ERROR_UNKNOWN) when the file is missing or not such JSON.
// "xids" lists every XID ever raised on the GPU, in order: nvmlEventSetWait_v2 delivers
// each once per process (a cursor per GPU, reset when NVML is first initialised) and never
// waits. With "nvlink_error_counter_unsupported", nvmlDeviceGetNvLinkErrorCounter says
// NOT_SUPPORTED and the counts come only through nvmlDeviceGetFieldValues, as on newer GPUs.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/health/nvml_api.hpp"

namespace nvml = weft::health::nvml;

namespace {

struct Link {
  bool active = true;
  std::string remote_bus_id;
  std::uint64_t counters[4] = {};  // by nvmlNvLinkErrorCounter_t: replay, recovery, flit, data
};

struct Gpu {
  std::string bus_id;
  std::uint64_t ecc[2] = {};  // by nvmlMemoryErrorType_t: corrected, uncorrected
  std::vector<Link> nvlinks;
  std::vector<std::uint64_t> xids;
  bool error_counter_unsupported = false;
};

std::optional<std::vector<Gpu>> read_state() {
  // The one getenv outside src/base/env: this fake stands in for the driver's library, which
  // weft loads with dlopen and which cannot read weft's settings. WEFT_FAKE_* is declared
  // among the tooling variables there (kToolingVariables), so weft never warns of it.
  const char* path = std::getenv("WEFT_FAKE_NVML_STATE");
  if (path == nullptr) return std::nullopt;
  std::ifstream file(path);
  if (!file) return std::nullopt;
  std::stringstream text;
  text << file.rdbuf();
  try {  // nothing may throw out of a C entry point
    nlohmann::json state = nlohmann::json::parse(text.str());
    std::vector<Gpu> gpus;
    for (const auto& g : state.at("gpus")) {
      Gpu& gpu = gpus.emplace_back();
      gpu.bus_id = g.at("bus_id").get<std::string>();
      nlohmann::json ecc = g.value("ecc", nlohmann::json::object());
      gpu.ecc[nvml::kMemoryErrorCorrected] = ecc.value("corrected", std::uint64_t{0});
      gpu.ecc[nvml::kMemoryErrorUncorrected] = ecc.value("uncorrected", std::uint64_t{0});
      for (const auto& l : g.value("nvlinks", nlohmann::json::array())) {
        Link& link = gpu.nvlinks.emplace_back();
        link.active = l.value("active", true);
        link.remote_bus_id = l.value("remote_bus_id", std::string());
        link.counters[nvml::kNvlinkErrorDlReplay] = l.value("replay", std::uint64_t{0});
        link.counters[nvml::kNvlinkErrorDlRecovery] = l.value("recovery", std::uint64_t{0});
        link.counters[nvml::kNvlinkErrorDlCrcFlit] = l.value("crc_flit", std::uint64_t{0});
        link.counters[nvml::kNvlinkErrorDlCrcData] = l.value("crc_data", std::uint64_t{0});
      }
      gpu.xids = g.value("xids", std::vector<std::uint64_t>());
      gpu.error_counter_unsupported = g.value("nvlink_error_counter_unsupported", false);
    }
    return gpus;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fake nvml: %s: %s\n", path, e.what());
    return std::nullopt;
  }
}

constexpr std::size_t kMaxGpus = 64;

struct EventSet {
  std::set<std::size_t> registered;  // GPU indices
};

// All state is behind one lock: NVML may be called from any thread.
std::mutex mu;
int init_count = 0;
std::size_t device_count = 0;
char device_slots[kMaxGpus];          // a handle is the address of its GPU's slot
std::vector<std::size_t> xid_cursor;  // by GPU: how many of its "xids" were delivered
std::set<EventSet*> event_sets;

nvml::Device handle_of(std::size_t index) {
  return reinterpret_cast<nvml::Device>(&device_slots[index]);
}

std::optional<std::size_t> index_of(nvml::Device device) {
  for (std::size_t i = 0; i < device_count; ++i) {
    if (device == handle_of(i)) return i;
  }
  return std::nullopt;
}

// Checks the library is initialised and `device` is one of its handles, reads the state and
// finds the device's GPU there (gone from the file: NVML_ERROR_GPU_IS_LOST).
struct Lookup {
  nvml::Return rc = nvml::kSuccess;
  std::vector<Gpu> state;
  std::size_t index = 0;
  const Gpu& gpu() const { return state[index]; }  // when rc is NVML_SUCCESS
};

Lookup look_up(nvml::Device device) {
  Lookup found;
  std::optional<std::size_t> index = index_of(device);
  if (init_count == 0) {
    found.rc = nvml::kErrorUninitialized;
  } else if (!index) {
    found.rc = nvml::kErrorInvalidArgument;
  } else if (std::optional<std::vector<Gpu>> state = read_state(); !state) {
    found.rc = nvml::kErrorUnknown;
  } else if (*index >= state->size()) {
    found.rc = nvml::kErrorGpuIsLost;
  } else {
    found.state = std::move(*state);
    found.index = *index;
  }
  return found;
}

// A GPU without NVLinks says NOT_SUPPORTED; a link number past its last, INVALID_ARGUMENT.
nvml::Return find_link(const Lookup& found, unsigned link) {
  if (found.rc != nvml::kSuccess) return found.rc;
  if (found.gpu().nvlinks.empty()) return nvml::kErrorNotSupported;
  if (link >= found.gpu().nvlinks.size()) return nvml::kErrorInvalidArgument;
  return nvml::kSuccess;
}

void fill_pci(const std::string& bus_id, nvml::PciInfo* pci) {
  *pci = {};
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  std::sscanf(bus_id.c_str(), "%x:%x:%x.%x", &domain, &bus, &device, &function);
  pci->domain = domain;
  pci->bus = bus;
  pci->device = device;
  std::snprintf(pci->bus_id, sizeof(pci->bus_id), "%s", bus_id.c_str());
  std::snprintf(pci->bus_id_legacy, sizeof(pci->bus_id_legacy), "%04X:%02X:%02X.0", domain & 0xffff,
                bus, device);
}

// Which link counter a field id asks for, by nvmlNvLinkErrorCounter_t, and of which link.
std::optional<std::pair<int, unsigned>> decode_field(unsigned field_id, unsigned scope_id) {
  struct Range {
    unsigned first;
    int counter;
    unsigned first_link;
  };
  constexpr Range kPerLinkIds[] = {
      {nvml::kFieldNvlinkCrcFlitL0, nvml::kNvlinkErrorDlCrcFlit, 0},
      {nvml::kFieldNvlinkCrcDataL0, nvml::kNvlinkErrorDlCrcData, 0},
      {nvml::kFieldNvlinkReplayL0, nvml::kNvlinkErrorDlReplay, 0},
      {nvml::kFieldNvlinkRecoveryL0, nvml::kNvlinkErrorDlRecovery, 0},
      {nvml::kFieldNvlinkCrcFlitL6, nvml::kNvlinkErrorDlCrcFlit, 6},
      {nvml::kFieldNvlinkCrcDataL6, nvml::kNvlinkErrorDlCrcData, 6},
      {nvml::kFieldNvlinkReplayL6, nvml::kNvlinkErrorDlReplay, 6},
      {nvml::kFieldNvlinkRecoveryL6, nvml::kNvlinkErrorDlRecovery, 6},
  };
  for (const Range& r : kPerLinkIds) {
    if (field_id >= r.first && field_id < r.first + 6) {
      return std::pair{r.counter, r.first_link + (field_id - r.first)};
    }
  }
  if (field_id == nvml::kFieldNvlinkErrorDlReplay) {
    return std::pair{nvml::kNvlinkErrorDlReplay, scope_id};
  }
  if (field_id == nvml::kFieldNvlinkErrorDlRecovery) {
    return std::pair{nvml::kNvlinkErrorDlRecovery, scope_id};
  }
  return std::nullopt;
}

}  // namespace

// Built with hidden visibility (tests/fakes/CMakeLists.txt): only these are exported.
#pragma GCC visibility push(default)
extern "C" {

nvml::Return nvmlInit_v2() {
  std::lock_guard lock(mu);
  std::optional<std::vector<Gpu>> state = read_state();
  if (!state) return nvml::kErrorUnknown;
  if (init_count++ == 0) {
    device_count = std::min(state->size(), kMaxGpus);
    xid_cursor.assign(device_count, 0);
  }
  return nvml::kSuccess;
}

nvml::Return nvmlShutdown() {
  std::lock_guard lock(mu);
  if (init_count == 0) return nvml::kErrorUninitialized;
  --init_count;
  return nvml::kSuccess;
}

const char* nvmlErrorString(nvml::Return result) {
  switch (result) {
    case nvml::kSuccess: return "Success";
    case nvml::kErrorUninitialized: return "Uninitialized";
    case nvml::kErrorInvalidArgument: return "Invalid Argument";
    case nvml::kErrorNotSupported: return "Not Supported";
    case nvml::kErrorNotFound: return "Not Found";
    case nvml::kErrorTimeout: return "Timeout";
    case nvml::kErrorGpuIsLost: return "GPU is lost";
  }
  return "Unknown Error";
}

nvml::Return nvmlDeviceGetCount_v2(unsigned* count) {
  std::lock_guard lock(mu);
  if (init_count == 0) return nvml::kErrorUninitialized;
  if (count == nullptr) return nvml::kErrorInvalidArgument;
  *count = static_cast<unsigned>(device_count);
  return nvml::kSuccess;
}

nvml::Return nvmlDeviceGetHandleByIndex_v2(unsigned index, nvml::Device* device) {
  std::lock_guard lock(mu);
  if (init_count == 0) return nvml::kErrorUninitialized;
  if (device == nullptr || index >= device_count) return nvml::kErrorInvalidArgument;
  *device = handle_of(index);
  return nvml::kSuccess;
}

nvml::Return nvmlDeviceGetPciInfo_v3(nvml::Device device, nvml::PciInfo* pci) {
  std::lock_guard lock(mu);
  Lookup found = look_up(device);
  if (found.rc != nvml::kSuccess) return found.rc;
  if (pci == nullptr) return nvml::kErrorInvalidArgument;
  fill_pci(found.gpu().bus_id, pci);
  return nvml::kSuccess;
}

nvml::Return nvmlDeviceGetTotalEccErrors(nvml::Device device, int error_type, int counter_type,
                                         unsigned long long* count) {
  std::lock_guard lock(mu);
  Lookup found = look_up(device);
  if (found.rc != nvml::kSuccess) return found.rc;
  if (counter_type != nvml::kVolatileEcc) return nvml::kErrorNotSupported;  // not faked
  if (count == nullptr || error_type < 0 || error_type > 1) return nvml::kErrorInvalidArgument;
  *count = found.gpu().ecc[error_type];
  return nvml::kSuccess;
}

nvml::Return nvmlDeviceGetNvLinkState(nvml::Device device, unsigned link, int* is_active) {
  std::lock_guard lock(mu);
  Lookup found = look_up(device);
  if (nvml::Return rc = find_link(found, link); rc != nvml::kSuccess) return rc;
  if (is_active == nullptr) return nvml::kErrorInvalidArgument;
  *is_active = found.gpu().nvlinks[link].active ? nvml::kFeatureEnabled : nvml::kFeatureDisabled;
  return nvml::kSuccess;
}

nvml::Return nvmlDeviceGetNvLinkRemotePciInfo_v2(nvml::Device device, unsigned link,
                                                 nvml::PciInfo* pci) {
  std::lock_guard lock(mu);
  Lookup found = look_up(device);
  if (nvml::Return rc = find_link(found, link); rc != nvml::kSuccess) return rc;
  if (pci == nullptr) return nvml::kErrorInvalidArgument;
  fill_pci(found.gpu().nvlinks[link].remote_bus_id, pci);
  return nvml::kSuccess;
}

nvml::Return nvmlDeviceGetNvLinkErrorCounter(nvml::Device device, unsigned link, int counter,
                                             unsigned long long* value) {
  std::lock_guard lock(mu);
  Lookup found = look_up(device);
  if (nvml::Return rc = find_link(found, link); rc != nvml::kSuccess) return rc;
  if (found.gpu().error_counter_unsupported) return nvml::kErrorNotSupported;
  if (value == nullptr || counter < 0 || counter > 3) return nvml::kErrorInvalidArgument;
  *value = found.gpu().nvlinks[link].counters[counter];
  return nvml::kSuccess;
}

nvml::Return nvmlDeviceGetFieldValues(nvml::Device device, int count, nvml::FieldValue* values) {
  std::lock_guard lock(mu);
  Lookup found = look_up(device);
  if (found.rc != nvml::kSuccess) return found.rc;
  if (count < 0 || (count > 0 && values == nullptr)) return nvml::kErrorInvalidArgument;
  long long now_us = std::chrono::duration_cast<std::chrono::microseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  for (int i = 0; i < count; ++i) {
    nvml::FieldValue& field = values[i];
    field.timestamp = now_us;
    field.latency_usec = 0;
    std::optional<std::pair<int, unsigned>> what = decode_field(field.field_id, field.scope_id);
    if (!what) {
      field.nvml_return = nvml::kErrorNotSupported;
    } else if (what->second >= found.gpu().nvlinks.size()) {
      field.nvml_return = nvml::kErrorInvalidArgument;
    } else {
      field.nvml_return = nvml::kSuccess;
      field.value_type = nvml::kValueUnsignedLongLong;
      field.value.ull = found.gpu().nvlinks[what->second].counters[what->first];
    }
  }
  return nvml::kSuccess;
}

nvml::Return nvmlEventSetCreate(nvml::EventSet* set) {
  std::lock_guard lock(mu);
  if (init_count == 0) return nvml::kErrorUninitialized;
  if (set == nullptr) return nvml::kErrorInvalidArgument;
  auto* created = new EventSet;
  event_sets.insert(created);
  *set = reinterpret_cast<nvml::EventSet>(created);
  return nvml::kSuccess;
}

nvml::Return nvmlDeviceRegisterEvents(nvml::Device device, unsigned long long types,
                                      nvml::EventSet set) {
  std::lock_guard lock(mu);
  Lookup found = look_up(device);
  if (found.rc != nvml::kSuccess) return found.rc;
  auto* events = reinterpret_cast<EventSet*>(set);
  if (!event_sets.contains(events)) return nvml::kErrorInvalidArgument;
  if (types != nvml::kEventTypeXidCriticalError) return nvml::kErrorNotSupported;  // only XIDs
  events->registered.insert(found.index);
  return nvml::kSuccess;
}

nvml::Return nvmlEventSetWait_v2(nvml::EventSet set, nvml::EventData* data,
                                 unsigned /*timeout_ms*/) {
  std::lock_guard lock(mu);
  auto* events = reinterpret_cast<EventSet*>(set);
  if (init_count == 0) return nvml::kErrorUninitialized;
  if (!event_sets.contains(events) || data == nullptr) return nvml::kErrorInvalidArgument;
  std::optional<std::vector<Gpu>> state = read_state();
  if (!state) return nvml::kErrorUnknown;
  for (std::size_t index : events->registered) {
    if (index >= state->size() || xid_cursor[index] >= (*state)[index].xids.size()) continue;
    *data = {.device = handle_of(index),
             .event_type = nvml::kEventTypeXidCriticalError,
             .event_data = (*state)[index].xids[xid_cursor[index]++],
             .gpu_instance_id = 0xffffffffu,
             .compute_instance_id = 0xffffffffu};
    return nvml::kSuccess;
  }
  return nvml::kErrorTimeout;  // at once, whatever the timeout: the fake never waits
}

nvml::Return nvmlEventSetFree(nvml::EventSet set) {
  std::lock_guard lock(mu);
  auto* events = reinterpret_cast<EventSet*>(set);
  if (event_sets.erase(events) == 0) return nvml::kErrorInvalidArgument;
  delete events;
  return nvml::kSuccess;
}

}  // extern "C"
#pragma GCC visibility pop

// The definitions above must keep the signatures NvmlSource resolves them as.
#define WEFT_SAME_SIGNATURE(fn, type) static_assert(std::is_same_v<decltype(fn), nvml::type>)
WEFT_SAME_SIGNATURE(nvmlInit_v2, InitV2);
WEFT_SAME_SIGNATURE(nvmlShutdown, Shutdown);
WEFT_SAME_SIGNATURE(nvmlErrorString, ErrorString);
WEFT_SAME_SIGNATURE(nvmlDeviceGetCount_v2, DeviceGetCountV2);
WEFT_SAME_SIGNATURE(nvmlDeviceGetHandleByIndex_v2, DeviceGetHandleByIndexV2);
WEFT_SAME_SIGNATURE(nvmlDeviceGetPciInfo_v3, DeviceGetPciInfo);
WEFT_SAME_SIGNATURE(nvmlDeviceGetTotalEccErrors, DeviceGetTotalEccErrors);
WEFT_SAME_SIGNATURE(nvmlDeviceGetNvLinkState, DeviceGetNvLinkState);
WEFT_SAME_SIGNATURE(nvmlDeviceGetNvLinkRemotePciInfo_v2, DeviceGetNvLinkRemotePciInfoV2);
WEFT_SAME_SIGNATURE(nvmlDeviceGetNvLinkErrorCounter, DeviceGetNvLinkErrorCounter);
WEFT_SAME_SIGNATURE(nvmlDeviceGetFieldValues, DeviceGetFieldValues);
WEFT_SAME_SIGNATURE(nvmlEventSetCreate, EventSetCreate);
WEFT_SAME_SIGNATURE(nvmlDeviceRegisterEvents, DeviceRegisterEvents);
WEFT_SAME_SIGNATURE(nvmlEventSetWait_v2, EventSetWaitV2);
WEFT_SAME_SIGNATURE(nvmlEventSetFree, EventSetFree);
