// copier.hpp's stand-in: a thread that runs the queued copies in order with memcpy.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/base/shared_mapping.hpp"
#include "src/device/copier.hpp"
#include "src/device/shared_fd.hpp"

namespace weft::device {
namespace {

class StandInCopier : public Copier {
 public:
  StandInCopier() : thread_([this] { serve(); }) {}
  ~StandInCopier() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    changed_.notify_all();
    thread_.join();
    for (const auto& [p, bytes] : mapped_) unmap_shared(p, bytes);
    for (const auto& mine : exported_) {
      forget_fd(mine.second);
      close(mine.second);
    }
  }

  absl::Status copy(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                    size_t height) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(Copy{static_cast<std::byte*>(dst), dst_pitch,
                            static_cast<const std::byte*>(src), src_pitch, width, height, 0});
    }
    changed_.notify_all();
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> mark() override {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t m = ++marked_;
    queue_.push_back(Copy{nullptr, 0, nullptr, 0, 0, 0, m});
    changed_.notify_all();
    return m;
  }

  absl::Status wait(uint64_t mark, Deadline deadline) override {
    std::unique_lock<std::mutex> lock(mu_);
    while (passed_ < mark) {
      if (deadline.expired()) {
        return absl::DeadlineExceededError(absl::StrCat(
            "copies between device and host memory did not finish by the deadline (mark ", mark,
            ", passed ", passed_, ")"));
      }
      changed_.wait_for(lock, std::chrono::milliseconds(10));
    }
    return absl::OkStatus();
  }

  absl::Status wait_for_stream(void*, Deadline) override { return absl::OkStatus(); }

  // The stream side runs on the caller's StandInStream. The words live in `words_`, shared
  // with the work queued there, so they stay valid should a stream outlive the copier.
  absl::Status copy_on(void* stream, void* dst, size_t dst_pitch, const void* src,
                       size_t src_pitch, size_t width, size_t height) override {
    auto* s = as_stream(stream);
    if (s == nullptr) return no_stream();
    s->enqueue([=] { copy_rows(Copy{static_cast<std::byte*>(dst), dst_pitch,
                                    static_cast<const std::byte*>(src), src_pitch, width, height, 0}); });
    return absl::OkStatus();
  }

  absl::Status copy_unless_stopped_on(void* stream, void* dst, size_t dst_pitch, const void* src,
                                      size_t src_pitch, size_t width, size_t height) override {
    auto* s = as_stream(stream);
    if (s == nullptr) return no_stream();
    s->enqueue([=, words = words_] {
      {
        std::lock_guard<std::mutex> lock(words->mu);
        if (words->value[static_cast<int>(Word::kStop)] != 0) return;
      }
      copy_rows(Copy{static_cast<std::byte*>(dst), dst_pitch, static_cast<const std::byte*>(src),
                     src_pitch, width, height, 0});
    });
    return absl::OkStatus();
  }

  absl::Status signal_on(void* stream, Word word, uint32_t value) override {
    auto* s = as_stream(stream);
    if (s == nullptr) return no_stream();
    s->enqueue([words = words_, word, value] { words->set(word, value); });
    return absl::OkStatus();
  }

  absl::Status wait_on(void* stream, Word word, uint32_t value) override {
    auto* s = as_stream(stream);
    if (s == nullptr) return no_stream();
    s->enqueue([words = words_, word, value] {
      std::unique_lock<std::mutex> lock(words->mu);
      words->changed.wait(lock, [&] { return reached(words->value[static_cast<int>(word)], value); });
    });
    return absl::OkStatus();
  }

  uint32_t read(Word word) override {
    std::lock_guard<std::mutex> lock(words_->mu);
    return words_->value[static_cast<int>(word)];
  }

  void write(Word word, uint32_t value) override { words_->set(word, value); }

  absl::StatusOr<std::byte*> host_buffer(size_t bytes) override {
    buffers_.emplace_back(new std::byte[bytes]);
    std::memset(buffers_.back().get(), 0, bytes);
    return buffers_.back().get();
  }

