// The C API of weft/weft.h over weft::Communicator. Each entry point checks the handle and
// its pointers, converts the C enums with a range check (a C enum may hold any int, and
// weft::DataType is a uint8_t that would wrap 256 to a valid type), runs the C++ call, and
// turns its absl::Status into a weftResult_t plus a message for weftGetLastError. No C++
// exception crosses into C.
#include "weft/weft.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "weft/weft.hpp"
#include "src/base/mutex.hpp"
#include "src/comm.hpp"
#include "src/device/device.hpp"

struct weftComm {
  uint64_t magic;  // kLiveMagic while the comm is usable; cleared by weftCommDestroy
  std::unique_ptr<weft::Communicator> comm;
  // The message of the last call that failed on this comm. Locked: weftCommGetAsyncError
  // records one from any thread (a watchdog's) while the driving thread's calls record theirs.
  weft::Mutex error_mu;
  std::string last_error ABSL_GUARDED_BY(error_mu);

  void record(std::string message) {
    weft::MutexLock lock(&error_mu);
    last_error = std::move(message);
  }
  std::string message() {
    weft::MutexLock lock(&error_mu);
    return last_error;
  }
};

namespace {

constexpr uint64_t kLiveMagic = 0x5745'4654'434f'4d4dULL;  // "WEFTCOMM"

static_assert(sizeof(weftUniqueId) == sizeof(weft::UniqueId::bytes));
static_assert(weftFloat32 == static_cast<int>(weft::DataType::kFloat32) &&
              weftBfloat16 == static_cast<int>(weft::DataType::kBFloat16) &&
              weftBfloat16 + 1 == weft::kNumDataTypes);
static_assert(weftAvg == static_cast<int>(weft::ReduceOp::kAvg) &&
              weftAvg + 1 == weft::kNumReduceOps);

// Failures of calls that have no communicator to record them in (init, a bad handle).
thread_local std::string t_last_error;
// What weftGetLastError last returned on this thread: a copy, so that another thread
// recording a failure on the same comm cannot free the string under its reader.
thread_local std::string t_read_error;

weftResult_t to_result(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk: return weftSuccess;
    case absl::StatusCode::kInvalidArgument: return weftInvalidArgument;
    case absl::StatusCode::kNotFound: return weftInvalidArgument;  // a WEFT_* name that names nothing
    case absl::StatusCode::kResourceExhausted: return weftSystemError;
    case absl::StatusCode::kPermissionDenied: return weftSystemError;
    case absl::StatusCode::kDataLoss: return weftRemoteError;  // a peer's bytes out of step
    case absl::StatusCode::kDeadlineExceeded: return weftTimeout;
    case absl::StatusCode::kUnavailable: return weftRemoteError;
    case absl::StatusCode::kFailedPrecondition: return weftInvalidUsage;
    case absl::StatusCode::kAborted: return weftInvalidUsage;  // weftCommAbort was called
    default: return weftInternalError;
  }
}

// Records `status` in the comm's slot (or this thread's when comm is null) and maps it.
weftResult_t finish(weftComm* comm, const absl::Status& status) {
  if (status.ok()) return weftSuccess;
  if (comm != nullptr) {
    comm->record(std::string(status.message()));
  } else {
    t_last_error = std::string(status.message());
  }
  return to_result(status.code());
}

// Runs `body` (which returns absl::Status), keeping C++ exceptions out of C callers.
template <typename Body>
weftResult_t guarded(weftComm* comm, const char* what, Body&& body) {
  try {
    return finish(comm, body());
  } catch (const std::bad_alloc&) {
    finish(comm, absl::ResourceExhaustedError(absl::StrCat(what, ": out of memory")));
    return weftSystemError;
  } catch (const std::exception& e) {
    return finish(comm, absl::InternalError(absl::StrCat(what, ": ", e.what())));
  } catch (...) {
    return finish(comm, absl::InternalError(absl::StrCat(what, ": unknown exception")));
  }
}

// The handle's magic, read as bytes so a handle that points at garbage is not used as an
// object first. A handle that points at unmapped memory cannot be detected.
bool is_live(const weftComm* comm) {
  if (comm == nullptr) return false;
  uint64_t magic = 0;
  std::memcpy(&magic, reinterpret_cast<const unsigned char*>(comm), sizeof magic);
  return magic == kLiveMagic;
}

weftResult_t bad_handle(const weftComm* comm, const char* what) {
  return finish(nullptr, absl::FailedPreconditionError(absl::StrCat(
                             what, ": ", comm == nullptr ? "the communicator is NULL"
                                                          : "not an initialised communicator "
                                                            "(never initialised, or destroyed)",
                             "; create one with weftCommInitRank or weftCommInitFromEnv")));
}

