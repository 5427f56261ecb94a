#include "transport/shm/ring.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"

namespace weft::transport::shm {
namespace {

constexpr size_t kHeaderBytes = 4096;

absl::Status errno_error(const std::string& what, const std::string& name) {
  return absl::InternalError(absl::StrCat(what, " ", name, ": ", std::strerror(errno),
                                          " (is /dev/shm full? `weft cleanup` removes stale rings)"));
}

}  // namespace

Ring::Ring(std::string name, void* base, size_t mapped_bytes)
    : name_(std::move(name)),
      base_(base),
      mapped_bytes_(mapped_bytes),
      header_(static_cast<RingHeader*>(base)),
      data_(static_cast<std::byte*>(base) + kHeaderBytes) {}

Ring::Ring(Ring&& other) noexcept
    : name_(std::move(other.name_)),
      base_(other.base_),
      mapped_bytes_(other.mapped_bytes_),
      header_(other.header_),
      data_(other.data_),
      created_(other.created_),
      mask_(other.mask_),
      head_(other.head_),
      tail_(other.tail_) {
  other.base_ = nullptr;
  other.created_ = false;
}

Ring& Ring::operator=(Ring&& other) noexcept {
  if (this != &other) {
    release();
    new (this) Ring(std::move(other));
  }
  return *this;
}

Ring::~Ring() { release(); }

void Ring::release() {
  if (base_ == nullptr) return;
  // The attacher removes the name; if nobody ever attached, the creator must.
  if (created_ && !(header_->state.load(std::memory_order_acquire) & RingHeader::kAttached)) {
    shm_unlink(name_.c_str());
  }
  munmap(base_, mapped_bytes_);
  base_ = nullptr;
}

absl::StatusOr<Ring> Ring::create(const std::string& name, size_t capacity) {
  if (capacity == 0 || (capacity & (capacity - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("shm ring capacity ", capacity, " is not a power of two; fix WEFT_SHM_RING_BYTES"));
  }
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0 && errno == EEXIST) {
    // A leftover of a crashed job that drew the same job id: it is ours to replace.
    shm_unlink(name.c_str());
    fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  }
  if (fd < 0) return errno_error("cannot create shared memory", name);
  const size_t bytes = kHeaderBytes + capacity;
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    close(fd);
    shm_unlink(name.c_str());
    return errno_error("cannot size shared memory", name);
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    shm_unlink(name.c_str());
    return errno_error("cannot map shared memory", name);
  }
  Ring ring(name, base, bytes);
  ring.created_ = true;
  // Touch every page now: a fault on the data path costs ~10 us.
  std::memset(ring.data_, 0, capacity);
  auto* h = new (base) RingHeader{};
  h->magic = RingHeader::kMagic;
  h->version = RingHeader::kVersion;
  h->capacity = capacity;
  ring.mask_ = capacity - 1;
  h->state.store(RingHeader::kReady, std::memory_order_release);
  return ring;
}

absl::StatusOr<Ring> Ring::attach(const std::string& name, Deadline deadline,
                                  const std::function<bool()>& creator_alive) {
  Backoff backoff;
  while (true) {
    const int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0) {
      struct stat st {};
      // The receiver may not have sized it yet; an undersized map would fault.
      if (fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) > kHeaderBytes) {
        const size_t bytes = static_cast<size_t>(st.st_size);
        void* base =
            mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
        close(fd);
        if (base == MAP_FAILED) return errno_error("cannot map shared memory", name);
        Ring ring(name, base, bytes);
        RingHeader& h = ring.header();
        if (h.state.load(std::memory_order_acquire) & RingHeader::kReady) {
          if (h.magic != RingHeader::kMagic || h.version != RingHeader::kVersion ||
              h.capacity + kHeaderBytes != bytes) {
            return absl::FailedPreconditionError(absl::StrCat(
                "shared memory ", name, " is not a weft ring of this version; run `weft cleanup`"));
          }
          ring.mask_ = h.capacity - 1;
          shm_unlink(name.c_str());
          h.state.fetch_or(RingHeader::kAttached, std::memory_order_acq_rel);
          return ring;
        }
      } else {
        close(fd);
      }
    } else if (errno != ENOENT) {
      return errno_error("cannot open shared memory", name);
    }
    if (deadline.expired()) return deadline_error(absl::StrCat("shared memory ring ", name));
    if (backoff.is_sleeping() && backoff.rounds() % 64 == 0 && !creator_alive()) {
      return absl::UnavailableError(
          absl::StrCat("the process that should create shared memory ", name, " has exited"));
    }
    backoff.pause();
  }
}

size_t Ring::write(const std::byte* data, size_t len) {
  // The receiver's tail is read only when the space known from the last read runs short:
  // each read pulls its cache line across cores, which small messages cannot afford.
  if (header_->capacity - (head_ - tail_) < len) {
    tail_ = header_->tail.load(std::memory_order_acquire);
  }
  const size_t n = std::min<uint64_t>(len, header_->capacity - (head_ - tail_));
  if (n == 0) return 0;
  const size_t at = head_ & mask_;
  const size_t first = std::min(n, static_cast<size_t>(header_->capacity - at));
  std::memcpy(data_ + at, data, first);
  std::memcpy(data_, data + first, n - first);
  head_ += n;
  header_->head.store(head_, std::memory_order_release);
  return n;
}

size_t Ring::read(size_t max, Sink sink) {
  const uint64_t head = header_->head.load(std::memory_order_acquire);
  const size_t n = std::min<uint64_t>(max, head - tail_);
  if (n == 0) return 0;
  const size_t at = tail_ & mask_;
  const size_t first = std::min(n, static_cast<size_t>(header_->capacity - at));
  sink(data_ + at, first);
  if (n > first) sink(data_, n - first);
  tail_ += n;
  header_->tail.store(tail_, std::memory_order_release);
  return n;
}

uint64_t Ring::readable() const {
  return header_->head.load(std::memory_order_acquire) - tail_;
}

}  // namespace weft::transport::shm
