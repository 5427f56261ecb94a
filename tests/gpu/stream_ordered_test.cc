// Calls on device buffers ordered on the caller's stream (src/engine.hpp), on a real GPU,
// with ranks as processes (ranks in one process share a CUDA context and take the
// synchronous path instead): every rank is this program run again, so that no rank inherits
// a CUDA context through fork. Each rank blocks its stream behind a host function, queues
// its input and chained in-place allreduces, and checks that the calls returned while the
// stream was still blocked, then that the results, once the stream ran, are exact; then
// that a call on a stream being captured into a CUDA graph is refused.
//
//   stream_ordered_test [ranks]   (default 2; exit 77, "skipped", where there is no GPU)
//
// scripts/gpu-check runs it as it is and with CUDA_DEVICE_MAX_CONNECTIONS=1 (every stream
// on one hardware queue).
#include <cuda_runtime.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "src/device/device.hpp"
#include "weft/weft.h"

extern char** environ;

namespace {

constexpr int kSkipped = 77;
constexpr size_t kCount = (1 << 20) + 3;  // floats: several pieces of WEFT_STAGING_BYTES
constexpr int kCalls = 4;
constexpr int kRankSeconds = 100;  // WEFT_TIMEOUT is 20: a rank that fails says so first;
                                   // scripts/gpu-check bounds a run at 60 s, with stacks

std::string hex(const weftUniqueId& id) {
  std::string out;
  for (char c : id.internal) {
    char b[3];
    std::snprintf(b, sizeof b, "%02x", static_cast<unsigned char>(c));
    out += b;
  }
  return out;
}

weftUniqueId unhex(const char* s) {
  weftUniqueId id{};
  for (size_t i = 0; i < sizeof id.internal; ++i) {
    id.internal[i] = static_cast<char>(std::stoi(std::string(s + 2 * i, 2), nullptr, 16));
  }
  return id;
}

int fail(int rank, const std::string& what) {
  std::fprintf(stderr, "stream_ordered_test: rank %d: FAIL: %s\n", rank, what.c_str());
  return 1;
}

int run_rank(int rank, int ranks, const weftUniqueId& id) {
  if (auto gpus = weft::device::gpus(); !gpus.ok()) {
    std::fprintf(stderr, "stream_ordered_test: skipped: no GPU to test on: %s\n",
                 std::string(gpus.status().message()).c_str());
    return kSkipped;
  }
  cudaSetDevice(0);
  weftComm_t comm = nullptr;
  if (weftCommInitRank(&comm, ranks, id, rank) != weftSuccess) {
    return fail(rank, std::string("weftCommInitRank: ") + weftGetLastError(nullptr));
  }
  cudaStream_t stream = nullptr;
  float* x = nullptr;
  if (cudaStreamCreate(&stream) != cudaSuccess || cudaMalloc(&x, kCount * sizeof(float)) != cudaSuccess) {
    return fail(rank, "cudaStreamCreate or cudaMalloc failed");
  }
  // The input from pinned memory: a copy from pageable memory returns only once its stream
  // has run it, which the gate below holds back until after this copy returned.
  float* mine = nullptr;
  if (cudaMallocHost(&mine, kCount * sizeof(float)) != cudaSuccess) {
    return fail(rank, "cudaMallocHost failed");
  }
  std::fill(mine, mine + kCount, static_cast<float>(rank + 1));
  std::vector<float> got(kCount);
  // A first call before the gate: it sets the communicator's device path up (pins its
  // buffers, loads kernels), which may wait until the GPU has run everything queued, and
  // behind the gate, which opens only once the calls returned, that never happens (it hung
  // so on an H200). A stream a real program holds opens by itself.
  cudaMemcpyAsync(x, mine, kCount * sizeof(float), cudaMemcpyHostToDevice, stream);
  if (weftAllReduce(x, x, kCount, weftFloat, weftSum, comm, stream) != weftSuccess ||
      cudaStreamSynchronize(stream) != cudaSuccess) {
    return fail(rank, std::string("the first call, before the gate: ") + weftGetLastError(comm));
  }
  cudaMemcpy(got.data(), x, kCount * sizeof(float), cudaMemcpyDeviceToHost);
  if (got[0] != ranks * (ranks + 1) / 2.0f || got[kCount - 1] != got[0]) {
    return fail(rank, "the first call, before the gate: wrong result " + std::to_string(got[0]));
  }
  // The gate: a host function that holds the stream until the calls have returned.
  static std::atomic<bool> open{false};
  cudaLaunchHostFunc(stream, [](void*) {
    while (!open.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }, nullptr);
  cudaMemcpyAsync(x, mine, kCount * sizeof(float), cudaMemcpyHostToDevice, stream);
  for (int c = 0; c < kCalls; ++c) {
    if (weftAllReduce(x, x, kCount, weftFloat, weftSum, comm, stream) != weftSuccess) {
      return fail(rank, std::string("weftAllReduce: ") + weftGetLastError(comm));
    }
  }
  const bool held = cudaStreamQuery(stream) == cudaErrorNotReady;
  open.store(true);
  if (cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess) {
    return fail(rank, std::string("cudaStreamSynchronize: ") + cudaGetErrorString(e));
  }
  if (!held) return fail(rank, "the calls did not return before their stream ran them");
  weftResult_t async = weftSuccess;
  weftCommGetAsyncError(comm, &async);
  if (async != weftSuccess) return fail(rank, std::string("async error: ") + weftGetLastError(comm));
  cudaMemcpy(got.data(), x, kCount * sizeof(float), cudaMemcpyDeviceToHost);
  // Each call sums what the one before left: ranks(ranks + 1) / 2 * ranks^(calls - 1).
  float want = ranks * (ranks + 1) / 2.0f;
  for (int c = 1; c < kCalls; ++c) want *= ranks;
  for (size_t i = 0; i < kCount; ++i) {
    if (got[i] != want) {
      return fail(rank, "element " + std::to_string(i) + " is " + std::to_string(got[i]) +
                            ", not " + std::to_string(want));
    }
  }
  // A stream being captured into a CUDA graph is refused, and the communicator stays usable
  // (every rank is refused alike, so no rank waits for another).
  cudaStream_t captured = nullptr;
  cudaStreamCreate(&captured);
  cudaStreamBeginCapture(captured, cudaStreamCaptureModeThreadLocal);
  const weftResult_t in_capture = weftAllReduce(x, x, kCount, weftFloat, weftSum, comm, captured);
  cudaGraph_t graph = nullptr;
  cudaStreamEndCapture(captured, &graph);
  if (graph != nullptr) cudaGraphDestroy(graph);
  cudaStreamDestroy(captured);
  if (in_capture != weftInvalidArgument) return fail(rank, "a call in stream capture was not refused");
  if (weftAllReduce(x, x, kCount, weftFloat, weftSum, comm, stream) != weftSuccess ||
      cudaStreamSynchronize(stream) != cudaSuccess) {
    return fail(rank, std::string("a call after the refused one: ") + weftGetLastError(comm));
  }
  // An input in pageable host memory and a result in device memory: the input comes in with
  // a copy the GPU can make (over cuda_ipc, into a scratch buffer before the window).
  std::vector<float> host_in(kCount, static_cast<float>(rank + 1));
  if (weftAllReduce(host_in.data(), x, kCount, weftFloat, weftSum, comm, stream) != weftSuccess ||
      cudaStreamSynchronize(stream) != cudaSuccess) {
    return fail(rank, std::string("a call from host memory into device memory: ") +
                          weftGetLastError(comm));
  }
  cudaMemcpy(got.data(), x, kCount * sizeof(float), cudaMemcpyDeviceToHost);
  if (got[0] != ranks * (ranks + 1) / 2.0f || got[kCount - 1] != got[0]) {
    return fail(rank, "a call from host memory into device memory: wrong result " +
                          std::to_string(got[0]));
  }
  weftCommDestroy(comm);
  cudaFreeHost(mine);
  cudaFree(x);
  cudaStreamDestroy(stream);
  std::printf("stream_ordered_test: rank %d of %d: %d calls returned before their stream ran "
              "them; results exact\n", rank, ranks, kCalls);
  return 0;
}

}  // namespace

// `stream_ordered_test [ranks]` starts the ranks; each is `stream_ordered_test --rank R
// RANKS ID` (ID: the unique id in hex).
int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--rank") {
    return run_rank(std::atoi(argv[2]), std::atoi(argv[3]), unhex(argv[4]));
  }
  const int ranks = argc > 1 ? std::atoi(argv[1]) : 2;
  setenv("WEFT_STAGING_BYTES", "1048576", 1);
  setenv("WEFT_TIMEOUT", "20", 1);  // a rank that failed its check ends the others soon
  weftUniqueId id;
  if (weftGetUniqueId(&id) != weftSuccess) return fail(-1, weftGetLastError(nullptr));
  std::string ranks_arg = std::to_string(ranks), id_arg = hex(id);
  std::vector<pid_t> children;
  for (int r = 0; r < ranks; ++r) {
    std::string rank_arg = std::to_string(r);
    char flag[] = "--rank";
    char* child_argv[] = {argv[0], flag, rank_arg.data(), ranks_arg.data(), id_arg.data(), nullptr};
    pid_t pid = 0;
    if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, child_argv, environ) != 0) {
      return fail(r, "posix_spawn failed");
    }
    children.push_back(pid);
  }
  // Every rank ends within kRankSeconds or is killed: a hang is a failure that says which
  // rank, not a check that never ends.
  int failed = 0, skipped = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kRankSeconds);
  for (size_t r = 0; r < children.size(); ++r) {
    int status = 0;
    pid_t done = 0;
    while ((done = waitpid(children[r], &status, WNOHANG)) == 0 &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (done == 0) {
      fail(static_cast<int>(r), "did not finish within " + std::to_string(kRankSeconds) +
                                    " s: killed (a wait that never ended)");
      kill(children[r], SIGKILL);
      waitpid(children[r], &status, 0);
      ++failed;
      continue;
    }
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    failed += code != 0 && code != kSkipped;
    skipped += code == kSkipped;
  }
  if (failed > 0) return 1;
  return skipped == ranks ? kSkipped : 0;
}
