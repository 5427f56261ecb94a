// The communicator's calls on device buffers and calls ordered on streams (src/comm.hpp):
// the staging path through pinned host buffers, the cuda_ipc path GPU to GPU
// (src/ipc_path.hpp), and the engine that runs them while the calls return at once
// (src/engine.hpp). Calls on host buffers are comm.cc's.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/reduce_device.hpp"
#include "src/comm.hpp"
#include "src/device/device.hpp"
#include "src/device/shared_fd.hpp"

namespace weft::detail {
namespace {

// Engine::Plan::path: how a call ordered on a stream moves its data.
constexpr int kStagingPath = 0;  // through pinned host buffers over the host path
constexpr int kIpcPath = 1;      // GPU to GPU through the cuda_ipc windows
constexpr int kLocalPath = 2;    // one rank: the stream's own copy, no host round (queue_local)

}  // namespace

void Comm::stop_engine(bool may_abort) {
  if (engine_ == nullptr) return;
  if (!engine_->settle(Deadline::after_ns(timeout_ns_), /*copied_out=*/false).ok() && may_abort) {
    abort();  // the calls left end at once, and their streams go on when they get there
  }
  const bool copied_out = engine_->settle(Deadline::after_ns(timeout_ns_), /*copied_out=*/true).ok();
  engine_.reset();
  // A stream that has not got there yet still copies in and out of the staging buffers:
  // they are left to it rather than freed under it.
  if (!copied_out) (void)staging_.release();
}

absl::Status Comm::settle(bool copied_out) {
  if (engine_ == nullptr) return absl::OkStatus();
  if (absl::Status s = engine_->settle(Deadline::after_ns(timeout_ns_).cancelled_by(&aborted_),
                                       copied_out);
      !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("rank ", rank_, ": ", s.message()));
  }
  return async_error();  // a call that ran there may have failed
}

absl::Status Comm::submit(const CollectiveArgs& args, const CallOptions& options) {
  if (absl::Status s = open_staging(name_of(args.kind)); !s.ok()) return s;
  if (!ipc_opened_) {
    if (absl::Status s = open_ipc(); !s.ok()) return s;
  }
  if (engine_ == nullptr) {
    auto queue = [this](const CollectiveArgs& call, const CallOptions& call_options,
                        Engine::Plan& plan) -> absl::Status {
      if (size_ == 1) {
        plan.path = kLocalPath;  // one piece
        return queue_local(call_options.stream, call, plan.first);
      }
      auto n = staging_->pieces(call, size_);
      if (!n.ok()) return n.status();
      plan.pieces = *n;
      plan.path = ipc_in_use(++device_calls_queued_) ? kIpcPath : kStagingPath;
      if (plan.path == kStagingPath) {
        return staging_->queue_on(call_options.stream, call, rank_, size_, plan.first);
      }
      auto per_piece = staging_->per_piece(call, size_);
      if (!per_piece.ok()) return per_piece.status();
      return ipc_->queue_on(call_options.stream, call, rank_, size_, plan.first, *per_piece,
                            plan.pieces);
    };
    auto run = [this](CollectiveArgs& call, const CallOptions& call_options,
                      const Engine::Plan& plan, const absl::Status& queued) -> absl::Status {
      device_calls_run_.fetch_add(1, std::memory_order_relaxed);  // before it may adopt a route
      // After a failure the links are closed: later calls only let their streams go on.
      absl::Status s = async_error();
      if (s.ok()) {
        s = !queued.ok()                 ? queued
            : plan.path == kStagingPath ? run_queued(call, call_options, plan.first)
            : plan.path == kIpcPath     ? run_ipc(call, call_options, plan)
                                        : absl::OkStatus();  // kLocalPath: the stream's
        if (!s.ok() && !failed_.load(std::memory_order_acquire)) fail(s);
      }
      return s;
    };
    engine_ = std::make_unique<Engine>(staging_->copier(), std::move(queue), std::move(run));
  }
  // Arguments are refused here, at the call, as NCCL's are; the rest is the engine's.
  if (auto n = staging_->pieces(args, size_); !n.ok()) return n.status();
  absl::Status s =
      engine_->submit(args, options, Deadline::after_ns(timeout_ns_).cancelled_by(&aborted_));
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("rank ", rank_, ": ", name_of(args.kind), ": ",
                                               s.message()));
  }
  return s;
}

