// Every WEFT_* environment variable, declared once with its default and meaning.
// No other file calls getenv: launcher variables (OMPI_*, SLURM_*) are read through
// read_env() too, so tests can substitute the environment.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace weft {

// C strings rather than std::string_view: this Abseil's StrCat does not take std::string_view.
struct EnvVar {
  const char* name;
  const char* default_value;  ///< empty: unset by default
  const char* help;
  /// Byte settings: the accepted range (max_bytes 0: not a byte setting), checked when a
  /// communicator is created, and what a value costs (for the error that refuses one).
  uint64_t min_bytes = 0;
  uint64_t max_bytes = 0;
  const char* cost = "";
};

namespace env {
inline constexpr EnvVar kRank{"WEFT_RANK", "", "this process's rank when no launcher sets one"};
inline constexpr EnvVar kSize{"WEFT_SIZE", "", "number of ranks when no launcher sets one"};
inline constexpr EnvVar kLocalRank{"WEFT_LOCAL_RANK", "",
                                   "rank among this host's ranks (default: from the launcher)"};
inline constexpr EnvVar kCoordinator{
    "WEFT_COORDINATOR", "", "host:port of the rendezvous that rank 0 serves (create_from_env)"};
inline constexpr EnvVar kSocketIfname{
    "WEFT_SOCKET_IFNAME", "",
    "network interfaces (rails) for tcp, comma-separated, e.g. eth0,eth1; an entry that names "
    "no interface is a prefix (eth: eth0, eth1, ...). tcp links stripe over the rails both "
    "ends have; the bootstrap uses the first. Leave a rail out to stop using it on this host "
    "(default: the first non-loopback interface up; rank 0 serves WEFT_COORDINATOR on the "
    "local address its host name resolves to)"};
inline constexpr EnvVar kJobSecret{
    "WEFT_JOB_SECRET", "",
    "text every rank of the job shares; connections prove they know it (unset: the unique "
    "id's random secret; with WEFT_COORDINATOR, the launcher's own per-job key when mpirun "
    "gives one, else WEFT_JOB_SECRET_FILE's)"};
inline constexpr EnvVar kJobSecretFile{
    "WEFT_JOB_SECRET_FILE", "~/.weft/job_secret",
    "where ranks that meet through WEFT_COORDINATOR, with neither WEFT_JOB_SECRET nor a "
    "launcher's key, find their secret: made with a random one on first use, readable by "
    "this user alone; every host of the job must see the same file (a shared home does)"};
inline constexpr EnvVar kTransport{"WEFT_TRANSPORT", "auto",
                                   "force one transport for every link: auto, shm, tcp or ucx (auto: shm within a host; between hosts ucx where the host has an RDMA device, else tcp)"};
inline constexpr EnvVar kTimeout{"WEFT_TIMEOUT", "300",
                                 "seconds any wait may take before the call fails"};
inline constexpr EnvVar kAlgorithm{
    "WEFT_ALGORITHM", "",
    "force algorithms by collective, e.g. allreduce=ring,broadcast=chain (see weft info)"};
inline constexpr EnvVar kSmallMessageBytes{
    "WEFT_SMALL_MESSAGE_BYTES", "65536",
    "calls at or below this many bytes use the latency-optimal algorithms (recursive doubling)",
    0, uint64_t{1} << 30, "a size threshold; it takes no memory"};
inline constexpr EnvVar kShmRingBytes{
    "WEFT_SHM_RING_BYTES", "1048576",
    "bytes of each one-way shared-memory ring (rounded down to a power of two)",
    uint64_t{64} << 10, uint64_t{256} << 20,
    "each shm link maps two rings of this size in /dev/shm, touched at once"};
inline constexpr EnvVar kShmSingleCopyBytes{
    "WEFT_SHM_SINGLE_COPY_BYTES", "auto",
    "shm sends of at least this many bytes are read by the peer straight from the sender's "
    "buffer (process_vm_readv) instead of through the ring, as are those of 64 KiB or more "
    "while copies that large into the ring run slow; 0 turns that off; auto: 8192 while "
    "every rank has a core of its own and one such read beats two memcpys on this machine "
    "(measured once), only the slow ones where it does not, and none when ranks share cores",
    0, uint64_t{1} << 30, "a size threshold; it takes no memory"};
inline constexpr EnvVar kRelayBytes{
    "WEFT_RELAY_BYTES", "4194304",
    "bytes of the per-communicator buffer that carries partial reductions between links",
    uint64_t{4} << 10, uint64_t{1} << 30,
    "every communicator allocates and touches this much memory"};
inline constexpr EnvVar kStagingBytes{
    "WEFT_STAGING_BYTES", "4194304",
    "bytes of each of the four pinned host buffers through which device buffers cross a host "
    "path, piece by piece (allocated at a communicator's first call on device buffers; every "
    "rank must use the same value)",
    uint64_t{4} << 10, uint64_t{1} << 30,
    "a communicator that moves device buffers over a host path pins four times this much"};
inline constexpr EnvVar kDeviceStandIn{
    "WEFT_DEVICE_STAND_IN", "off",
    "on: every collective treats its buffers as device memory and stages them through host "
    "buffers, with host copies on a thread standing in for CUDA's (tests the host fallback "
    "for device buffers where there is no GPU)"};
inline constexpr EnvVar kCudaIpc{
    "WEFT_CUDA_IPC", "on",
    "on: calls ordered on a stream between ranks of one host move their data GPU to GPU "
    "through windows each rank maps of the others' (transport/cuda_ipc; standing in, host "
    "memory); off, or where a window cannot be mapped, they stage through the host path"};
inline constexpr EnvVar kHealth{
    "WEFT_HEALTH", "on",
    "on: a monitor thread per communicator reads every link's error counters (tcp, the "
    "transports' own, NVML, InfiniBand) and judges each link, rail, GPU and port; off: none"};
inline constexpr EnvVar kHealthIntervalMs{
    "WEFT_HEALTH_INTERVAL_MS", "500", "milliseconds between two readings of the counters (10..60000)"};
inline constexpr EnvVar kHealthWindow{
    "WEFT_HEALTH_WINDOW", "5",
    "seconds over which the health policy takes a counter's delta or rate (default window of "
    "every rule that names none)"};
inline constexpr EnvVar kHealthRecover{
    "WEFT_HEALTH_RECOVER", "10",
    "seconds a link must stay below a threshold before its state steps back down (hysteresis)"};
inline constexpr EnvVar kHealthThresholds{
    "WEFT_HEALTH_THRESHOLDS", "",
    "override health rules, comma-separated COUNTER=SUSPECT/FAILING[/WINDOW_S], a threshold "
    "'-' for none, e.g. tcp_retransmits=0.02/0.05,nvlink_replay=-/1 (weft info lists the rules)"};
inline constexpr EnvVar kHealthPolicy{
    "WEFT_HEALTH_POLICY", "",
    "a JSON policy file read before WEFT_HEALTH_THRESHOLDS: {\"window_s\": 5, \"recover_s\": "
    "10, \"rules\": {\"nvlink_replay\": {\"measure\": \"delta\", \"suspect\": null, "
    "\"failing\": 1}}} (docs/HEALTH.md)"};
inline constexpr EnvVar kHealthStallFraction{
    "WEFT_HEALTH_STALL_FRACTION", "0.05",
    "a wait on a link that sees no byte move for this fraction of WEFT_TIMEOUT counts one "
    "stall against the link (0 < f <= 1)"};
inline constexpr EnvVar kHealthLog{
    "WEFT_HEALTH_LOG", "stderr",
    "where each health state change goes as one JSON line: stderr, off, or a file (appended; "
    "%r becomes the rank)"};
inline constexpr EnvVar kIsolate{
    "WEFT_ISOLATE", "on",
    "on: a link that health judges FAILING is taken out of use on every rank at the next "
    "collective and the ring reroutes around it (docs/HEALTH.md); off: it only shows as FAILING"};
inline constexpr EnvVar kRelayPaths{
    "WEFT_RELAY_PATHS", "on",
    "on: a tcp link whose every path times out (a partition) waits up to 4 x "
    "WEFT_PATH_TIMEOUT_MS for a path through a third rank and carries on over it "
    "(docs/LINKS.md); off: it fails the call"};
inline constexpr EnvVar kIsolateQuiet{
    "WEFT_ISOLATE_QUIET", "30",
    "seconds an isolated link stays out of use before it returns on probation (for "
    "WEFT_HEALTH_RECOVER seconds: FAILING again isolates it again)"};
inline constexpr EnvVar kHealthEndpoint{
    "WEFT_HEALTH_ENDPOINT", "",
    "serve each rank's link states and counters over HTTP on WEFT_HEALTH_ENDPOINT_ADDRESS "
    "(127.0.0.1), port PORT plus the local rank: /health and /route (JSON), /metrics "
    "(Prometheus text); empty: no endpoint"};
inline constexpr EnvVar kHealthEndpointAddress{
    "WEFT_HEALTH_ENDPOINT_ADDRESS", "127.0.0.1",
    "the address the health endpoint listens on; another host's weft health --hostfile "
    "reads it there (0.0.0.0: every interface). Nothing authenticates the reader: keep it "
    "on a management network"};
inline constexpr EnvVar kNvmlLibrary{
    "WEFT_NVML_LIBRARY", "libnvidia-ml.so.1",
    "the NVML library the health monitor loads (dlopen) for GPU ECC, NVLink and XID counters; "
    "none: do not load one"};
inline constexpr EnvVar kIbSysfsRoot{
    "WEFT_IB_SYSFS_ROOT", "/sys",
    "the sysfs root the health monitor reads InfiniBand ports and counters under "
    "(class/infiniband/<dev>/ports/<p>/)"};
inline constexpr EnvVar kChecksum{
    "WEFT_CHECKSUM", "0",
    "1: every tcp data frame carries a CRC32C that the receiver checks before it hands a byte "
    "over; a mismatch is counted and the bytes are sent again (docs/LINKS.md)"};
inline constexpr EnvVar kSocketsPerRail{
    "WEFT_SOCKETS_PER_RAIL", "1",
    "tcp paths a link opens per rail (1-4; each a data and a control socket): more sockets "
    "to stripe over, and others to move to when one breaks (16 paths a link at most)"};
inline constexpr EnvVar kPathTimeoutMs{
    "WEFT_PATH_TIMEOUT_MS", "5000",
    "a tcp path whose sent bytes go unacknowledged this long (or an idle one that stops "
    "answering keepalive probes) is dead, and its link moves to another path; at most half "
    "of WEFT_TIMEOUT"};
/// The bytes of a tcp frame header, which WEFT_INJECT_PATH_KILL's +hN counts in
/// (transport/tcp/frame.hpp asserts that the two agree).
inline constexpr int kFaultFrameHeaderBytes = 40;
inline constexpr EnvVar kInjectPathKill{
    "WEFT_INJECT_PATH_KILL", "",
    "fault injection: RANK>PEER@BYTE kills the path that carries byte BYTE of RANK's stream "
    "to PEER just before sending it; RANK>PEER@BYTE+hN after N bytes of the header of the "
    "frame that starts there"};
inline constexpr EnvVar kInjectCorrupt{
    "WEFT_INJECT_CORRUPT", "",
    "fault injection: RATE[@RANK-PEER,...] flips a bit in each byte RANK receives from PEER "
    "over tcp with probability RATE, after the sender's checksum and before the receiver's "
    "check (no list: every link)"};
inline constexpr EnvVar kInjectFile{
    "WEFT_INJECT_FILE", "",
    "fault injection: a file of faults the job re-reads while it runs (src/inject_file.hpp; "
    "the virtual cluster's hosts set it for scripts/inject corrupt)"};
}  // namespace env

