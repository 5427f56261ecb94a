// The single-copy side of a Ring (ring.hpp): the sender lets the receiver probe it and
// collects what an offer's reader has taken; the receiver proves it may read the sender's
// memory and reads offered bytes with process_vm_readv.

#include "transport/shm/ring.hpp"

#include <sys/uio.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "src/base/copy.hpp"

namespace weft::transport::shm {
namespace {

// The kernel copies for process_vm_readv with `rep movsb`, which on some CPUs (AMD Zen 3)
// runs 4-5x slower (about 2.2 against 10.4 GB/s) unless source and destination lie at the
// same offset modulo 64; see src/base/copy.hpp for the same trap in glibc. There, offers whose
// destination is out of step go through the scratch buffer, placed in step.
constexpr uint64_t kCopyStep = 64;

}  // namespace

bool Ring::in_step(const std::byte* dst, uint64_t address) {
  return !rep_movsb_slow_out_of_step() ||
         ((reinterpret_cast<uintptr_t>(dst) - address) & (kCopyStep - 1)) == 0;
}

void Ring::offer_single_copy(size_t single_copy_from) {
  single_copy_from_ = single_copy_from;
  header_->sender_probe.store(reinterpret_cast<uintptr_t>(&header_->magic),
                              std::memory_order_release);
}

absl::StatusOr<size_t> Ring::collect_offer(const std::byte* data, size_t len) {
  if (data != offer_resume_) {
    return absl::InternalError(
        "a shm send resumed at another address while the peer was still reading the last one");
  }
  const uint64_t read = header_->offer_read.load(std::memory_order_acquire);
  const size_t n = std::min<uint64_t>(read - offer_taken_, len);
  offer_taken_ += n;
  offer_resume_ += n;
  return n;
}

void Ring::try_probe(int32_t sender_pid) {
  if (sender_pid <= 0) return;
  const uint64_t probe = header_->sender_probe.load(std::memory_order_acquire);
  if (probe == 0) return;
  uint64_t seen = 0;
  const iovec local{&seen, sizeof seen};
  const iovec remote{reinterpret_cast<void*>(probe), sizeof seen};
  const uint64_t expected = uint64_t{header_->version} << 32 | header_->magic;
  if (process_vm_readv(sender_pid, &local, 1, &remote, 1, 0) != sizeof seen || seen != expected) {
    header_->sender_probe.store(0, std::memory_order_relaxed);  // not again
    return;
  }
  scratch_.reset(static_cast<std::byte*>(std::aligned_alloc(4096, kOfferRead + 4096)));
  if (!scratch_) return;  // no memory: stay with copies through the ring
  std::memset(scratch_.get(), 0, kOfferRead + 4096);  // fault it in now, not on the data path
  sender_pid_ = sender_pid;
  header_->state.fetch_or(RingHeader::kSingleCopy, std::memory_order_acq_rel);
}

absl::StatusOr<std::pair<const std::byte*, size_t>> Ring::stage_remote(uint64_t address,
                                                                       size_t n) {
  std::byte* at = scratch_.get() + (address & (kCopyStep - 1));
  auto got = read_remote(at, address, std::min(n, kOfferRead));
  if (!got.ok()) return got.status();
  return std::make_pair(static_cast<const std::byte*>(at), *got);
}

absl::StatusOr<size_t> Ring::read_remote(std::byte* dst, uint64_t address, size_t n) {
  const iovec local{dst, n};
  const iovec remote{reinterpret_cast<void*>(address), n};
  const ssize_t got = process_vm_readv(sender_pid_, &local, 1, &remote, 1, 0);
  if (got <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot read the sender's buffer (pid ", sender_pid_,
                                               "): ", got == 0 ? "nothing read" : std::strerror(errno)));
  }
  // A sender that gave up may hand its buffer back to its caller at once: bytes read after it
  // closed the ring might be anything, so they do not count.
  if (header_->state.load(std::memory_order_acquire) & RingHeader::kSenderClosed) {
    return absl::UnavailableError("the peer closed the link while its buffer was being read");
  }
  return static_cast<size_t>(got);
}

}  // namespace weft::transport::shm
