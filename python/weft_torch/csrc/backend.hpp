// weft as a c10d backend: torch.distributed's collectives on CPU tensors over weft's C API
// (weft/weft.h, whose ABI does not depend on the C++ library or Abseil that PyTorch was built
// with). weft's calls are synchronous: each returns with its result in place, so every Work
// this backend hands out is already complete and its future already holds the tensors.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include <weft/weft.h>

namespace weft_torch {

class WeftBackend final : public c10d::Backend {
 public:
  // What torch.distributed.Backend.register_backend calls for backend="weft": rank 0 makes
  // weft's unique id and puts it in `store` (the store init_process_group made, already
  // prefixed for this group); every other rank reads it there; all join the communicator.
  static c10::intrusive_ptr<c10d::Backend> create(const c10::intrusive_ptr<c10d::Store>& store,
                                                  int rank, int size,
                                                  const std::chrono::duration<float>& timeout);
  WeftBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size);
  ~WeftBackend() override;

  const std::string getBackendName() const override { return "weft"; }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // destroy_process_group: closes the communicator (weftCommDestroy); abort: weftCommAbort.
  void shutdown() override;
  void abort() override;

 private:
  // Throws c10::DistBackendError (Python: torch.distributed.DistBackendError) with weft's
  // message when `result` is not weftSuccess.
  void check(weftResult_t result, const char* what) const;

  // One thread drives a weft communicator at a time, and torch's Python collectives release
  // the GIL: calls (and shutdown) take turns here. abort() does not wait for them (it is how
  // a stuck call ends); handle_mu_ only keeps comm_ from being destroyed under it.
  std::mutex call_mu_;
  std::mutex handle_mu_;
  weftComm_t comm_ = nullptr;
};

}  // namespace weft_torch
