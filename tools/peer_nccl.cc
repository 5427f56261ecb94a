// NCCL as a Peer (--compare nccl): ncclAllReduce, ncclAllGather, ncclReduceScatter and
// ncclBroadcast on the bench's device buffers, ordered on its stream as weft's calls are.
// NCCL's in-place layouts are nccl-tests', which are the bench's, and it has every type and
// op weft has. Its float avg multiplies each input by 1/N before the sum, so with a rank count
// that is not a power of two the bench counts its results inexact, as they are.
//
// NCCL is loaded when asked for (dlopen of libnccl.so.2), so weft neither links nor ships its
// 200 MB: the CUDA toolkit's, or PyTorch's (pip's nvidia-nccl-cu13), found on the loader's
// path. nccl.h, from the toolkit, gives only the types and signatures.
//
// Setting it up is collective, and every rank must reach the same verdict: a rank that went
// on into ncclCommInitRank alone would wait there for the others. So every rank first says,
// in one allgather over weft, whether it has NCCL and which GPU it is on (NCCL refuses two
// ranks on one GPU: on a one-GPU machine only a one-rank job can compare).
#include "tools/peer.hpp"

#ifdef WEFT_HAVE_NCCL
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/tally.hpp"
#endif

namespace weft::tools {

#ifdef WEFT_HAVE_NCCL
namespace {

// The NCCL functions the bench calls, from the library dlopen found.
struct Nccl {
  int version = 0;  // NCCL_VERSION_CODE of the library loaded, 22809 for 2.28.9
  decltype(&ncclGetVersion) get_version;
  decltype(&ncclGetUniqueId) get_unique_id;
  decltype(&ncclCommInitRank) init_rank;
  decltype(&ncclCommDestroy) destroy;
  decltype(&ncclCommAbort) abort;
  decltype(&ncclCommGetAsyncError) async_error;
  decltype(&ncclGetErrorString) error_string;
  decltype(&ncclGetLastError) last_error;
  decltype(&ncclAllReduce) allreduce;
  decltype(&ncclAllGather) allgather;
  decltype(&ncclReduceScatter) reduce_scatter;
  decltype(&ncclBroadcast) broadcast;
};

template <typename F>
bool find(void* lib, const char* name, F* f) {
  *f = reinterpret_cast<F>(dlsym(lib, name));
  return *f != nullptr;
}

absl::StatusOr<Nccl> load_nccl() {
  // Kept loaded for the life of the process: NCCL's threads outlive any one communicator.
  void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "cannot load NCCL (", dlerror(), "); put the folder holding libnccl.so.2 on "
        "LD_LIBRARY_PATH: the CUDA toolkit's lib/, or PyTorch's nvidia/nccl/lib"));
  }
  Nccl n;
  if (!find(lib, "ncclGetVersion", &n.get_version) || !find(lib, "ncclGetUniqueId", &n.get_unique_id) ||
      !find(lib, "ncclCommInitRank", &n.init_rank) || !find(lib, "ncclCommDestroy", &n.destroy) ||
      !find(lib, "ncclCommAbort", &n.abort) ||
      !find(lib, "ncclCommGetAsyncError", &n.async_error) ||
      !find(lib, "ncclGetErrorString", &n.error_string) ||
      !find(lib, "ncclGetLastError", &n.last_error) || !find(lib, "ncclAllReduce", &n.allreduce) ||
      !find(lib, "ncclAllGather", &n.allgather) ||
      !find(lib, "ncclReduceScatter", &n.reduce_scatter) ||
      !find(lib, "ncclBroadcast", &n.broadcast)) {
    return absl::NotFoundError("the libnccl.so.2 found lacks functions weft calls; NCCL 2.13 or "
                               "later is needed");
  }
  if (n.get_version(&n.version) != ncclSuccess || n.version < 21300) {
    return absl::FailedPreconditionError(
        absl::StrCat("NCCL ", n.version, " is too old: 2.13 or later is needed"));
  }
  return n;
}

