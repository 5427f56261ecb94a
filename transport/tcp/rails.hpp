// Rails: the network interfaces the tcp transport uses, and which of them a link runs over.
//
// WEFT_SOCKET_IFNAME names the rails, comma-separated, as NCCL_SOCKET_IFNAME does:
// "eth0,eth1". An entry that is the exact name of an interface means that interface, as a
// single name always has; an entry that names none means every interface whose name starts
// with it ("weftr" takes weftr0, weftr1, ... in that order; those down or without an address
// are left out).
// Each rail is one interface and one of its addresses (IPv4 preferred). Unset, there is one
// rail, picked as before rails existed. A host takes a rail out of use by leaving it out of
// its own WEFT_SOCKET_IFNAME: links to and from it then run over the rails both ends have.
//
// A link opens one socket per rail both ends can use: the dialer pairs each of its rails
// with a published address of the peer in that rail's subnet. When no subnet matches (hosts
// that reach each other through a router), the link dials the peer's first address alone,
// which is exactly what a single-rail link always did.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "transport/tcp/address.hpp"

namespace weft::transport::tcp {

struct Rail {
  std::string ifname;
  SockAddr addr;        ///< the interface's address, port 0
  int prefix_bits = 0;  ///< its subnet: the leading bits shared by on-link addresses
};

/// The rails `ifnames` (WEFT_SOCKET_IFNAME) names, in the order it names them, without
/// repeats; at least one, at most kMaxRails. Empty `ifnames`: the first non-loopback IPv4
/// interface that is up and running (docker bridges skipped, as NCCL does: they do not reach
/// other hosts), else one that is only up, else 127.0.0.1 for single-host jobs. A named
/// interface that is missing, down or without an address is an error that says so.
absl::StatusOr<std::vector<Rail>> choose_rails(const std::string& ifnames);

/// The first rail's IP: where the bootstrap's rendezvous listens, so that the rendezvous
/// and the data links agree on the first interface.
absl::StatusOr<std::string> choose_listen_ip(const std::string& ifnames);

/// The name of the local interface that holds `addr`'s IP (the port does not matter), or an
/// empty string when no interface of this host has that address: the bootstrap binds only
/// the interface it is told to use.
absl::StatusOr<std::string> interface_holding(const SockAddr& addr);

/// Whether `addr` lies in `rail`'s subnet (same family, same leading prefix_bits).
bool on_rail(const Rail& rail, const SockAddr& addr);

/// One socket of a link: the dialer's rail it leaves from (-1: none matched, the kernel's
/// routing picks) and the index of the peer's published address it dials.
struct Route {
  int local_rail = -1;
  size_t remote = 0;
};

/// The sockets a link opens, at most `max_routes` (>= 1): each local rail, in order, takes
/// the first unused remote address in its subnet. No match at all: one route to remote[0].
/// `remote` must not be empty.
std::vector<Route> plan_routes(const std::vector<Rail>& local, const std::vector<SockAddr>& remote,
                               size_t max_routes);

}  // namespace weft::transport::tcp
