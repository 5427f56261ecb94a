// The Work of a weft collective: complete when handed out (weft's calls return with the
// result in place), its future holding the output tensors, as DDP's communication hooks
// expect of getFuture().
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <vector>

namespace weft_torch {

class DoneWork final : public c10d::Work {
 public:
  DoneWork(c10d::OpType type, std::vector<at::Tensor> outputs)
      : c10d::Work(-1, type),
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()))) {
    future_->markCompleted(c10::IValue(outputs));
    outputs_ = std::move(outputs);
  }

  bool isCompleted() override { return true; }
  bool isSuccess() const override { return true; }
  bool wait(std::chrono::milliseconds /*timeout*/) override { return true; }
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::vector<at::Tensor> outputs_;
};

}  // namespace weft_torch