/// Names that weft's scripts, tests and virtual cluster read, not the library: never
/// reported as unknown. A trailing '*' is a prefix.
inline constexpr const char* kToolingVariables[] = {
    "WEFT_BUILD_DIR",   // scripts/build, scripts/test: the build folder
    "WEFT_SANITIZERS",  // scripts/test: 0 skips the sanitizer stages
    "WEFT_PYTORCH",     // scripts/test: 0 skips the PyTorch backend and its tests
    "WEFT_FAULT_*",     // tests/unit/fault_*: what a fault test's rank does
    "WEFT_VCLUSTER*",   // cluster/vcluster: which cluster, and each host's rails
    "WEFT_FAKE_*",      // tests/fakes/: the fake NVML library's state file
};

/// For every WEFT_* name in `names` that neither weft nor its tooling reads, one warning:
/// the name and, when one is close, the known name it was probably meant to be.
std::vector<std::string> unknown_env_warnings(const std::vector<std::string>& names);

/// Prints unknown_env_warnings() for this process's environment to stderr, once per process.
void warn_about_unknown_env();

/// Every variable above, in the order `weft info` prints them.
const std::vector<const EnvVar*>& all_env_vars();

/// Looks a variable up by name; the default is the process environment.
using EnvLookup = std::function<std::optional<std::string>(std::string_view)>;
std::optional<std::string> read_env(std::string_view name);