absl::Status Comm::queue_local(void* stream, const CollectiveArgs& args, uint32_t piece) {
  device::Copier& copier = staging_->copier();
  using device::Word;
  // As every path does: the calls before, on this stream or another, are out first, so
  // that the words only move forward.
  if (auto s = copier.wait_on(stream, Word::kOut, piece - 1); !s.ok()) return s;
  // One rank's result of every collective is its input (an average of one is the value).
  const size_t bytes = args.kind == CollectiveKind::kBarrier ? 0 : args.count * args.elem_bytes();
  if (bytes > 0 && args.send != args.recv) {
    if (auto s = copier.copy_on(stream, args.recv, bytes, args.send, bytes, bytes, 1); !s.ok()) {
      return s;
    }
  }
  if (auto s = copier.signal_on(stream, Word::kIn, piece); !s.ok()) return s;
  return copier.signal_on(stream, Word::kOut, piece);
}

absl::Status Comm::run_ipc(CollectiveArgs& args, const CallOptions& options,
                           const Engine::Plan& plan) {
  return run_pieces(args, options, [&](auto run_host) {
    return ipc_->run_queued(args, plan.first, plan.pieces, [&] {
      CollectiveArgs check = args;  // the whole call's signature, every piece
      check.agree_only = true;
      return run_host(check);
    });
  });
}

absl::Status Comm::open_ipc() {
  ipc_opened_ = true;
  if (!config_.cuda_ipc || size_ < 2 || topology_.local_size() != size_) return absl::OkStatus();
  using transport::cuda_ipc::Address;
  // Until every rank has mapped every window (the allreduce below), peers take descriptors.
  device::FdPost post;
  auto context = std::make_unique<transport::cuda_ipc::Context>(staging_->copier(), rank_, size_,
                                                                config_.staging_bytes);
  // Host calls, made by every rank at its first call ordered on a stream.
  std::vector<std::byte> addresses((size_ + 1) * Address::kBytes);
  if (absl::Status s = context->address().encode(addresses.data()); !s.ok()) return s;
  CollectiveArgs gather{.kind = CollectiveKind::kAllgather,
                        .send = addresses.data(),
                        .recv = addresses.data() + Address::kBytes,
                        .count = Address::kBytes,
                        .type = DataType::kUint8};
  if (absl::Status s = run_host(gather, CallOptions{}); !s.ok()) return s;
  std::vector<Address> all;
  absl::Status mapped = kernels_;
  for (int r = 0; r < size_ && mapped.ok(); ++r) {
    auto a = Address::decode(gather.recv + r * Address::kBytes);
    if (a.ok()) all.push_back(*std::move(a));
    mapped = a.status();
  }
  if (mapped.ok()) mapped = context->connect(all);
  absl::StatusOr<std::byte*> scratch = absl::UnknownError("");
  if (mapped.ok()) {
    scratch = staging_->copier().device_buffer(config_.staging_bytes);
    mapped = scratch.status();
  }
  uint8_t ok = mapped.ok() ? 1 : 0;
  CollectiveArgs every{.kind = CollectiveKind::kAllreduce, .send = reinterpret_cast<std::byte*>(&ok),
                       .recv = reinterpret_cast<std::byte*>(&ok), .count = 1,
                       .type = DataType::kUint8, .op = ReduceOp::kMin};
  if (absl::Status s = run_host(every, CallOptions{}); !s.ok()) return s;
  if (ok == 0) {
    // Not worth failing a job for: the host path carries the calls, more slowly. Every rank
    // is past mapping (the allreduce), so the windows go back now, not with the copier.
    context->release();
    if (!mapped.ok()) {
      std::fprintf(stderr, "weft: rank %d: cuda_ipc is off, calls on streams stage through the "
                   "host path: %s\n", rank_, std::string(mapped.message()).c_str());
    }
    return absl::OkStatus();
  }
  ipc_ = std::make_unique<IpcPath>(std::move(context), staging_->copier(), config_.device_stand_in,
                                   *scratch);
  MutexLock lock(&ipc_mu_);
  ipc_switches_.emplace_back(0, (route_.isolated().size() == 0));
  return absl::OkStatus();
}

bool Comm::ipc_in_use(uint32_t call) {
  if (ipc_ == nullptr) return false;
  MutexLock lock(&ipc_mu_);
  // Calls come in order: a switch every later call is past makes the ones before it moot.
  while (ipc_switches_.size() > 1 && call >= ipc_switches_[1].first) {
    ipc_switches_.erase(ipc_switches_.begin());
  }
  return ipc_switches_.front().second;
}