weftResult_t null_arg(weftComm* comm, const char* what, const char* arg) {
  return finish(comm, absl::InvalidArgumentError(absl::StrCat(what, ": ", arg, " is NULL")));
}

// A C caller may pass any int as a C enum, but in C++ loading an enum whose value lies
// outside the enumerators' range is undefined: read the argument's bytes as an integer.
template <typename Enum>
int raw_value(const Enum& e) {
  std::underlying_type_t<Enum> v;
  std::memcpy(&v, &e, sizeof v);
  return static_cast<int>(v);
}

// Converts the C enums, refusing values outside them before they are narrowed to uint8_t.
absl::StatusOr<weft::DataType> to_type(const char* what, const weftDataType_t& in) {
  const int v = raw_value(in);
  if (v < 0 || v >= weft::kNumDataTypes) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": unknown data type ", v));
  }
  return static_cast<weft::DataType>(v);
}

absl::StatusOr<weft::ReduceOp> to_op(const char* what, const weftRedOp_t& in) {
  const int v = raw_value(in);
  if (v < 0 || v >= weft::kNumReduceOps) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": unknown reduction op ", v));
  }
  return static_cast<weft::ReduceOp>(v);
}

// A reducing call's type and op, converted: the first that is unknown is the error.
struct TypeAndOp {
  weft::DataType type;
  weft::ReduceOp op;
};
absl::StatusOr<TypeAndOp> to_type_and_op(const char* what, const weftDataType_t& datatype,
                                         const weftRedOp_t& op) {
  auto type = to_type(what, datatype);
  if (!type.ok()) return type.status();
  auto reduce_op = to_op(what, op);
  if (!reduce_op.ok()) return reduce_op.status();
  return TypeAndOp{*type, *reduce_op};
}

// What every collective checks first: a live handle, then whether a stream can be used. A
// stream asks for the GPU path: where this process can use no GPU the error says why
// (src/device/).
weftResult_t check_call(weftComm* comm, const char* what, const void* stream) {
  if (!is_live(comm)) return bad_handle(comm, what);
  if (stream == nullptr || comm->comm->impl().config().device_stand_in) return weftSuccess;
  if (auto gpu = weft::device::require_gpu(what); !gpu.ok()) {
    return finish(comm, absl::InvalidArgumentError(gpu.message()));
  }
  return weftSuccess;
}

// `create` returns absl::StatusOr<std::unique_ptr<weft::Communicator>>.
template <typename Create>
weftResult_t init(weftComm_t* out, const char* what, Create&& create) {
  if (out == nullptr) return null_arg(nullptr, what, "the comm out-pointer");
  *out = nullptr;
  return guarded(nullptr, what, [&]() -> absl::Status {
    auto created = create();
    if (!created.ok()) return created.status();
    auto comm = std::make_unique<weftComm>();
    comm->magic = kLiveMagic;
    comm->comm = *std::move(created);
    *out = comm.release();
    return absl::OkStatus();
  });
}

void copy_text(char* dst, size_t capacity, const std::string& src) {
  const size_t n = std::min(src.size(), capacity - 1);
  std::memcpy(dst, src.data(), n);
  dst[n] = '\0';
}

void to_c(const weft::HealthScope& scope, weft::HealthState state, const std::string& reason,
          weftLinkHealth_t* out) {
  std::memset(out, 0, sizeof *out);
  copy_text(out->kind, sizeof out->kind, scope.kind);
  copy_text(out->name, sizeof out->name, scope.name);
  out->peer = scope.peer;
  out->rail = scope.rail;
  out->gpu = scope.gpu;
  out->link = scope.link;
  copy_text(out->device, sizeof out->device, scope.device);
  out->state = static_cast<weftHealthState_t>(static_cast<int>(state));
  copy_text(out->reason, sizeof out->reason, reason);
}

}  // namespace

