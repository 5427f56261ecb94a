// The ucx transport: links ranks through UCX's UCP layer, which picks per pair what moves
// the bytes (InfiniBand or RoCE verbs, shared memory and CMA on one host, tcp), registers
// memory, and moves a large message by zero-copy rendezvous.
//
// One UCP context and worker per communicator (worker.hpp); each rank publishes the
// worker's address at bootstrap and creates an endpoint to a peer when their link first
// opens (pair.hpp). weft's own waits drive UCX: no call blocks in UCX, and every wait has
// weft's deadline.
//
// Where it is used: WEFT_TRANSPORT=ucx forces it for every link. Otherwise the
// communicator makes it only on a host with an RDMA device (rdma_device_present), and then
// it links ranks of different hosts; shm stays the choice within a host, and over plain
// Ethernet tcp stays the default, so that ucx over tcp is used only where asked for and
// measured.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "transport/transport.hpp"

namespace weft::transport::ucx {

absl::StatusOr<std::unique_ptr<Transport>> make_transport(const TransportInit& init);

/// UCX's version and the memory it moves, for `weft info`: "UCX 1.13.1, moves memory of
/// type host (CUDA memory: no)".
std::string describe();

/// Whether this host has an InfiniBand or RoCE device UCX could use (/sys/class/infiniband).
bool rdma_device_present();

}  // namespace weft::transport::ucx
