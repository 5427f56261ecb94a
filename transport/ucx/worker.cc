#include "transport/ucx/worker.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>

#include "absl/strings/str_cat.h"
#include "src/base/deadline.hpp"
#include "src/base/env.hpp"

namespace weft::transport::ucx {
namespace {

// Each one: the name UCX gives the memory type, by ucs_memory_type_t.
constexpr std::pair<ucs_memory_type_t, const char*> kMemoryTypes[] = {
    {UCS_MEMORY_TYPE_HOST, "host"},           {UCS_MEMORY_TYPE_CUDA, "cuda"},
    {UCS_MEMORY_TYPE_CUDA_MANAGED, "cuda-managed"}, {UCS_MEMORY_TYPE_ROCM, "rocm"},
    {UCS_MEMORY_TYPE_ROCM_MANAGED, "rocm-managed"},
};

UcxInfo describe(ucp_context_h context) {
  UcxInfo info;
  info.version = ucp_get_version_string();
  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  if (ucp_context_query(context, &attr) == UCS_OK) {
    for (const auto& [type, name] : kMemoryTypes) {
      if (attr.memory_types & (uint64_t{1} << type)) info.memory_types.emplace_back(name);
    }
    info.device_memory = attr.memory_types & (uint64_t{1} << UCS_MEMORY_TYPE_CUDA);
  }
  return info;
}

absl::StatusOr<ucp_context_h> make_context(const std::string& net_devices, int peers) {
  ucp_config_t* config = nullptr;
  if (ucs_status_t s = ucp_config_read(nullptr, nullptr, &config); s != UCS_OK) {
    return ucx_error(s, "reading UCX's configuration (UCX_* variables)");
  }
  if (!net_devices.empty() && !read_env("UCX_NET_DEVICES").has_value()) {
    if (ucs_status_t s = ucp_config_modify(config, "NET_DEVICES", net_devices.c_str()); s != UCS_OK) {
      ucp_config_release(config);
      return ucx_error(s, absl::StrCat("setting UCX_NET_DEVICES=", net_devices));
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS |
                      UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  params.estimated_num_eps = peers > 0 ? static_cast<size_t>(peers) : 1;
  params.mt_workers_shared = 0;
  ucp_context_h context = nullptr;
  const ucs_status_t s = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (s != UCS_OK) return ucx_error(s, "initialising UCX (check UCX_TLS and UCX_NET_DEVICES)");
  return context;
}

}  // namespace

absl::Status ucx_error(ucs_status_t status, std::string_view what) {
  const std::string message = absl::StrCat(std::string(what), ": UCX says ", ucs_status_string(status));
  switch (status) {
    case UCS_ERR_TIMED_OUT:
    case UCS_ERR_ENDPOINT_TIMEOUT:
      return absl::DeadlineExceededError(message);
    case UCS_ERR_NO_DEVICE:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_UNSUPPORTED:
      return absl::FailedPreconditionError(message);
    default:
      return absl::UnavailableError(message);
  }
}

absl::StatusOr<std::shared_ptr<Worker>> Worker::create(const std::string& net_devices, int peers) {
  auto context = make_context(net_devices, peers);
  if (!context.ok()) return context.status();
  std::shared_ptr<Worker> w(new Worker());
  w->context_ = *context;
  w->info_ = describe(w->context_);
  ucp_worker_params_t params{};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  params.thread_mode = UCS_THREAD_MODE_SERIALIZED;  // Hold serializes it
  if (ucs_status_t s = ucp_worker_create(w->context_, &params, &w->worker_); s != UCS_OK) {
    return ucx_error(s, "creating a UCX worker");
  }
  ucp_address_t* address = nullptr;
  size_t length = 0;
  if (ucs_status_t s = ucp_worker_get_address(w->worker_, &address, &length); s != UCS_OK) {
    return ucx_error(s, "reading the UCX worker's address");
  }
  w->address_.assign(reinterpret_cast<const char*>(address), length);
  ucp_worker_release_address(w->worker_, address);
  if (ucs_status_t s = ucp_worker_get_efd(w->worker_, &w->wakeup_fd_); s != UCS_OK) {
    return ucx_error(s, "reading the UCX worker's event file descriptor");
  }
  w->stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (w->stop_fd_ < 0) return absl::ResourceExhaustedError("eventfd failed for the ucx worker");
  w->thread_ = std::thread([raw = w.get()] { raw->serve(); });
  return w;
}

Worker::~Worker() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    (void)!write(stop_fd_, &one, sizeof one);
    thread_.join();
  }
  if (stop_fd_ >= 0) close(stop_fd_);
  if (worker_ != nullptr) {
    drop_unread();
    ucp_worker_destroy(worker_);
  }
  if (context_ != nullptr) ucp_cleanup(context_);
}

void EndpointFailure::on_error(void* self, ucp_ep_h, ucs_status_t status) {
  int none = UCS_OK;
  static_cast<EndpointFailure*>(self)->status.compare_exchange_strong(
      none, status, std::memory_order_release, std::memory_order_relaxed);
}

void Worker::drop_unread() {
  for (int i = 0; i < 1024 && !stopped(); ++i) {
    ucp_worker_progress(worker_);
    ucp_tag_recv_info_t info{};
    // Only a message small enough to have come eagerly: a rendezvous is answered through the
    // endpoint it came on, closed by now with its link, and receiving one then fails UCX's
    // check that the endpoint is this worker's (UCX 1.13; a link receives what came before
    // it closed, UcxPair::receive_unread). What is left, UCX may warn of.
    if (ucp_tag_probe_nb(worker_, 0, 0, 0, &info) == nullptr || info.length > kDropUpTo) return;
    ucp_tag_message_h message = ucp_tag_probe_nb(worker_, 0, 0, 1, &info);
    std::array<std::byte, kDropUpTo> scratch;
    drop(message, scratch.data(), info.length, Deadline::after(absl::Milliseconds(100)));
  }
}

void Worker::drop(ucp_tag_message_h message, std::byte* into, size_t len, Deadline deadline) {
  ucp_request_param_t param{};
  void* r = ucp_tag_msg_recv_nbx(worker_, into, len, message, &param);
  if (!UCS_PTR_IS_PTR(r)) return;
  while (ucp_request_check_status(r) == UCS_INPROGRESS && !deadline.expired() && !stopped()) {
    ucp_worker_progress(worker_);
  }
  if (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_request_cancel(worker_, r);
  if (ucp_request_check_status(r) == UCS_INPROGRESS) stop_progress();
  ucp_request_free(r);
}

void Worker::note_driven() {
  // Calls drive the worker one at a time (Hold): a plain increment, no clock read.
  driven_.store(driven_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

void Worker::progress() {
  note_driven();
  progress_between_calls();
}

void Worker::progress_between_calls() {
  if (stopped()) return;
  // Bounded: a stream of arrivals must not keep one call here forever.
  for (int i = 0; i < 16 && ucp_worker_progress(worker_) != 0; ++i) {
  }
}

bool Worker::progress_once() {
  note_driven();
  return !stopped() && ucp_worker_progress(worker_) != 0;
}

void Worker::serve() {
  pollfd fds[2] = {{wakeup_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
  uint64_t seen = driven_.load(std::memory_order_relaxed);
  int nap_ms = 1;
  for (;;) {
    // A call drove the worker since the last look, or holds it now: calls progress it
    // themselves. Look again later, unless stopped: in a millisecond at first, less often
    // the longer calls keep driving it (kLongestNapMs).
    const uint64_t driven = driven_.load(std::memory_order_relaxed);
    if (driven != seen || held_.exchange(true, std::memory_order_acquire)) {
      seen = driven;
      if (poll(&fds[1], 1, nap_ms) > 0) return;
      nap_ms = std::min(2 * nap_ms, kLongestNapMs);
      continue;
    }
    if (stopped()) {  // nothing to do until the worker goes
      held_.store(false, std::memory_order_release);
      if (poll(&fds[1], 1, -1) > 0) return;
      continue;
    }
    nap_ms = 1;
    // Bytes a link held back for a send that never came leave now.
    while (!holding_.empty()) holding_.back()->send_held_bytes();  // each forgets itself
    bool progressed = false;
    for (int i = 0; i < 64 && ucp_worker_progress(worker_) != 0; ++i) progressed = true;
    const ucs_status_t armed = ucp_worker_arm(worker_);
    held_.store(false, std::memory_order_release);
    if (armed == UCS_ERR_BUSY) {
      // Events came meanwhile: progress again. An interface can stay busy for good (UCX's
      // shared memory, with a send to a peer that is gone still queued), so look at the
      // stop first, and unless something progressed, after a millisecond: never a spin,
      // and never a destructor waiting on this thread.
      if (poll(&fds[1], 1, progressed ? 0 : 1) > 0) return;
      continue;
    }
    // Armed, or UCX cannot arm this worker: wake on its events, and look anyway now and then.
    if (poll(fds, 2, armed == UCS_OK ? 100 : 1) > 0 && fds[1].revents != 0) return;
  }
}

absl::StatusOr<UcxInfo> describe_ucx() {
  auto context = make_context("", 1);
  if (!context.ok()) return context.status();
  UcxInfo info = describe(*context);
  ucp_cleanup(*context);
  return info;
}

}  // namespace weft::transport::ucx