bool nccl_type(DataType type, ncclDataType_t* out) {
  switch (type) {
    case DataType::kInt8: *out = ncclInt8; return true;
    case DataType::kUint8: *out = ncclUint8; return true;
    case DataType::kInt32: *out = ncclInt32; return true;
    case DataType::kUint32: *out = ncclUint32; return true;
    case DataType::kInt64: *out = ncclInt64; return true;
    case DataType::kUint64: *out = ncclUint64; return true;
    case DataType::kFloat16: *out = ncclFloat16; return true;
    case DataType::kFloat32: *out = ncclFloat32; return true;
    case DataType::kFloat64: *out = ncclFloat64; return true;
    case DataType::kBFloat16: *out = ncclBfloat16; return true;
  }
  return false;
}

bool nccl_op(ReduceOp op, ncclRedOp_t* out) {
  switch (op) {
    case ReduceOp::kSum: *out = ncclSum; return true;
    case ReduceOp::kProd: *out = ncclProd; return true;
    case ReduceOp::kMax: *out = ncclMax; return true;
    case ReduceOp::kMin: *out = ncclMin; return true;
    case ReduceOp::kAvg: *out = ncclAvg; return true;
  }
  return false;
}

class NcclPeer : public Peer {
 public:
  NcclPeer(const Nccl& api, ncclComm_t comm, DeviceMirror& mirror)
      : api_(api), comm_(comm), mirror_(mirror) {}
  ~NcclPeer() override {
    // ncclCommDestroy waits for the peers' calls too: after a failure, abort.
    if (!failed_ && mirror_.synchronize().ok()) {
      api_.destroy(comm_);
    } else {
      api_.abort(comm_);
    }
  }

  const char* name() const override { return "nccl"; }
  bool supports(const Call& call) const override {
    ncclDataType_t t;
    ncclRedOp_t o;
    return call.kind != CollectiveKind::kBarrier && nccl_type(call.type, &t) &&
           (!reduces(call.kind) || nccl_op(call.op, &o));
  }

  absl::Status run(const Call& call, const Placement& at) override {
    ncclDataType_t type;
    ncclRedOp_t op = ncclSum;
    if (!nccl_type(call.type, &type) || (reduces(call.kind) && !nccl_op(call.op, &op))) {
      return absl::InvalidArgumentError(
          absl::StrCat("NCCL has no ", name_of(call.type), " ", name_of(call.op)));
    }
    auto stream = static_cast<cudaStream_t>(mirror_.stream());
    ncclResult_t r = ncclSuccess;
    switch (call.kind) {
      case CollectiveKind::kAllreduce:
        r = api_.allreduce(at.send, at.recv, call.count, type, op, comm_, stream);
        break;
      case CollectiveKind::kAllgather:
        r = api_.allgather(at.send, at.recv, call.count, type, comm_, stream);
        break;
      case CollectiveKind::kReduceScatter:
        r = api_.reduce_scatter(at.send, at.recv, call.count, type, op, comm_, stream);
        break;
      case CollectiveKind::kBroadcast:
        r = api_.broadcast(at.send, at.recv, call.count, type, call.root, comm_, stream);
        break;
      default: return absl::InvalidArgumentError("weft bench: no NCCL call for a barrier");
    }
    return r == ncclSuccess ? absl::OkStatus() : error(name_of(call.kind), r);
  }

  absl::Status finish() override {
    if (absl::Status s = mirror_.synchronize(); !s.ok()) {
      failed_ = true;
      return s;
    }
    ncclResult_t async = ncclSuccess;
    if (ncclResult_t r = api_.async_error(comm_, &async); r != ncclSuccess) {
      return error("ncclCommGetAsyncError", r);
    }
    return async == ncclSuccess ? absl::OkStatus() : error("a call after it returned", async);
  }

 private:
  absl::Status error(const char* what, ncclResult_t r) {
    failed_ = true;
    return absl::InternalError(absl::StrCat("NCCL ", what, ": ", api_.error_string(r), " (",
                                            api_.last_error(comm_), ")"));
  }

  Nccl api_;
  ncclComm_t comm_;
  DeviceMirror& mirror_;
  bool failed_ = false;
};

// What each rank tells the others before any of them starts NCCL: whether it can, and which
// GPU it is on (the host's name and the GPU's PCI address), or why not.
struct Readiness {
  char ok = 0;
  char text[255] = {};
};