extern "C" {

weftResult_t weftGetVersion(int* version) {
  if (version == nullptr) return null_arg(nullptr, "weftGetVersion", "version");
  *version = WEFT_VERSION_CODE;
  return weftSuccess;
}

weftResult_t weftGetUniqueId(weftUniqueId* uniqueId) {
  if (uniqueId == nullptr) return null_arg(nullptr, "weftGetUniqueId", "uniqueId");
  return guarded(nullptr, "weftGetUniqueId", [&]() -> absl::Status {
    auto id = weft::make_unique_id();
    if (!id.ok()) return id.status();
    std::memcpy(uniqueId->internal, id->bytes.data(), sizeof uniqueId->internal);
    return absl::OkStatus();
  });
}

weftResult_t weftCommInitRank(weftComm_t* comm, int nranks, weftUniqueId commId, int rank) {
  return init(comm, "weftCommInitRank", [&] {
    weft::UniqueId id;
    std::memcpy(id.bytes.data(), commId.internal, id.bytes.size());
    return weft::Communicator::create(id, rank, nranks);
  });
}

weftResult_t weftCommInitFromEnv(weftComm_t* comm) {
  return init(comm, "weftCommInitFromEnv", [] { return weft::Communicator::create_from_env(); });
}

weftResult_t weftCommDestroy(weftComm_t comm) {
  if (comm == nullptr) return weftSuccess;
  if (!is_live(comm)) return bad_handle(comm, "weftCommDestroy");
  comm->magic = 0;  // a later use of this handle is then refused, where the memory allows
  return guarded(nullptr, "weftCommDestroy", [&] {
    delete comm;
    return absl::OkStatus();
  });
}

weftResult_t weftCommAbort(weftComm_t comm) {
  if (!is_live(comm)) return bad_handle(comm, "weftCommAbort");
  comm->comm->abort();
  return weftSuccess;
}

weftResult_t weftCommGetAsyncError(weftComm_t comm, weftResult_t* asyncError) {
  if (!is_live(comm)) return bad_handle(comm, "weftCommGetAsyncError");
  if (asyncError == nullptr) return null_arg(comm, "weftCommGetAsyncError", "asyncError");
  const absl::Status s = comm->comm->async_error();
  *asyncError = s.ok() ? weftSuccess : finish(comm, s);
  return weftSuccess;
}

weftResult_t weftCommHealth(weftComm_t comm, weftLinkHealth_t* health, int capacity, int* count) {
  if (!is_live(comm)) return bad_handle(comm, "weftCommHealth");
  if (count == nullptr) return null_arg(comm, "weftCommHealth", "count");
  if (capacity > 0 && health == nullptr) return null_arg(comm, "weftCommHealth", "health");
  const std::vector<weft::LinkHealth> all = comm->comm->health();
  *count = static_cast<int>(all.size());
  for (int i = 0; i < capacity && i < *count; ++i) {
    to_c(all[i].scope, all[i].state, all[i].reason, &health[i]);
    const auto& counters = all[i].counters;
    health[i].counterCount = static_cast<int>(std::min<size_t>(counters.size(), WEFT_HEALTH_MAX_COUNTERS));
    for (int c = 0; c < health[i].counterCount; ++c) {
      copy_text(health[i].counters[c].name, sizeof health[i].counters[c].name, counters[c].name);
      health[i].counters[c].value = counters[c].value;
      health[i].counters[c].rate = counters[c].rate;
    }
  }
  return weftSuccess;
}

weftResult_t weftCommHealthPoll(weftComm_t comm, weftHealthChange_t* change, int* got) {
  if (!is_live(comm)) return bad_handle(comm, "weftCommHealthPoll");
  if (change == nullptr) return null_arg(comm, "weftCommHealthPoll", "change");
  if (got == nullptr) return null_arg(comm, "weftCommHealthPoll", "got");
  *got = 0;
  const auto c = comm->comm->next_health_change();
  if (!c) return weftSuccess;
  std::memset(change, 0, sizeof *change);
  change->time = absl::ToDoubleSeconds(c->time - absl::UnixEpoch());
  to_c(c->scope, c->to, c->reason, &change->scope);
  change->from = static_cast<weftHealthState_t>(static_cast<int>(c->from));
  change->to = static_cast<weftHealthState_t>(static_cast<int>(c->to));
  copy_text(change->counter, sizeof change->counter, c->counter);
  change->value = c->value;
  change->measured = c->measured;
  change->threshold = c->threshold;
  change->windowSeconds = absl::ToDoubleSeconds(c->window);
  *got = 1;
  return weftSuccess;
}

weftResult_t weftCommShrink(weftComm_t comm, weftComm_t* newcomm, int* droppedRanks,
                            int* droppedCount) {
  if (newcomm != nullptr) *newcomm = nullptr;  // on every failure, as the header promises
  if (!is_live(comm)) return bad_handle(comm, "weftCommShrink");
  if (droppedRanks != nullptr && droppedCount == nullptr) {
    return null_arg(comm, "weftCommShrink", "droppedCount (droppedRanks is not)");
  }
  std::vector<int> dropped;
  const weftResult_t r = init(newcomm, "weftCommShrink", [&] { return comm->comm->shrink(&dropped); });
  if (r != weftSuccess) {
    comm->record(t_last_error);  // the failure belongs to `comm`, not only to this thread
    return r;
  }
  if (droppedRanks != nullptr) {
    std::copy(dropped.begin(), dropped.end(), droppedRanks);  // at most comm's size
    *droppedCount = static_cast<int>(dropped.size());
  } else if (droppedCount != nullptr) {
    *droppedCount = static_cast<int>(dropped.size());
  }
  return weftSuccess;
}

weftResult_t weftCommCount(const weftComm_t comm, int* count) {
  if (!is_live(comm)) return bad_handle(comm, "weftCommCount");
  if (count == nullptr) return null_arg(comm, "weftCommCount", "count");
  *count = comm->comm->size();
  return weftSuccess;
}

weftResult_t weftCommUserRank(const weftComm_t comm, int* rank) {
  if (!is_live(comm)) return bad_handle(comm, "weftCommUserRank");
  if (rank == nullptr) return null_arg(comm, "weftCommUserRank", "rank");
  *rank = comm->comm->rank();
  return weftSuccess;
}

weftResult_t weftAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           weftDataType_t datatype, weftRedOp_t op, weftComm_t comm,
                           void* stream) {
  const char* what = "weftAllReduce";
  if (weftResult_t r = check_call(comm, what, stream); r != weftSuccess) return r;
  return guarded(comm, what, [&]() -> absl::Status {
    auto in = to_type_and_op(what, datatype, op);
    if (!in.ok()) return in.status();
    weft::AllreduceOptions options;
    options.op = in->op;
    options.stream = stream;
    return comm->comm->allreduce(sendbuff, recvbuff, count, in->type, options);
  });
}

