#include "backend.hpp"

#include <c10/util/Exception.h>

#include <cstddef>
#include <cstring>

#include "work.hpp"

namespace weft_torch {
namespace {

// The key under which rank 0 leaves weft's unique id in the group's store.
constexpr const char* kUniqueIdKey = "weft_unique_id";

weftDataType_t weft_type(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kChar: return weftInt8;
    case at::kByte: return weftUint8;
    case at::kInt: return weftInt32;
    case at::kUInt32: return weftUint32;
    case at::kLong: return weftInt64;
    case at::kUInt64: return weftUint64;
    case at::kHalf: return weftFloat16;
    case at::kFloat: return weftFloat32;
    case at::kDouble: return weftFloat64;
    case at::kBFloat16: return weftBfloat16;
    default:
      TORCH_CHECK(false, "weft: ", t.scalar_type(), " tensors are not supported; weft takes "
                  "int8, uint8, int32, uint32, int64, uint64, float16, bfloat16, float32 "
                  "and float64");
  }
}

weftRedOp_t weft_op(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return weftSum;
    case c10d::ReduceOp::AVG: return weftAvg;
    case c10d::ReduceOp::PRODUCT: return weftProd;
    case c10d::ReduceOp::MIN: return weftMin;
    case c10d::ReduceOp::MAX: return weftMax;
    default:
      TORCH_CHECK(false, "weft: ReduceOp ", static_cast<int>(op.op_), " is not supported; "
                  "weft reduces with SUM, AVG, PRODUCT, MIN and MAX");
  }
}

// weft reads and writes tensors as flat host buffers.
void check_tensor(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.device().is_cpu(), "weft: ", what, " is on ", t.device(),
              "; this build of the weft backend takes CPU tensors (move it with .cpu())");
  TORCH_CHECK(t.layout() == at::kStrided && t.is_contiguous(), "weft: ", what,
              " must be a dense contiguous tensor (call .contiguous())");
  weft_type(t);
}

at::Tensor& only(std::vector<at::Tensor>& tensors, const char* what) {
  TORCH_CHECK(tensors.size() == 1, "weft: ", what, " takes one tensor per process, got ",
              tensors.size());
  return tensors[0];
}

void check_same(const at::Tensor& a, const at::Tensor& b, const char* what) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "weft: ", what, ": the tensors are ",
              a.scalar_type(), " and ", b.scalar_type(), "; they must have one dtype");
}

// weft takes a block and a whole buffer that are either apart or the block at offset `rank`
// of the whole (in place); any other overlap is undefined there (weft.h), so such a block is
// handed over as a copy.
enum class Aliasing { kApart, kInPlace, kOverlap };
Aliasing aliasing(const at::Tensor& block, const at::Tensor& whole, int rank) {
  const auto* b = static_cast<const std::byte*>(block.data_ptr());
  const auto* w = static_cast<const std::byte*>(whole.data_ptr());
  const size_t block_bytes = block.nbytes(), whole_bytes = whole.nbytes();
  if (b == w + static_cast<size_t>(rank) * block_bytes) return Aliasing::kInPlace;
  const bool apart = block_bytes == 0 || whole_bytes == 0 || b + block_bytes <= w ||
                     w + whole_bytes <= b;
  return apart ? Aliasing::kApart : Aliasing::kOverlap;
}

}  // namespace

c10::intrusive_ptr<c10d::Backend> WeftBackend::create(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    const std::chrono::duration<float>& /*timeout: weft's waits follow WEFT_TIMEOUT*/) {
  return c10::make_intrusive<WeftBackend>(store, rank, size);
}

WeftBackend::WeftBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size)
    : c10d::Backend(rank, size) {
  weftUniqueId id;
  if (rank == 0) {
    check(weftGetUniqueId(&id), "weftGetUniqueId");
    const auto* bytes = reinterpret_cast<const uint8_t*>(id.internal);
    store->set(kUniqueIdKey, std::vector<uint8_t>(bytes, bytes + sizeof(id.internal)));
  } else {
    const std::vector<uint8_t> bytes = store->get(kUniqueIdKey);
    TORCH_CHECK(bytes.size() == sizeof(id.internal), "weft: the store holds a unique id of ",
                bytes.size(), " bytes, not ", sizeof(id.internal),
                "; do all ranks run the same weft_torch?");
    std::memcpy(id.internal, bytes.data(), bytes.size());
  }
  check(weftCommInitRank(&comm_, size, id, rank), "weftCommInitRank");
}

WeftBackend::~WeftBackend() { shutdown(); }

void WeftBackend::shutdown() {
  std::lock_guard<std::mutex> call(call_mu_);
  weftComm_t comm;
  {
    std::lock_guard<std::mutex> handle(handle_mu_);
    comm = comm_;
    comm_ = nullptr;
  }
  weftCommDestroy(comm);
}

void WeftBackend::abort() {
  std::lock_guard<std::mutex> handle(handle_mu_);
  if (comm_ != nullptr) weftCommAbort(comm_);
}

void WeftBackend::check(weftResult_t result, const char* what) const {
  if (result == weftSuccess) return;
  C10_THROW_ERROR(DistBackendError,
                  c10::str("weft: ", what, " failed on rank ", getRank(), ": ",
                           weftGetErrorString(result), ": ", weftGetLastError(comm_)));
}

c10::intrusive_ptr<c10d::Work> WeftBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                      const c10d::AllreduceOptions& opts) {
  std::lock_guard<std::mutex> turn(call_mu_);
  at::Tensor& t = only(tensors, "allreduce");
  check_tensor(t, "the allreduce tensor");
  check(weftAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), weft_type(t), weft_op(opts.reduceOp),
                      comm_, nullptr),
        "allreduce");
  return c10::make_intrusive<DoneWork>(c10d::OpType::ALLREDUCE, tensors);
}