Readiness readiness(const absl::StatusOr<Nccl>& nccl, const DeviceMirror& mirror) {
  Readiness r;
  std::string text;
  char bus[32] = {};
  int device = 0;
  if (!mirror.on_gpu()) {
    text = "NCCL needs a GPU, and this rank stands in for one (WEFT_DEVICE_STAND_IN=on)";
  } else if (!nccl.ok()) {
    text = std::string(nccl.status().message());
  } else if (cudaGetDevice(&device) != cudaSuccess ||
             cudaDeviceGetPCIBusId(bus, sizeof bus, device) != cudaSuccess) {
    text = "CUDA cannot say which GPU this rank is on (cudaDeviceGetPCIBusId)";
  } else {
    char host[128] = {};
    gethostname(host, sizeof host - 1);
    text = absl::StrCat("GPU ", bus, " of host ", host);
    r.ok = 1;
  }
  std::snprintf(r.text, sizeof r.text, "%s", text.c_str());
  return r;
}

// Every rank's readiness; OK on every rank, or on every rank the same error.
absl::Status agree_ready(Communicator& comm, const Readiness& mine) {
  std::vector<Readiness> all(static_cast<size_t>(comm.size()));
  if (absl::Status s = comm.allgather(&mine, all.data(), sizeof mine, DataType::kUint8); !s.ok()) {
    return s;
  }
  for (size_t i = 0; i < all.size(); ++i) {
    if (!all[i].ok) return absl::FailedPreconditionError(absl::StrCat("rank ", i, ": ", all[i].text));
    for (size_t j = 0; j < i; ++j) {
      if (std::strcmp(all[i].text, all[j].text) == 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            "NCCL refuses two ranks on one GPU, and ranks ", j, " and ", i, " both use ",
            all[i].text, ": run at most as many ranks per host as it has GPUs"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

// Loaded once, when first asked for.
const absl::StatusOr<Nccl>& nccl_library() {
  static const absl::StatusOr<Nccl> nccl = load_nccl();
  return nccl;
}

std::string describe_nccl() {
  const auto& nccl = nccl_library();
  if (!nccl.ok()) return std::string(nccl.status().message());
  return absl::StrFormat("libnccl.so.2 %d.%d.%d", nccl->version / 10000, nccl->version / 100 % 100,
                         nccl->version % 100);
}

absl::StatusOr<std::unique_ptr<Peer>> make_nccl_peer(Communicator& comm, DeviceMirror& mirror) {
  const absl::StatusOr<Nccl>& nccl = nccl_library();
  if (absl::Status s = agree_ready(comm, readiness(nccl, mirror)); !s.ok()) return s;
  // Rank 0's unique id, or why it has none, to every rank.
  struct Id {
    char ok = 0;
    ncclUniqueId id{};
  } id;
  if (comm.rank() == 0) id.ok = nccl->get_unique_id(&id.id) == ncclSuccess;
  if (absl::Status s = comm.broadcast(&id, &id, sizeof id, DataType::kUint8); !s.ok()) return s;
  if (!id.ok) return absl::InternalError("ncclGetUniqueId failed on rank 0");
  ncclComm_t nc = nullptr;
  const ncclResult_t r = nccl->init_rank(&nc, comm.size(), id.id, comm.rank());
  auto failed = total_over_ranks(comm, r == ncclSuccess ? 0 : 1);
  if (!failed.ok() || *failed != 0) {
    if (nc != nullptr) nccl->abort(nc);
    if (!failed.ok()) return failed.status();
    return absl::InternalError(absl::StrFormat(
        "ncclCommInitRank failed on %d of %d ranks%s", *failed, comm.size(),
        r == ncclSuccess ? "" : absl::StrCat(", here: ", nccl->error_string(r))));
  }
  return std::unique_ptr<Peer>(std::make_unique<NcclPeer>(*nccl, nc, mirror));
}

#else

constexpr char kNoNccl[] =
    "this weft was built without CUDA or without NCCL's header (nccl.h, in the CUDA toolkit): "
    "rebuild where both are";

absl::StatusOr<std::unique_ptr<Peer>> make_nccl_peer(Communicator&, DeviceMirror&) {
  return absl::FailedPreconditionError(kNoNccl);
}

std::string describe_nccl() { return kNoNccl; }

#endif

}  // namespace weft::tools