weftResult_t weftAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           weftDataType_t datatype, weftComm_t comm, void* stream) {
  const char* what = "weftAllGather";
  if (weftResult_t r = check_call(comm, what, stream); r != weftSuccess) return r;
  return guarded(comm, what, [&]() -> absl::Status {
    auto type = to_type(what, datatype);
    if (!type.ok()) return type.status();
    weft::AllgatherOptions options;
    options.stream = stream;
    return comm->comm->allgather(sendbuff, recvbuff, sendcount, *type, options);
  });
}

weftResult_t weftReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               weftDataType_t datatype, weftRedOp_t op, weftComm_t comm,
                               void* stream) {
  const char* what = "weftReduceScatter";
  if (weftResult_t r = check_call(comm, what, stream); r != weftSuccess) return r;
  return guarded(comm, what, [&]() -> absl::Status {
    auto in = to_type_and_op(what, datatype, op);
    if (!in.ok()) return in.status();
    weft::ReduceScatterOptions options;
    options.op = in->op;
    options.stream = stream;
    return comm->comm->reduce_scatter(sendbuff, recvbuff, recvcount, in->type, options);
  });
}

weftResult_t weftBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           weftDataType_t datatype, int root, weftComm_t comm, void* stream) {
  const char* what = "weftBroadcast";
  if (weftResult_t r = check_call(comm, what, stream); r != weftSuccess) return r;
  return guarded(comm, what, [&]() -> absl::Status {
    auto type = to_type(what, datatype);
    if (!type.ok()) return type.status();
    weft::BroadcastOptions options;
    options.root = root;
    options.stream = stream;
    return comm->comm->broadcast(sendbuff, recvbuff, count, *type, options);
  });
}

weftResult_t weftBarrier(weftComm_t comm, void* stream) {
  if (weftResult_t r = check_call(comm, "weftBarrier", stream); r != weftSuccess) return r;
  return guarded(comm, "weftBarrier", [&] {
    weft::BarrierOptions options;
    options.stream = stream;
    return comm->comm->barrier(options);
  });
}

const char* weftGetErrorString(weftResult_t result) {
  switch (raw_value(result)) {
    case weftSuccess: return "no error";
    case weftUnhandledError: return "unhandled device error";
    case weftSystemError: return "system error (out of memory or a system call failed)";
    case weftInternalError: return "internal error";
    case weftInvalidArgument: return "invalid argument";
    case weftInvalidUsage: return "invalid usage (communicator not usable)";
    case weftRemoteError: return "remote error (a peer went away or a link failed)";
    case weftInProgress: return "operation in progress";
    case weftTimeout: return "timeout (a wait ran past WEFT_TIMEOUT)";
  }
  return "unknown weftResult_t";
}

const char* weftGetLastError(weftComm_t comm) {
  t_read_error = is_live(comm) ? comm->message() : t_last_error;
  return t_read_error.c_str();
}

}  // extern "C"