c10::intrusive_ptr<c10d::Work> WeftBackend::_allgather_base(at::Tensor& output,
                                                            at::Tensor& input,
                                                            const c10d::AllgatherOptions&) {
  check_tensor(input, "the allgather input");
  check_tensor(output, "the allgather output");
  check_same(input, output, "all_gather_into_tensor");
  TORCH_CHECK(output.numel() == input.numel() * getSize(), "weft: all_gather_into_tensor: the "
              "output has ", output.numel(), " elements; it needs the input's ", input.numel(),
              " times ", getSize(), " ranks");
  std::lock_guard<std::mutex> turn(call_mu_);  // the list form's call comes here too
  const at::Tensor in = aliasing(input, output, getRank()) == Aliasing::kOverlap
                            ? input.clone() : input;
  check(weftAllGather(in.data_ptr(), output.data_ptr(), in.numel(), weft_type(in), comm_,
                      nullptr),
        "allgather");
  return c10::make_intrusive<DoneWork>(c10d::OpType::_ALLGATHER_BASE,
                                       std::vector<at::Tensor>{output});
}

c10::intrusive_ptr<c10d::Work> WeftBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  at::Tensor& input = only(inputs, "all_gather");
  TORCH_CHECK(outputs.size() == 1 && outputs[0].size() == static_cast<size_t>(getSize()),
              "weft: all_gather needs one output list of ", getSize(), " tensors");
  for (const at::Tensor& out : outputs[0]) {
    check_same(input, out, "all_gather");
    TORCH_CHECK(out.numel() == input.numel(), "weft: all_gather: an output tensor has ",
                out.numel(), " elements, the input ", input.numel());
  }
  // weft gathers into one buffer; the list's tensors need not be adjacent in memory.
  at::Tensor flat = at::empty({input.numel() * getSize()}, input.options());
  at::Tensor in = input.contiguous();
  _allgather_base(flat, in, opts);
  for (int r = 0; r < getSize(); ++r) {
    outputs[0][r].copy_(flat.narrow(0, r * input.numel(), input.numel()).view_as(outputs[0][r]));
  }
  return c10::make_intrusive<DoneWork>(c10d::OpType::ALLGATHER, outputs[0]);
}

c10::intrusive_ptr<c10d::Work> WeftBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  check_tensor(input, "the reduce_scatter input");
  check_tensor(output, "the reduce_scatter output");
  check_same(input, output, "reduce_scatter_tensor");
  TORCH_CHECK(input.numel() == output.numel() * getSize(), "weft: reduce_scatter_tensor: the "
              "input has ", input.numel(), " elements; it needs the output's ", output.numel(),
              " times ", getSize(), " ranks");
  std::lock_guard<std::mutex> turn(call_mu_);
  const bool overlap = aliasing(output, input, getRank()) == Aliasing::kOverlap;
  at::Tensor out = overlap ? at::empty_like(output) : output;
  check(weftReduceScatter(input.data_ptr(), out.data_ptr(), out.numel(), weft_type(input),
                          weft_op(opts.reduceOp), comm_, nullptr),
        "reduce_scatter");
  if (overlap) output.copy_(out);
  return c10::make_intrusive<DoneWork>(c10d::OpType::_REDUCE_SCATTER_BASE,
                                       std::vector<at::Tensor>{output});
}

c10::intrusive_ptr<c10d::Work> WeftBackend::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  at::Tensor& output = only(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1 && inputs[0].size() == static_cast<size_t>(getSize()),
              "weft: reduce_scatter needs one input list of ", getSize(), " tensors");
  std::vector<at::Tensor> flat_inputs;
  for (const at::Tensor& in : inputs[0]) {
    check_same(in, output, "reduce_scatter");
    TORCH_CHECK(in.numel() == output.numel(), "weft: reduce_scatter: an input tensor has ",
                in.numel(), " elements, the output ", output.numel());
    flat_inputs.push_back(in.reshape({-1}));
  }
  at::Tensor flat = at::cat(flat_inputs);
  at::Tensor out = output.contiguous();
  _reduce_scatter_base(out, flat, opts);
  if (!out.is_same(output)) output.copy_(out);
  return c10::make_intrusive<DoneWork>(c10d::OpType::REDUCE_SCATTER, outputs);
}

c10::intrusive_ptr<c10d::Work> WeftBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                      const c10d::BroadcastOptions& opts) {
  std::lock_guard<std::mutex> turn(call_mu_);
  at::Tensor& t = only(tensors, "broadcast");
  check_tensor(t, "the broadcast tensor");
  TORCH_CHECK(opts.rootTensor == 0, "weft: broadcast takes one tensor per process");
  check(weftBroadcast(t.data_ptr(), t.data_ptr(), t.numel(), weft_type(t),
                      static_cast<int>(opts.rootRank), comm_, nullptr),
        "broadcast");
  return c10::make_intrusive<DoneWork>(c10d::OpType::BROADCAST, tensors);
}

c10::intrusive_ptr<c10d::Work> WeftBackend::barrier(const c10d::BarrierOptions&) {
  std::lock_guard<std::mutex> turn(call_mu_);
  check(weftBarrier(comm_, nullptr), "barrier");
  return c10::make_intrusive<DoneWork>(c10d::OpType::BARRIER, std::vector<at::Tensor>{});
}

}  // namespace weft_torch
