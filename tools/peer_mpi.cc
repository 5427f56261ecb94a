// MPI as a Peer: MPI_Allreduce, MPI_Allgather, MPI_Reduce_scatter_block and MPI_Bcast on
// MPI_COMM_WORLD. MPI has no half, bfloat16 or average; those calls are "n/a".
//
// Layouts: MPI's in-place calls pass MPI_IN_PLACE as the send buffer. Allgather then finds
// this rank's input in its slot of recv, as nccl-tests lays it out; reduce_scatter_block
// finds the whole input in recv and leaves the result at its *start*, not in this rank's
// slot, which result() reports. Out-of-place broadcast sends from the root's send buffer,
// so the root's result is its own input.
#include "tools/peer.hpp"

#ifdef WEFT_HAVE_MPI
#include <mpi.h>

#include <climits>

#include "absl/strings/str_cat.h"
#endif

namespace weft::tools {

#ifdef WEFT_HAVE_MPI
namespace {

bool mpi_type(DataType type, MPI_Datatype* out) {
  switch (type) {
    case DataType::kInt8: *out = MPI_INT8_T; return true;
    case DataType::kUint8: *out = MPI_UINT8_T; return true;
    case DataType::kInt32: *out = MPI_INT32_T; return true;
    case DataType::kUint32: *out = MPI_UINT32_T; return true;
    case DataType::kInt64: *out = MPI_INT64_T; return true;
    case DataType::kUint64: *out = MPI_UINT64_T; return true;
    case DataType::kFloat32: *out = MPI_FLOAT; return true;
    case DataType::kFloat64: *out = MPI_DOUBLE; return true;
    default: return false;  // half, bfloat16
  }
}

bool mpi_op(ReduceOp op, MPI_Op* out) {
  switch (op) {
    case ReduceOp::kSum: *out = MPI_SUM; return true;
    case ReduceOp::kProd: *out = MPI_PROD; return true;
    case ReduceOp::kMin: *out = MPI_MIN; return true;
    case ReduceOp::kMax: *out = MPI_MAX; return true;
    default: return false;  // avg
  }
}

class MpiPeer : public Peer {
 public:
  MpiPeer() { MPI_Comm_rank(MPI_COMM_WORLD, &rank_); }

  const char* name() const override { return "mpi"; }

  bool supports(const Call& call) const override {
    MPI_Datatype t;
    MPI_Op o;
    return mpi_type(call.type, &t) && (!reduces(call.kind) || mpi_op(call.op, &o)) &&
           call.count <= static_cast<size_t>(INT_MAX);
  }

  absl::Status run(const Call& call, const Placement& at) override {
    MPI_Datatype type;
    MPI_Op op = MPI_SUM;
    if (!mpi_type(call.type, &type) || (reduces(call.kind) && !mpi_op(call.op, &op))) {
      return absl::InvalidArgumentError(
          absl::StrCat("MPI has no ", name_of(call.type), " ", name_of(call.op)));
    }
    if (call.count > static_cast<size_t>(INT_MAX)) {
      return absl::InvalidArgumentError(
          absl::StrCat("MPI counts are int; ", call.count, " elements is too many"));
    }
    const int count = static_cast<int>(call.count);
    const void* in_place_or_send = call.in_place ? MPI_IN_PLACE : at.send;
    int rc = MPI_SUCCESS;
    switch (call.kind) {
      case CollectiveKind::kAllreduce:
        rc = MPI_Allreduce(in_place_or_send, at.recv, count, type, op, MPI_COMM_WORLD);
        break;
      case CollectiveKind::kAllgather:
        rc = MPI_Allgather(in_place_or_send, count, type, at.recv, count, type, MPI_COMM_WORLD);
        break;
      case CollectiveKind::kReduceScatter:
        // In place, the whole input is at.send (the start of recv); the result lands there.
        rc = MPI_Reduce_scatter_block(in_place_or_send, call.in_place ? at.send : at.recv,
                                      count, type, op, MPI_COMM_WORLD);
        break;
      case CollectiveKind::kBroadcast:
        rc = MPI_Bcast(rank_ == call.root ? at.send : at.recv, count, type, call.root,
                       MPI_COMM_WORLD);
        break;
      default: return absl::InvalidArgumentError("weft bench: no MPI call for a barrier");
    }
    if (rc != MPI_SUCCESS) {
      char text[MPI_MAX_ERROR_STRING];
      int len = 0;
      MPI_Error_string(rc, text, &len);
      return absl::InternalError(absl::StrCat("MPI ", name_of(call.kind), ": ", text));
    }
    return absl::OkStatus();
  }

  absl::Status settle() override {
    return MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS
               ? absl::OkStatus()
               : absl::InternalError("MPI_Barrier failed after the timed MPI calls");
  }

  std::byte* result(const Call& call, const Placement& at, int rank) const override {
    if (call.in_place && call.kind == CollectiveKind::kReduceScatter) return at.send;
    if (!call.in_place && call.kind == CollectiveKind::kBroadcast && rank == call.root) {
      return at.send;
    }
    return at.recv;
  }

 private:
  int rank_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Peer>> make_mpi_peer(bool mpi_initialized) {
  if (!mpi_initialized) {
    return absl::FailedPreconditionError(
        "--compare mpi needs a job started by mpirun (MPI is not initialised)");
  }
  return std::unique_ptr<Peer>(std::make_unique<MpiPeer>());
}

#else

absl::StatusOr<std::unique_ptr<Peer>> make_mpi_peer(bool) {
  return absl::FailedPreconditionError("built without MPI; run scripts/setup and rebuild");
}

#endif

}  // namespace weft::tools