/// The variable's value, or its default when unset or empty.
std::string env_value(const EnvVar& var, const EnvLookup& lookup = read_env);

/// Run-time settings that come from the environment, read once per communicator.
struct Config {
  std::string transport;  ///< "auto", "shm", "tcp" or "ucx"
  absl::Duration timeout;
  std::string algorithm;  ///< WEFT_ALGORITHM as given
  size_t small_message_bytes;
  size_t shm_ring_bytes;
  std::optional<size_t> shm_single_copy_bytes;  ///< 0: never; unset: auto
  size_t relay_bytes;
  size_t staging_bytes;
  bool device_stand_in = false;
  bool cuda_ipc = true;  ///< WEFT_CUDA_IPC
  std::string socket_ifname;
  // The health monitor (src/health/): raw policy text is parsed there.
  bool health = true;
  absl::Duration health_interval;
  absl::Duration health_window;
  absl::Duration health_recover;
  bool isolate = true;
  bool relay_paths = true;
  absl::Duration isolate_quiet;
  double health_stall_fraction = 0;
  std::string health_thresholds;
  std::string health_policy_file;
  std::string health_log;
  int health_endpoint_port = 0;  ///< 0: no endpoint
  std::string health_endpoint_address = "127.0.0.1";  ///< where it listens
  std::string nvml_library;      ///< "none": do not load NVML
  std::string ib_sysfs_root;
  // Links that outlive their paths (transport/tcp).
  bool checksum = false;
  int path_timeout_ms = 5000;
  int sockets_per_rail = 1;
  struct PathKill {
    int rank = -1, peer = -1;
    uint64_t at = 0;
    int header_bytes = -1;
  };
  std::optional<PathKill> inject_path_kill;
  double inject_corrupt_rate = 0;
  std::vector<std::pair<int, int>> inject_corrupt_links;  ///< (receiving rank, peer); empty: all
  std::string inject_file;

  /// Parses and validates every variable; errors name the variable and the bad value.
  static absl::StatusOr<Config> from_env(const EnvLookup& lookup = read_env);
};

}  // namespace weft