  absl::StatusOr<std::byte*> device_buffer(size_t bytes) override { return host_buffer(bytes); }

  // A memfd, which the owner hands to a peer that names it (shared_fd.hpp).
  absl::StatusOr<Shared> share_memory(size_t bytes) override {
    const int fd = memfd_create("weft-window", MFD_CLOEXEC);
    if (fd < 0) return errno_error("memfd_create");
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      absl::Status s = errno_error("sizing shared memory (ftruncate)");
      close(fd);
      return s;
    }
    auto p = map(fd, bytes);
    if (!p.ok()) {
      close(fd);
      return p.status();
    }
    exported_.emplace_back(*p, fd);
    return Shared{*p, fd_handle(fd)};
  }

  absl::StatusOr<std::byte*> open_shared(std::string_view handle, size_t bytes) override {
    auto mine = take_fd(handle);
    if (!mine.ok()) return mine.status();
    auto p = map(*mine, bytes);
    close(*mine);
    return p;
  }

  // Unmaps `data`, and closes its memfd if it was ours.
  void release_shared(std::byte* data) override {
    const auto at_data = [data](const auto& entry) { return entry.first == data; };
    if (auto it = std::find_if(mapped_.begin(), mapped_.end(), at_data); it != mapped_.end()) {
      unmap_shared(it->first, it->second);
      mapped_.erase(it);
    }
    if (auto it = std::find_if(exported_.begin(), exported_.end(), at_data);
        it != exported_.end()) {
      forget_fd(it->second);
      close(it->second);
      exported_.erase(it);
    }
  }

 private:
  struct Copy {
    std::byte* dst;
    size_t dst_pitch;
    const std::byte* src;
    size_t src_pitch, width, height;
    uint64_t mark;  // nonzero: a mark, not a copy
  };

  void serve() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      changed_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopped
      const Copy c = queue_.front();
      queue_.pop_front();
      if (c.mark != 0) {
        passed_ = c.mark;
        changed_.notify_all();
        continue;
      }
      lock.unlock();  // the copy runs while the caller queues more, as on a stream
      copy_rows(c);
      lock.lock();
    }
  }

  struct Words {
    std::mutex mu;
    std::condition_variable changed;
    uint32_t value[kWords] = {};
    void set(Word word, uint32_t v) {
      {
        std::lock_guard<std::mutex> lock(mu);
        value[static_cast<int>(word)] = v;
      }
      changed.notify_all();
    }
  };
  static absl::Status errno_error(const char* what) {
    return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
  }
  absl::StatusOr<std::byte*> map(int fd, size_t bytes) {
    void* p = map_shared(fd, bytes, PROT_READ | PROT_WRITE, MAP_POPULATE);
    if (p == MAP_FAILED) return errno_error("mapping shared memory");
    mapped_.emplace_back(p, bytes);
    return static_cast<std::byte*>(p);
  }
  static StandInStream* as_stream(void* stream) { return static_cast<StandInStream*>(stream); }
  static absl::Status no_stream() {
    return absl::InvalidArgumentError(
        "standing in for a GPU (WEFT_DEVICE_STAND_IN), a call ordered on a stream needs a "
        "weft::device::StandInStream");
  }
  static void copy_rows(const Copy& c) {
    for (size_t row = 0; row < c.height; ++row) {
      std::memcpy(c.dst + row * c.dst_pitch, c.src + row * c.src_pitch, c.width);
    }
  }
  std::shared_ptr<Words> words_ = std::make_shared<Words>();

  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<Copy> queue_;
  uint64_t marked_ = 0, passed_ = 0;
  bool stop_ = false;
  std::vector<std::unique_ptr<std::byte[]>> buffers_;
  std::vector<std::pair<void*, size_t>> mapped_;  // shared memory, ours and peers'
  std::vector<std::pair<void*, int>> exported_;    // ours, and the memfd open for peers to find
  std::thread thread_;  // last: it starts once the rest is made
};

}  // namespace

std::unique_ptr<Copier> stand_in_copier() { return std::make_unique<StandInCopier>(); }

}  // namespace weft::device
