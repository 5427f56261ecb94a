// What one 2-process exchange of a small message costs through UCX alone, three ways:
//   tag-probe   weft's ucx links today: a tag send, then a probe and a receive of what came;
//   tag-posted  Open MPI's pml ucx: the receive posted before the send;
//   put         a write into the peer's memory (ucp_put_nbx into a region it mapped), found
//               by polling that memory for a sequence number written with the data;
//   store       the same with a memcpy into the peer's region as ucp_rkey_ptr maps it here,
//               then the sequence number stored with release order (one host only).
// It measures how far below Open MPI a small call over ucx could go (docs/PERFORMANCE.md,
// the ucx section), so it keeps to what UCX does: no weft code runs. The two processes are
// this program run twice (fork, then exec), bound to cores 0 and 1, talking over a socket
// pair only to trade addresses. Every receiver checks every word of every message, and the
// program exits 1 when one was wrong: a put whose sequence number is seen before all its
// data is not a protocol (on the 2-core VM of docs/PERFORMANCE.md, from 512 bytes up).
//
//   ucx_exchange_benchmark [--mode=tag-probe|tag-posted|put|store] [--bytes=8] [--iters=1000000]
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "ucx_exchange_benchmark: %s\n", why.c_str());
  std::exit(1);
}

void check(ucs_status_t s, const char* what) {
  if (s != UCS_OK) die(std::string(what) + ": " + ucs_status_string(s));
}

void write_all(int fd, const void* p, size_t n) {
  for (size_t done = 0; done < n;) {
    const ssize_t k = ::write(fd, static_cast<const char*>(p) + done, n - done);
    if (k <= 0) die("writing to the other process failed");
    done += static_cast<size_t>(k);
  }
}

std::vector<char> read_blob(int fd) {
  uint64_t n = 0;
  if (::read(fd, &n, sizeof n) != sizeof n || n > (1u << 20)) die("the other process is gone");
  std::vector<char> v(n);
  for (size_t done = 0; done < n;) {
    const ssize_t k = ::read(fd, v.data() + done, n - done);
    if (k <= 0) die("the other process is gone");
    done += static_cast<size_t>(k);
  }
  return v;
}

void send_blob(int fd, const void* p, uint64_t n) {
  write_all(fd, &n, sizeof n);
  write_all(fd, p, n);
}

// Every wait gives up after 10 s (the other process died, or UCX never delivered).
class Patience {
 public:
  void pass(const char* what) {
    if ((++passes_ & 4095) == 0 && std::chrono::steady_clock::now() > until_) {
      die(std::string("waited 10 s for ") + what);
    }
  }

 private:
  uint64_t passes_ = 0;
  std::chrono::steady_clock::time_point until_ =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
};

void wait_for(ucp_worker_h worker, void* request) {
  if (UCS_PTR_IS_ERR(request)) check(UCS_PTR_STATUS(request), "a UCX operation");
  if (request == nullptr) return;
  Patience patience;
  while (ucp_request_check_status(request) == UCS_INPROGRESS) {
    ucp_worker_progress(worker);
    patience.pass("a UCX request");
  }
  check(ucp_request_check_status(request), "a UCX operation");
  ucp_request_free(request);
}

struct Options {
  std::string mode = "tag-probe";
  size_t bytes = 8;
  long iters = 1000000;
};

