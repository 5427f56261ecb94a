// How fast the GPU's reduction kernels run against a device-to-device copy in the same run:
// both move memory, so each is given in GB/s of memory traffic (a copy reads and writes each
// byte, a reduction reads two and writes one) and the kernel as a fraction of the copy.
// Prints a table; exits 1 without a GPU (saying why) or when a kernel fails.
//
//   reduce_device_bench [MiB per buffer, default 256] [iterations, default 20]
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "collectives/reduce_device.hpp"
#include "src/device/device.hpp"

namespace {

using weft::DataType;
using weft::ReduceOp;

bool check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "reduce_device_bench: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

// Milliseconds per run of `body`, after two runs to warm up.
template <class Body>
double time_ms(int iterations, Body body) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (int i = 0; i < 2; ++i) body();
  cudaEventRecord(start);
  for (int i = 0; i < iterations; ++i) body();
  cudaEventRecord(stop);
  cudaEventSynchronize(stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / iterations;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--help") {
    std::printf("usage: reduce_device_bench [MiB per buffer, default 256] [iterations, default 20]\n"
                "GPU reduction kernels' memory throughput against a device-to-device copy.\n");
    return 0;
  }
  const size_t mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 256;
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 20;
  if (!weft::device::gpus().ok()) {
    std::fprintf(stderr, "reduce_device_bench: no GPU: %s\n",
                 std::string(weft::device::gpus().status().message()).c_str());
    return 1;
  }
  const size_t bytes = mib << 20;
  void *a = nullptr, *b = nullptr, *out = nullptr;
  if (!check(cudaMalloc(&a, bytes), "cudaMalloc") || !check(cudaMalloc(&b, bytes), "cudaMalloc") ||
      !check(cudaMalloc(&out, bytes), "cudaMalloc")) {
    return 1;
  }
  cudaMemset(a, 0, bytes);
  cudaMemset(b, 0, bytes);
  std::printf("# %s, %zu MiB per buffer, %d iterations\n", weft::device::describe().c_str(), mib,
              iterations);
  const double copy_ms = time_ms(iterations, [&] { cudaMemcpyAsync(out, a, bytes, cudaMemcpyDeviceToDevice); });
  const double copy_gbs = 2.0 * bytes / copy_ms / 1e6;
  std::printf("%-10s %-5s %10s %12s %10s\n", "type", "op", "ms", "GB/s moved", "of copy");
  std::printf("%-10s %-5s %10.3f %12.1f %10s\n", "copy", "-", copy_ms, copy_gbs, "1.000");
  bool ok = true;
  const struct {
    DataType type;
    ReduceOp op;
  } cases[] = {{DataType::kFloat32, ReduceOp::kSum},  {DataType::kBFloat16, ReduceOp::kSum},
               {DataType::kFloat16, ReduceOp::kSum},  {DataType::kFloat64, ReduceOp::kSum},
               {DataType::kInt32, ReduceOp::kSum},    {DataType::kInt8, ReduceOp::kSum},
               {DataType::kFloat32, ReduceOp::kMax},  {DataType::kBFloat16, ReduceOp::kProd}};
  for (const auto& c : cases) {
    const size_t count = bytes / weft::size_of(c.type);
    absl::Status status;
    const double ms = time_ms(iterations, [&] {
      if (status.ok()) status = weft::reduce_on_device(out, a, b, count, c.type, c.op, nullptr);
    });
    if (!status.ok() || !check(cudaGetLastError(), "the kernel")) {
      std::fprintf(stderr, "reduce_device_bench: %s %s: %s\n", weft::name_of(c.type),
                   weft::name_of(c.op), std::string(status.message()).c_str());
      ok = false;
      continue;
    }
    const double gbs = 3.0 * bytes / ms / 1e6;
    std::printf("%-10s %-5s %10.3f %12.1f %10.3f\n", weft::name_of(c.type), weft::name_of(c.op), ms,
                gbs, gbs / copy_gbs);
  }
  cudaFree(a);
  cudaFree(b);
  cudaFree(out);
  return ok ? 0 : 1;
}
