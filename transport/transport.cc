#include "transport/transport.hpp"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "src/base/copy.hpp"
#include "transport/shm/context.hpp"
#include "transport/tcp/context.hpp"
#ifdef WEFT_HAVE_UCX
#include "transport/ucx/context.hpp"
#endif

namespace weft::transport {
absl::Status Pair::write_to_peer(uint64_t, const std::byte*, size_t) {
  return absl::UnimplementedError(absl::StrCat("the link to rank ", peer(),
                                               " cannot write into the peer's memory"));
}

absl::StatusOr<size_t> Pair::send_gathered(const Gather& from, size_t len) {
  if (len > kGatherBytes) return send_some(from.at(0), std::min(len, from.run_from(0)));
  std::byte joined[kGatherBytes];
  from.copy_out(joined, 0, len);
  return send_some(joined, len);
}

absl::StatusOr<size_t> Pair::recv_scatter(const Scatter& to, size_t max) {
  size_t got = 0;
  return recv_some(max, [&](const std::byte* data, size_t len) {
    while (len > 0) {
      const size_t n = std::min(len, to.run_from(got));
      copy_bytes(to.at(got), data, n);
      got += n;
      data += n;
      len -= n;
    }
  });
}

bool ucx_wanted_by_default() {
#ifdef WEFT_HAVE_UCX
  return ucx::rdma_device_present();
#else
  return false;
#endif
}

std::string ucx_description() {
#ifdef WEFT_HAVE_UCX
  return absl::StrCat(ucx::describe(), "; between hosts by default: ",
                      ucx::rdma_device_present() ? "yes (an RDMA device is present)"
                                                 : "no (no RDMA device; WEFT_TRANSPORT=ucx forces it)");
#else
  return "not built (this weft was built without UCX)";
#endif
}

absl::StatusOr<std::unique_ptr<Transport>> make_transport(std::string_view name,
                                                          const TransportInit& init) {
  if (name == "shm") return shm::make_transport(init);
  if (name == "tcp") return tcp::make_transport(init);
#ifdef WEFT_HAVE_UCX
  if (name == "ucx") return ucx::make_transport(init);
#else
  if (name == "ucx") {
    return absl::FailedPreconditionError(
        "this weft was built without UCX (install libucx-dev and rebuild: scripts/setup, "
        "scripts/build)");
  }
#endif
  return absl::InvalidArgumentError(
      absl::StrCat("unknown transport '", std::string(name), "'; known: shm, tcp, ucx"));
}

}  // namespace weft::transport