int run(const Options& o, int me, int fd) {
  cpu_set_t cores;
  CPU_ZERO(&cores);
  CPU_SET(me, &cores);
  sched_setaffinity(0, sizeof cores, &cores);

  ucp_config_t* config = nullptr;
  check(ucp_config_read(nullptr, nullptr, &config), "reading UCX's configuration");
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_RMA;
  ucp_context_h context = nullptr;
  check(ucp_init(&params, config, &context), "ucp_init");
  ucp_config_release(config);
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;  // as weft's
  ucp_worker_h worker = nullptr;
  check(ucp_worker_create(context, &wp, &worker), "ucp_worker_create");

  // Addresses, then the region the put writes into (UCX allocates it, so that on one host
  // its shared-memory transport maps it into the peer).
  ucp_address_t* address = nullptr;
  size_t address_len = 0;
  check(ucp_worker_get_address(worker, &address, &address_len), "ucp_worker_get_address");
  send_blob(fd, address, address_len);
  ucp_worker_release_address(worker, address);
  std::vector<char> peer_address = read_blob(fd);
  ucp_ep_params_t ep_params{};
  ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
  ep_params.address = reinterpret_cast<const ucp_address_t*>(peer_address.data());
  ucp_ep_h ep = nullptr;
  check(ucp_ep_create(worker, &ep_params, &ep), "ucp_ep_create");

  constexpr size_t kSlotWords = 512;  // two slots: the peer may be one message ahead
  ucp_mem_map_params_t map{};
  map.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                   UCP_MEM_MAP_PARAM_FIELD_FLAGS;
  map.length = 2 * kSlotWords * sizeof(uint64_t);
  map.flags = UCP_MEM_MAP_ALLOCATE;
  ucp_mem_h memh = nullptr;
  check(ucp_mem_map(context, &map, &memh), "ucp_mem_map");
  ucp_mem_attr_t attr{};
  attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS;
  check(ucp_mem_query(memh, &attr), "ucp_mem_query");
  auto* inbox = static_cast<volatile uint64_t*>(attr.address);
  for (size_t i = 0; i < 2 * kSlotWords; ++i) inbox[i] = 0;
  void* rkey_blob = nullptr;
  size_t rkey_len = 0;
  check(ucp_rkey_pack(context, memh, &rkey_blob, &rkey_len), "ucp_rkey_pack");
  const uint64_t inbox_at = reinterpret_cast<uint64_t>(attr.address);
  send_blob(fd, &inbox_at, sizeof inbox_at);
  send_blob(fd, rkey_blob, rkey_len);
  uint64_t peer_inbox = 0;
  std::memcpy(&peer_inbox, read_blob(fd).data(), sizeof peer_inbox);
  std::vector<char> peer_rkey = read_blob(fd);
  ucp_rkey_h rkey = nullptr;
  check(ucp_ep_rkey_unpack(ep, peer_rkey.data(), &rkey), "ucp_ep_rkey_unpack");

  const size_t words = (o.bytes + 7) / 8;
  if (words + 1 > kSlotWords) die("--bytes is at most 4088");
  std::vector<uint64_t> out(words + 1), in(words + 1);
  const ucp_tag_t tag_out = 100 + me, tag_in = 101 - me;
  uint64_t seq = 0;
  long wrong = 0;
  // The mode, decided once: the loop below is what is timed.
  const bool put = o.mode == "put", posted = o.mode == "tag-posted", store = o.mode == "store";
  uint64_t* peer_mapped = nullptr;
  if (store) {
    void* mapped = nullptr;
    check(ucp_rkey_ptr(rkey, peer_inbox, &mapped), "ucp_rkey_ptr (store needs one host)");
    peer_mapped = static_cast<uint64_t*>(mapped);
  }
  auto exchange = [&] {
    ++seq;
    for (size_t w = 0; w < words; ++w) out[w] = seq * 1000 + w;
    ucp_request_param_t send{};
    send.op_attr_mask = UCP_OP_ATTR_FLAG_FAST_CMPL;  // as a blocking MPI send asks
    if (store) {
      const uint64_t slot = (seq & 1) * kSlotWords;
      std::memcpy(peer_mapped + slot, out.data(), words * 8);
      __atomic_store_n(&peer_mapped[slot + words], seq, __ATOMIC_RELEASE);
      Patience patience;
      const auto* flag = const_cast<const uint64_t*>(&inbox[slot + words]);
      while (__atomic_load_n(flag, __ATOMIC_ACQUIRE) != seq) patience.pass("the peer's store");
      std::memcpy(in.data(), const_cast<const uint64_t*>(&inbox[slot]), words * 8);
      for (size_t w = 0; w < words; ++w) wrong += in[w] != seq * 1000 + w;
      return;
    }
    if (put) {
      out[words] = seq;  // last, so that the data is in place when the receiver sees it
      const uint64_t slot = (seq & 1) * kSlotWords;
      wait_for(worker, ucp_put_nbx(ep, out.data(), (words + 1) * 8,
                                   peer_inbox + slot * sizeof(uint64_t), rkey, &send));
      Patience patience;
      for (int spin = 0; inbox[slot + words] != seq; ++spin) {
        if ((spin & 63) == 63) ucp_worker_progress(worker);  // transports that need it
        patience.pass("the peer's put");
      }
      for (size_t w = 0; w < words; ++w) wrong += inbox[slot + w] != seq * 1000 + w;
      return;
    }
    ucp_request_param_t recv{};
    if (posted) {
      void* r = ucp_tag_recv_nbx(worker, in.data(), words * 8, tag_in, ~ucp_tag_t{0}, &recv);
      wait_for(worker, ucp_tag_send_nbx(ep, out.data(), words * 8, tag_out, &send));
      wait_for(worker, r);
    } else {
      wait_for(worker, ucp_tag_send_nbx(ep, out.data(), words * 8, tag_out, &send));
      ucp_tag_recv_info_t info{};
      ucp_tag_message_h message = nullptr;
      Patience patience;
      while ((message = ucp_tag_probe_nb(worker, tag_in, ~ucp_tag_t{0}, 1, &info)) == nullptr) {
        ucp_worker_progress(worker);
        patience.pass("the peer's message");
      }
      wait_for(worker, ucp_tag_msg_recv_nbx(worker, in.data(), info.length, message, &recv));
    }
    for (size_t w = 0; w < words; ++w) wrong += in[w] != seq * 1000 + w;
  };
  for (int i = 0; i < 10000; ++i) exchange();
  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < o.iters; ++i) exchange();
  const std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
  if (me == 0) {
    std::printf("%-10s %6zu B  %.3f us per exchange  (%ld exchanges, %ld wrong words)\n",
                o.mode.c_str(), o.bytes, took.count() / static_cast<double>(o.iters), o.iters,
                wrong);
  }
  // Neither leaves while the other may still write into its region.
  char done = 0;
  write_all(fd, &done, 1);
  if (::read(fd, &done, 1) != 1) die("the other process is gone");
  ucp_rkey_destroy(rkey);
  ucp_rkey_buffer_release(rkey_blob);
  ucp_ep_destroy(ep);
  ucp_mem_unmap(context, memh);
  ucp_worker_destroy(worker);
  ucp_cleanup(context);
  return wrong == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  int me = -1, fd = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--mode=", 0) == 0) o.mode = a.substr(7);
    else if (a.rfind("--bytes=", 0) == 0) o.bytes = std::strtoul(a.c_str() + 8, nullptr, 10);
    else if (a.rfind("--iters=", 0) == 0) o.iters = std::strtol(a.c_str() + 8, nullptr, 10);
    else if (a.rfind("--role=", 0) == 0) std::sscanf(a.c_str() + 7, "%d,%d", &me, &fd);
    else {
      std::printf("usage: %s [--mode=tag-probe|tag-posted|put|store] [--bytes=8] [--iters=1000000]\n",
                  argv[0]);
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  if (o.mode != "tag-probe" && o.mode != "tag-posted" && o.mode != "put" && o.mode != "store") {
    die("unknown --mode");
  }
  if (o.bytes == 0 || o.iters <= 0) die("--bytes and --iters must be positive");
  if (me >= 0) return run(o, me, fd);
  // Both processes fresh from exec: UCX keeps nothing that fork would share between them.
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0) die("socketpair failed");
  pid_t pids[2];
  for (int role = 0; role < 2; ++role) {
    pids[role] = fork();
    if (pids[role] == 0) {
      ::close(pair[1 - role]);
      const std::string r = "--role=" + std::to_string(role) + "," + std::to_string(pair[role]);
      const std::string m = "--mode=" + o.mode, b = "--bytes=" + std::to_string(o.bytes),
                        n = "--iters=" + std::to_string(o.iters);
      execl("/proc/self/exe", argv[0], m.c_str(), b.c_str(), n.c_str(), r.c_str(), nullptr);
      _exit(127);
    }
  }
  ::close(pair[0]);
  ::close(pair[1]);
  int failed = 0;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  }
  return failed;
}
