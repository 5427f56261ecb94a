// GPU counters from NVML: ECC errors and XID events of this rank's GPU, and the error counters
// and state of each of its NVLinks, named by the rank at the far end. NVML is loaded with
// dlopen (WEFT_NVML_LIBRARY), so a machine without the NVIDIA driver builds and runs weft
// with GPU counters off; tests load a fake library driven by a state file (tests/fakes/).
// nvml_source.cc loads NVML and reads the GPU and its XIDs; nvml_nvlink.cc reads the links.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "src/health/sample.hpp"

namespace weft::health {
namespace nvml {
struct Api;  // nvml_api.hpp
}

/// "0000:18:00.0": domain (at least 4 hex digits), bus, device and function, lower case,
/// whatever NVML's spelling ("00000000:18:00.0", upper case, no domain). Text that is not a
/// PCI address comes back lower-cased, so that equal ids still compare equal; "" stays "".
std::string normalize_pci_bus_id(std::string_view bus_id);

class NvmlSource : public Source {
 public:
  /// `library_path` is what dlopen gets: "libnvidia-ml.so.1" (the default of
  /// WEFT_NVML_LIBRARY), a full path, or "none" (load nothing: open() succeeds, no GPUs).
  explicit NvmlSource(std::string library_path);
  ~NvmlSource() override;
  NvmlSource(const NvmlSource&) = delete;
  NvmlSource& operator=(const NvmlSource&) = delete;

  /// Loads NVML, initialises it, lists the GPUs and registers for their XID events. A
  /// library that is absent or does not start is an error whose message says what to do;
  /// the job goes on with GPU counters off. Call once, before set_peers() and sample().
  absl::Status open();

  /// Whether NVML is loaded and initialised (false before open(), after a failed one, or
  /// for "none").
  bool loaded() const { return initialized_; }

  /// Every GPU's PCI bus id (normalized), by NVML index.
  std::vector<std::string> gpu_bus_ids() const;

  /// `self_gpu`: the NVML index of the GPU this rank uses (-1: none; then sample() reports
  /// nothing). `bus_id_by_rank`: every rank's GPU bus id ("" for none), so that the far end of
  /// an NVLink names a rank. Other ranks on this host report their own GPUs. Call before the
  /// monitor's thread samples: the source is not locked.
  void set_peers(int self_gpu, std::vector<std::string> bus_id_by_rank);

  std::string_view name() const override { return "nvml"; }

  /// One Sample for this rank's GPU (ecc_corrected, ecc_uncorrected, xid_<N>), one for each
  /// of its NVLinks (nvlink_crc_flit, nvlink_crc_data, nvlink_replay, nvlink_recovery and the
  /// gauge nvlink_down). A call that fails leaves its counter out and is logged once.
  void sample(absl::Time now, std::vector<Sample>& out) override;

 private:
  struct Gpu {
    void* handle = nullptr;  // nvmlDevice_t
    std::string bus_id;
    // By link error counter (nvml_nvlink.cc's table): nvmlDeviceGetNvLinkErrorCounter said
    // NOT_SUPPORTED once, so the count comes from nvmlDeviceGetFieldValues from then on.
    std::array<bool, 4> by_field_values{};
    std::map<std::uint64_t, std::uint64_t> xid_counts;  // XID number -> events seen
    std::map<int, std::string> remote_bus_id;           // link -> far end, once known
  };

  void close();  // undoes open(), as far as it went
  absl::Status resolve_symbols();
  absl::Status list_gpus();
  void register_xid_events();
  void drain_xid_events();
  void sample_gpu(int index, absl::Time now, std::vector<Sample>& out);
  void sample_nvlinks(int index, absl::Time now, std::vector<Sample>& out);
  /// Appends the four link error counters of `link`, by whichever call this GPU supports.
  void read_link_errors(int index, int link, std::vector<Counter>& counters);
  /// The same, for the counters in `which`, from nvmlDeviceGetFieldValues.
  void read_link_errors_by_field_values(int index, int link, const std::vector<int>& which,
                                        std::vector<Counter>& counters);
  /// The far end of `link`, remembered once read: a link that goes down keeps its scope.
  std::string remote_bus_id(int index, int link, bool active);
  int peer_of(const std::string& bus_id) const;
  std::string gpu_name(int index) const;  // "gpu 0 (0000:18:00.0)"
  /// "<what> failed: <NVML's reason>", to stderr once per `key` for this source.
  void report_once(const std::string& key, std::string_view what, int nvml_return);
  std::string error_string(int nvml_return) const;

  std::string library_path_;
  void* library_ = nullptr;  // dlopen handle
  std::unique_ptr<nvml::Api> api_;
  bool initialized_ = false;   // nvmlInit_v2 succeeded: nvmlShutdown is owed
  void* event_set_ = nullptr;  // nvmlEventSet_t
  std::vector<Gpu> gpus_;
  int self_gpu_ = -1;
  std::map<std::string, int> rank_by_bus_id_;
  std::set<std::string> reported_;
};

}  // namespace weft::health
