// NvmlSource's NVLink half: which links this rank's GPU has, where each goes, its state and
// its four error counters. Newer GPUs answer nvmlDeviceGetNvLinkErrorCounter with
// NOT_SUPPORTED and keep the same counts as field values, so a counter refused once is read
// through nvmlDeviceGetFieldValues from then on. A failing call is logged once per GPU and
// counter (the first link it fails on), not once per link.
#include "src/health/nvml_source.hpp"

#include <array>
#include <iterator>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/health/nvml_api.hpp"

namespace weft::health {
namespace {

// The link error counters, in the order of Gpu::by_field_values: how
// nvmlDeviceGetNvLinkErrorCounter names each, and its field ids (nvml_api.hpp).
struct LinkErrorCounter {
  const char* name;
  int counter;                  // nvmlNvLinkErrorCounter_t
  unsigned field_l0, field_l6;  // links 0-5 and 6-11: one id per link from these
  unsigned field_any_link;      // links 12 and up, the link in scopeId (0: none)
};
constexpr LinkErrorCounter kLinkErrorCounters[] = {
    {.name = "nvlink_crc_flit",
     .counter = nvml::kNvlinkErrorDlCrcFlit,
     .field_l0 = nvml::kFieldNvlinkCrcFlitL0,
     .field_l6 = nvml::kFieldNvlinkCrcFlitL6,
     .field_any_link = 0},
    {.name = "nvlink_crc_data",
     .counter = nvml::kNvlinkErrorDlCrcData,
     .field_l0 = nvml::kFieldNvlinkCrcDataL0,
     .field_l6 = nvml::kFieldNvlinkCrcDataL6,
     .field_any_link = 0},
    {.name = "nvlink_replay",
     .counter = nvml::kNvlinkErrorDlReplay,
     .field_l0 = nvml::kFieldNvlinkReplayL0,
     .field_l6 = nvml::kFieldNvlinkReplayL6,
     .field_any_link = nvml::kFieldNvlinkErrorDlReplay},
    {.name = "nvlink_recovery",
     .counter = nvml::kNvlinkErrorDlRecovery,
     .field_l0 = nvml::kFieldNvlinkRecoveryL0,
     .field_l6 = nvml::kFieldNvlinkRecoveryL6,
     .field_any_link = nvml::kFieldNvlinkErrorDlRecovery},
};
constexpr int kNumLinkErrorCounters = static_cast<int>(std::size(kLinkErrorCounters));

unsigned field_id(const LinkErrorCounter& c, int link) {
  if (link < 6) return c.field_l0 + link;
  if (link < 12) return c.field_l6 + (link - 6);
  return c.field_any_link;
}

std::optional<double> field_number(const nvml::FieldValue& field) {
  switch (field.value_type) {
    case nvml::kValueDouble: return field.value.d;
    case nvml::kValueUnsignedInt: return field.value.ui;
    case nvml::kValueUnsignedLong: return field.value.ul;
    case nvml::kValueUnsignedLongLong: return field.value.ull;
    case nvml::kValueSignedLongLong: return field.value.sll;
    case nvml::kValueSignedInt: return field.value.si;
    case nvml::kValueUnsignedShort: return field.value.us;
  }
  return std::nullopt;
}

nvml::Device as_device(void* handle) { return static_cast<nvml::Device>(handle); }

}  // namespace

void NvmlSource::sample_nvlinks(int index, absl::Time now, std::vector<Sample>& out) {
  if (api_->get_nvlink_state == nullptr) return;
  nvml::Device device = as_device(gpus_[index].handle);
  for (int link = 0; link < nvml::kMaxLinks; ++link) {
    int state = nvml::kFeatureDisabled;
    nvml::Return rc = api_->get_nvlink_state(device, link, &state);
    if (rc == nvml::kErrorNotSupported || rc == nvml::kErrorInvalidArgument) continue;  // none
    if (rc != nvml::kSuccess) {  // the GPU itself is failing: the other links would fail alike
      report_once(absl::StrCat("nvlink state ", index),
                  absl::StrCat(gpu_name(index), ": nvmlDeviceGetNvLinkState"), rc);
      return;
    }
    bool active = state == nvml::kFeatureEnabled;
    std::string remote = remote_bus_id(index, link, active);
    Sample sample;
    sample.scope = {.kind = ScopeKind::kNvlink,
                    .peer = peer_of(remote),
                    .gpu = index,
                    .link = link,
                    .device = remote};
    sample.time = now;
    read_link_errors(index, link, sample.counters);
    sample.counters.push_back(
        {.name = "nvlink_down", .value = active ? 0.0 : 1.0, .kind = CounterKind::kGauge});
    out.push_back(std::move(sample));
  }
}

std::string NvmlSource::remote_bus_id(int index, int link, bool active) {
  Gpu& gpu = gpus_[index];
  if (auto it = gpu.remote_bus_id.find(link); it != gpu.remote_bus_id.end()) return it->second;
  if (api_->get_nvlink_remote_pci_info == nullptr) return "";
  nvml::PciInfo pci{};
  nvml::Return rc = api_->get_nvlink_remote_pci_info(as_device(gpu.handle), link, &pci);
  if (rc != nvml::kSuccess) {
    // A link that is down may not know its far end; that is the state, not a failure.
    if (active) {
      report_once(
          absl::StrCat("nvlink remote ", index),
          absl::StrCat(gpu_name(index), ": nvmlDeviceGetNvLinkRemotePciInfo_v2 (link ", link, ")"),
          rc);
    }
    return "";
  }
  pci.bus_id[sizeof(pci.bus_id) - 1] = '\0';
  return gpu.remote_bus_id[link] = normalize_pci_bus_id(pci.bus_id);
}

void NvmlSource::read_link_errors(int index, int link, std::vector<Counter>& counters) {
  Gpu& gpu = gpus_[index];
  static_assert(std::tuple_size_v<decltype(gpu.by_field_values)> == kNumLinkErrorCounters);
  std::vector<int> by_field_values;
  for (int i = 0; i < kNumLinkErrorCounters; ++i) {
    const LinkErrorCounter& c = kLinkErrorCounters[i];
    if (api_->get_nvlink_error_counter == nullptr || gpu.by_field_values[i]) {
      by_field_values.push_back(i);
      continue;
    }
    unsigned long long value = 0;
    nvml::Return rc =
        api_->get_nvlink_error_counter(as_device(gpu.handle), link, c.counter, &value);
    if (rc == nvml::kSuccess) {
      counters.push_back(
          {.name = c.name, .value = static_cast<double>(value), .kind = CounterKind::kCumulative});
    } else if (rc == nvml::kErrorNotSupported) {
      gpu.by_field_values[i] = true;
      by_field_values.push_back(i);
    } else {
      report_once(absl::StrCat(c.name, " ", index),
                  absl::StrCat(gpu_name(index), ": nvmlDeviceGetNvLinkErrorCounter (link ", link,
                               ", ", c.name, ")"),
                  rc);
    }
  }
  if (!by_field_values.empty()) {
    read_link_errors_by_field_values(index, link, by_field_values, counters);
  }
}

void NvmlSource::read_link_errors_by_field_values(int index, int link,
                                                  const std::vector<int>& which,
                                                  std::vector<Counter>& counters) {
  if (api_->get_field_values == nullptr) return;
  std::vector<nvml::FieldValue> fields;  // value-initialised: zeros but the two ids
  std::vector<const char*> names;
  for (int i : which) {
    unsigned id = field_id(kLinkErrorCounters[i], link);
    if (id == 0) continue;  // no field holds this count for links past 11
    // The per-link ids name the link themselves; NVML's header asks for it in scopeId too.
    nvml::FieldValue& field = fields.emplace_back();
    field.field_id = id;
    field.scope_id = static_cast<unsigned>(link);
    names.push_back(kLinkErrorCounters[i].name);
  }
  if (fields.empty()) return;
  nvml::Return rc = api_->get_field_values(as_device(gpus_[index].handle),
                                           static_cast<int>(fields.size()), fields.data());
  for (size_t i = 0; i < fields.size(); ++i) {
    std::optional<double> value;
    if (rc == nvml::kSuccess && fields[i].nvml_return == nvml::kSuccess) {
      value = field_number(fields[i]);
    }
    if (value) {
      counters.push_back({.name = names[i], .value = *value, .kind = CounterKind::kCumulative});
      continue;
    }
    report_once(absl::StrCat(names[i], " field ", index),
                absl::StrCat(gpu_name(index), ": nvmlDeviceGetFieldValues (link ", link, ", ",
                             names[i], ")"),
                rc != nvml::kSuccess ? rc : fields[i].nvml_return);
  }
}

}  // namespace weft::health
