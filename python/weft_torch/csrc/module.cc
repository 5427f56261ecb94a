// weft_torch._C: the function torch.distributed calls to make a weft process group.
#include <pybind11/chrono.h>
#include <torch/extension.h>

#include "backend.hpp"

PYBIND11_MODULE(_C, m) {
  m.doc() = "weft as a torch.distributed backend (use: import weft_torch)";
  m.def("create_backend", &weft_torch::WeftBackend::create, py::arg("store"), py::arg("rank"),
        py::arg("size"), py::arg("timeout"),
        py::call_guard<py::gil_scoped_release>());
  m.def("version", [] {
    int v = 0;
    weftGetVersion(&v);
    return v;
  });
}