bool Comm::returns_at_once(const CollectiveArgs& args, const CallOptions& options) const {
  // Standing in, a call that names a StandInStream: no hardware queues to share.
  if (config_.device_stand_in) return options.stream != nullptr;
  // On a GPU, a call on device buffers (NULL stream: the default one), unless ranks share
  // this process's CUDA context. Host buffers with a stream wait for it and run here: a stream's copy between
  // two host buffers would run at once, not in the stream's order.
  return !gpu_shared_ && device::either_on_device(args.send, args.recv);
}

bool Comm::on_device(const CollectiveArgs& args, const CallOptions& options) const {
  // Without a GPU no pointer is a device's, and either_on_device() asks nothing of CUDA.
  return config_.device_stand_in || options.stream != nullptr ||
         device::either_on_device(args.send, args.recv);
}

absl::Status Comm::open_staging(const char* what) {
  if (!config_.device_stand_in) {
    if (absl::Status s = device::require_gpu(what); !s.ok()) return s;
  }
  if (staging_ == nullptr) {  // the first call on device buffers pins the staging buffers
    // The kernels load before this communicator queues a wait on any stream (reduce_device.hpp
    // says why). Only cuda_ipc needs them: where they cannot load (a GPU this build has no
    // code for), calls stage through the host and open_ipc() says why cuda_ipc is off.
    if (!config_.device_stand_in) {
      kernels_ = load_reduce_kernels();
      if (kernels_.ok()) kernels_ = device::load_kernels();
    }
    auto copier = config_.device_stand_in
                      ? absl::StatusOr<std::unique_ptr<device::Copier>>(device::stand_in_copier())
                      : device::cuda_copier();
    if (!copier.ok()) return copier.status();
    auto staging = Staging::create(*std::move(copier), config_.staging_bytes);
    if (!staging.ok()) {
      return absl::Status(staging.status().code(),
                          absl::StrCat(what, " on rank ", rank_, ": ", staging.status().message()));
    }
    staging_ = *std::move(staging);
  }
  return absl::OkStatus();
}

absl::Status Comm::run_staged(CollectiveArgs& args, const CallOptions& options) {
  const char* what = name_of(args.kind);
  if (absl::Status s = open_staging(what); !s.ok()) return s;
  return run_pieces(args, options, [&](auto run_host) {
    return staging_->run(args, rank_, size_, options.stream, run_host);
  });
}

absl::Status Comm::run_queued(CollectiveArgs& args, const CallOptions& options, uint32_t first) {
  return run_pieces(args, options, [&](auto run_host) {
    return staging_->run_queued(args, rank_, size_, first, run_host);
  });
}

absl::Status Comm::run_pieces(
    CollectiveArgs& args, const CallOptions& options,
    absl::FunctionRef<absl::Status(absl::FunctionRef<absl::Status(CollectiveArgs&)>)> pieces) {
  args.deadline = (options.timeout > absl::ZeroDuration() ? Deadline::after(options.timeout)
                                                          : Deadline::after_ns(timeout_ns_))
                      .cancelled_by(&aborted_);
  // Every piece runs within what is left of the whole call's time, not a timeout of its own.
  CallOptions piece_options = options;
  absl::Status s = pieces([&](CollectiveArgs& piece) {
    piece_options.timeout = std::max(args.deadline.remaining(), absl::Nanoseconds(1));
    return run_host(piece, piece_options);
  });
  if (!s.ok() && s.message().find("rank ") != 0) {
    return absl::Status(s.code(), absl::StrCat("rank ", rank_, ": ", name_of(args.kind), ": ",
                                               s.message()));
  }
  return s;
}


void Comm::switch_ipc_path() {
  if (ipc_ == nullptr) return;
  // Peer access has no path around an isolated link (an NVLink storm): calls on streams
  // stage through the host path, whose ring avoids it, from a call every rank agrees on.
  const uint32_t from = device_calls_run_.load(std::memory_order_relaxed) + Engine::kMostQueued + 1;
  const bool usable = route_.isolated().size() == 0;
  MutexLock lock(&ipc_mu_);
  if (ipc_switches_.back().second == usable) return;
  ipc_switches_.emplace_back(from, usable);
  if (rank_ == 0) {
    std::fprintf(stderr, "weft: rank 0: calls ordered on streams go %s from call %u on\n",
                 usable ? "GPU to GPU again (cuda_ipc)" : "through the host path, not cuda_ipc,",
                 from);
  }
}

}  // namespace weft::detail
