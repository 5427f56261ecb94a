#include "transport/shm/ring.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "src/base/copy.hpp"
#include "src/base/shared_mapping.hpp"

namespace weft::transport::shm {
namespace {

constexpr size_t kHeaderBytes = 4096;
constexpr char kShmDir[] = "/dev/shm";  // where glibc's shm_open keeps its names
constexpr uint64_t kCells = 1024;
// Messages up to four cells travel inline; larger ones through the bulk ring, in stretches
// of at most 64 KiB so the receiver can start on a large message before it is all written.
constexpr size_t kInlineLimit = 4 * Cell::kInlineBytes;
constexpr size_t kBulkStretch = 64 * 1024;
// How much of the bulk ring's next stretch a waiting receiver pulls in ahead of the tag:
// a small message's worth (2-rank allgather of 2 KiB and less).
constexpr size_t kPrefetchBulkBytes = 1024;
// One buffer, read as a Gather is (Ring::write_copy).
struct Contiguous {
  const std::byte* data;
  const std::byte* at(size_t i) const { return data + i; }
  size_t run_from(size_t) const { return SIZE_MAX; }
  void copy_out(std::byte* dst, size_t i, size_t n) const { copy_bytes(dst, data + i, n); }
};

// The usual cell, checked inline: check_cell() covers every other kind.
bool plain_inline(uint64_t tag) {
  const uint64_t kind_and_bytes = tag & (Cell::kBulk | Cell::kOffer | Cell::kBytesMask);
  return kind_and_bytes != 0 && kind_and_bytes <= Cell::kInlineBytes;
}
// A bulk stretch that fits the ring from where the receiver stands (`at` of `capacity`),
// checked inline too: a small message past four cells is one.
bool plain_bulk(uint64_t tag, uint64_t at, uint64_t capacity) {
  const uint64_t bytes = tag & Cell::kBytesMask;
  return (tag & (Cell::kBulk | Cell::kOffer)) == Cell::kBulk && bytes != 0 &&
         bytes <= kBulkStretch && at + bytes <= capacity;
}

absl::Status errno_error(const std::string& what, const std::string& name) {
  return absl::InternalError(absl::StrCat(what, " ", name, ": ", std::strerror(errno),
                                          " (is /dev/shm full? `weft cleanup` removes stale rings)"));
}

}  // namespace

uint64_t own_pid_namespace() {
  struct stat st {};
  return stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

Ring::Ring(std::string name, void* base, size_t mapped_bytes)
    : name_(std::move(name)),
      base_(base),
      mapped_bytes_(mapped_bytes),
      header_(static_cast<RingHeader*>(base)) {}

Ring::Ring(Ring&& other) noexcept
    : name_(std::move(other.name_)),
      base_(other.base_),
      mapped_bytes_(other.mapped_bytes_),
      created_(other.created_),
      header_(other.header_),
      cells_(other.cells_),
      bulk_(other.bulk_),
      cell_mask_(other.cell_mask_),
      bulk_mask_(other.bulk_mask_),
      cells_done_(other.cells_done_),
      bulk_done_(other.bulk_done_),
      peer_cells_(other.peer_cells_),
      peer_bulk_(other.peer_bulk_),
      cell_offset_(other.cell_offset_),
      single_copy_from_(other.single_copy_from_),
      pace_(other.pace_),
      offered_(other.offered_),
      offer_taken_(other.offer_taken_),
      offer_resume_(other.offer_resume_),
      offer_read_(other.offer_read_),
      sender_pid_(other.sender_pid_),
      scratch_(std::move(other.scratch_)) {
  other.base_ = nullptr;
  other.created_ = false;
}

void Ring::map_layout(uint64_t cells, uint64_t bulk_capacity) {
  cells_ = reinterpret_cast<Cell*>(static_cast<std::byte*>(base_) + kHeaderBytes);
  bulk_ = reinterpret_cast<std::byte*>(cells_ + cells);
  cell_mask_ = cells - 1;
  bulk_mask_ = bulk_capacity - 1;
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
  unmap_shared(base_, mapped_bytes_);
  base_ = nullptr;
}

absl::StatusOr<Ring> Ring::create(const std::string& name, size_t capacity) {
  if (capacity < kBulkStretch || (capacity & (capacity - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("shm ring capacity ", capacity, " is not a power of two >= 64 KiB; fix WEFT_SHM_RING_BYTES"));
  }
  // The segment is made under a name of its own and renamed to `name` once complete, so an
  // attacher never maps one that is still being written.
  const std::string making = absl::StrCat(name, ".making");
  int fd = shm_open(making.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0 && errno == EEXIST) {
    // A leftover of a crashed job that drew the same job id: it is ours to replace.
    shm_unlink(making.c_str());
    fd = shm_open(making.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  }
  if (fd < 0) return errno_error("cannot create shared memory", making);
  const size_t bytes = kHeaderBytes + kCells * sizeof(Cell) + capacity;
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    close(fd);
    shm_unlink(making.c_str());
    return errno_error("cannot size shared memory", making);
  }
  // Reserve the pages now: on a full /dev/shm, touching them below would be a SIGBUS.
  int err = EINTR;
  while (err == EINTR) err = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (err != 0) {
    close(fd);
    shm_unlink(making.c_str());
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot reserve ", bytes, " bytes of /dev/shm for ", name, ": ", std::strerror(err),
        "; lower WEFT_SHM_RING_BYTES, or free /dev/shm (weft cleanup removes rings of dead jobs)"));
  }
  void* base = map_shared(fd, bytes, PROT_READ | PROT_WRITE, MAP_POPULATE);
  close(fd);
  if (base == MAP_FAILED) {
    shm_unlink(making.c_str());
    return errno_error("cannot map shared memory", making);
  }
  // Touch every page now: a fault on the data path costs ~10 us. Zeroed tags also mean
  // "not written" for every cell.
  std::memset(static_cast<std::byte*>(base) + kHeaderBytes, 0, bytes - kHeaderBytes);
  auto* h = new (base) RingHeader{};
  h->magic = RingHeader::kMagic;
  h->version = RingHeader::kVersion;
  h->cells = kCells;
  h->bulk_capacity = capacity;
  h->creator_pid = static_cast<int32_t>(getpid());
  h->creator_pidns = own_pid_namespace();
  h->state.store(RingHeader::kReady, std::memory_order_release);
  // shm_open's names are files of /dev/shm; rename publishes the segment whole, replacing a
  // crashed job's leftover of the same name.
  if (rename(absl::StrCat(kShmDir, making).c_str(), absl::StrCat(kShmDir, name).c_str()) != 0) {
    const absl::Status error = errno_error("cannot publish shared memory", name);
    unmap_shared(base, bytes);
    shm_unlink(making.c_str());
    return error;
  }
  Ring ring(name, base, bytes);
  ring.created_ = true;
  ring.map_layout(kCells, capacity);
  return ring;
}

absl::StatusOr<Ring> Ring::attach(const std::string& name, Deadline deadline,
                                  const std::function<bool()>& creator_alive) {
  Backoff backoff;
  while (true) {
    const int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0) {
      struct stat st {};
      // The creator publishes only whole segments; anything else under this name is a
      // leftover it is about to replace (an undersized map would fault).
      if (fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) > kHeaderBytes) {
        const size_t bytes = static_cast<size_t>(st.st_size);
        void* base = map_shared(fd, bytes, PROT_READ | PROT_WRITE, MAP_POPULATE);
        close(fd);
        if (base == MAP_FAILED) return errno_error("cannot map shared memory", name);
        Ring ring(name, base, bytes);
        RingHeader& h = ring.header();
        if (h.state.load(std::memory_order_acquire) & RingHeader::kReady) {
          // Read once: the layout comes from these copies, not from the shared header.
          const uint64_t cells = h.cells, capacity = h.bulk_capacity;
          const bool power_of_two = capacity != 0 && (capacity & (capacity - 1)) == 0;
          if (h.magic != RingHeader::kMagic || h.version != RingHeader::kVersion ||
              cells != kCells || !power_of_two ||
              kHeaderBytes + cells * sizeof(Cell) + capacity != bytes) {
            return absl::FailedPreconditionError(absl::StrCat(
                "shared memory ", name, " is not a weft ring of this version; run `weft cleanup`"));
          }
          ring.map_layout(cells, capacity);
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

// The receiver's progress is read only when the space known from the last read runs short:
// each read pulls its cache line across cores.
bool Ring::cell_free() {
  if (cells_done_ - peer_cells_ < cell_count()) return true;
  peer_cells_ = header_->cells_read.load(std::memory_order_acquire);
  return cells_done_ - peer_cells_ < cell_count();
}

absl::StatusOr<size_t> Ring::write(const std::byte* data, size_t len, bool may_offer) {
  if (offer_taken_ != offered_) return collect_offer(data, len);
  // Offers from single_copy_from_, and of any size whose copies into the ring run slow.
  if (may_offer && single_copy_from_ != 0 && (len >= single_copy_from_ || !pace_.worth(len)) &&
      (header_->state.load(std::memory_order_relaxed) & RingHeader::kSingleCopy)) {
    if (!cell_free()) return 0;
    const size_t n = std::min(len, kOfferMax);
    Cell& cell = cells_[cells_done_ & cell_mask_];
    const uint64_t address = reinterpret_cast<uintptr_t>(data);
    std::memcpy(cell.payload, &address, sizeof address);
    cell.tag.store(tag_for(cells_done_, Cell::kOffer, n), std::memory_order_release);
    ++cells_done_;
    offered_ += n;
    offer_resume_ = data;
    return 0;  // taken once read
  }
  return write_copy(Contiguous{data}, len);
}

absl::StatusOr<size_t> Ring::write_gathered(const Gather& from, size_t len) {
  if (offer_taken_ != offered_) {  // write() resumes an offer with the same buffer
    return absl::InternalError("a gathered send while an offer is still being read");
  }
  return write_copy(from, len);
}

template <typename Source>
absl::StatusOr<size_t> Ring::write_copy(const Source& from, size_t len) {
  if (len <= kInlineLimit) {
    // Room for the whole message is checked once: this is the path of every small call.
    const uint64_t want = (len + Cell::kInlineBytes - 1) / Cell::kInlineBytes;
    if (cells_done_ + want - peer_cells_ > cell_count()) {
      peer_cells_ = header_->cells_read.load(std::memory_order_acquire);
    }
    const uint64_t cells = std::min(want, cell_count() - (cells_done_ - peer_cells_));
    // Last cell first: a reader that sees the first cell's tag then finds the others written
    // (stores become visible in order), instead of polling lines the sender is still filling.
    const size_t written = std::min<size_t>(len, cells * Cell::kInlineBytes);
    for (uint64_t i = cells; i-- > 0;) {
      const size_t at = i * Cell::kInlineBytes;
      const size_t n = std::min(Cell::kInlineBytes, written - at);
      Cell& cell = cells_[(cells_done_ + i) & cell_mask_];
      if (n == Cell::kInlineBytes && from.run_from(at) >= n) {
        std::memcpy(cell.payload, from.at(at), Cell::kInlineBytes);  // a fixed-size copy
      } else if (from.run_from(at) >= n) {
        std::memcpy(cell.payload, from.at(at), n);
      } else {
        from.copy_out(cell.payload, at, n);
      }
      cell.tag.store(tag_for(cells_done_ + i, 0, n), std::memory_order_release);
    }
    cells_done_ += cells;
    return written;
  }
  if (!cell_free()) return 0;
  const size_t at = bulk_done_ & bulk_mask_;
  const size_t want = std::min({len, kBulkStretch, bulk_capacity() - at});
  if (bulk_capacity() - (bulk_done_ - peer_bulk_) < want) {
    peer_bulk_ = header_->bulk_read.load(std::memory_order_acquire);
  }
  const size_t n = std::min<uint64_t>(want, bulk_capacity() - (bulk_done_ - peer_bulk_));
  if (n == 0) return 0;
  pace_.copy(n, [&] { from.copy_out(bulk_ + at, 0, n); });
  cells_[cells_done_ & cell_mask_].tag.store(tag_for(cells_done_, Cell::kBulk, n),
                                             std::memory_order_release);
  ++cells_done_;
  bulk_done_ += n;
  return n;
}

// Prefetches never fault and do not stall: the poll loop issues them again on every empty
// pass, and a line already here costs nothing. A line the sender then writes is invalidated
// here and fetched anew by the next pass, while the sender is still on its way to the tag.
void Ring::prefetch_next_message() const {
  for (uint64_t i = 1; i < kInlineLimit / Cell::kInlineBytes; ++i) {
    __builtin_prefetch(&cells_[(cells_done_ + i) & cell_mask_]);
  }
  const uint64_t at = bulk_done_ & bulk_mask_;
  const size_t bytes = std::min<uint64_t>(kPrefetchBulkBytes, bulk_mask_ + 1 - at);
  for (size_t i = 0; i < bytes; i += sizeof(Cell)) __builtin_prefetch(bulk_ + at + i);
}

template <typename Local, typename Remote>
absl::StatusOr<size_t> Ring::consume(size_t max, Local local, Remote remote) {
  size_t given = 0;
  bool offer = false;
  while (given < max) {
    Cell& cell = cells_[cells_done_ & cell_mask_];
    const uint64_t tag = cell.tag.load(std::memory_order_acquire);
    if (!written(cells_done_, tag)) {
      if (given == 0) prefetch_next_message();
      break;
    }
    const size_t bytes = tag & Cell::kBytesMask;
    // Checked once per cell, when its first byte is taken: a stretch starts where bulk_done_
    // stands then.
    if (cell_offset_ == 0 && !plain_inline(tag) &&
        !plain_bulk(tag, bulk_done_ & bulk_mask_, bulk_mask_ + 1)) {
      if (absl::Status s = check_cell(tag); !s.ok()) return s;
    }
    size_t take = std::min(bytes - cell_offset_, max - given);
    if (tag & Cell::kOffer) {
      uint64_t address = 0;
      std::memcpy(&address, cell.payload, sizeof address);
      auto n = remote(address + cell_offset_, std::min(take, kOfferRead * 8), given);
      if (!n.ok()) return n.status();
      take = *n;
      offer_read_ += take;
      offer = true;
    } else if (tag & Cell::kBulk) {
      // A bulk stretch never wraps, so what is left of it is contiguous.
      local(bulk_ + (bulk_done_ & bulk_mask_), take, given);
      bulk_done_ += take;
      // Hand the space back at once: a sender waiting for room works while we copy the next
      // stretch, instead of both taking turns over the whole ring.
      header_->bulk_read.store(bulk_done_, std::memory_order_release);
    } else {
      local(cell.payload + cell_offset_, take, given);
    }
    given += take;
    cell_offset_ += take;
    if (cell_offset_ == bytes) {
      cell_offset_ = 0;
      ++cells_done_;
    }
    if (offer) break;  // let the caller use what landed before the next large copy
  }
  if (given > 0) {  // after the bytes were used: the sender may now overwrite them
    if (offer) header_->offer_read.store(offer_read_, std::memory_order_release);
    header_->bulk_read.store(bulk_done_, std::memory_order_release);
    header_->cells_read.store(cells_done_, std::memory_order_release);
  }
  return given;
}

// The peer writes the tags, so nothing in one is trusted: a count that does not fit its kind,
// a bulk stretch that would run past the ring, or an offer this side never allowed would
// otherwise make the reader touch memory outside the segment.
absl::Status Ring::check_cell(uint64_t tag) const {
  const uint64_t kind = tag & (Cell::kBulk | Cell::kOffer);
  const size_t bytes = tag & Cell::kBytesMask;
  const char* bad = nullptr;
  if (bytes == 0) {
    bad = "an empty cell";
  } else if (kind == (Cell::kBulk | Cell::kOffer)) {
    bad = "a cell of two kinds";
  } else if (kind == 0 && bytes > Cell::kInlineBytes) {
    bad = "an inline cell longer than a cell";
  } else if (kind == Cell::kBulk &&
             (bytes > kBulkStretch || (bulk_done_ & bulk_mask_) + bytes > bulk_mask_ + 1)) {
    bad = "a bulk stretch that runs past the ring";
  } else if (kind == Cell::kOffer && (sender_pid_ == 0 || bytes > kOfferMax)) {
    bad = "an offer this side did not allow";
  }
  if (bad == nullptr) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat("shared memory ring ", name_, " is corrupt: ", bad,
                                          " (tag ", absl::Hex(tag), ")"));
}

absl::StatusOr<size_t> Ring::read(size_t max, Sink sink) {
  // Cell-sized pieces reach the sink gathered: a sink call (a reduction, say) costs more than
  // copying a cell, and a small message spans up to four cells. Larger pieces pass straight.
  std::byte gathered[kInlineLimit];
  size_t held = 0;
  auto flush = [&] {
    if (held > 0) sink(gathered, held);
    held = 0;
  };
  auto got = consume(
      max,
      [&](const std::byte* src, size_t n, size_t) {
        if (n > Cell::kInlineBytes) {
          flush();
          sink(src, n);
          return;
        }
        if (held + n > sizeof gathered) flush();
        std::memcpy(gathered + held, src, n);
        held += n;
      },
      [&](uint64_t address, size_t n, size_t) -> absl::StatusOr<size_t> {
        flush();
        auto staged = stage_remote(address, n);
        if (!staged.ok()) return staged.status();
        sink(staged->first, staged->second);
        return staged->second;
      });
  flush();  // also when consume failed: what it handed out was taken
  return got;
}

absl::StatusOr<size_t> Ring::read_into(const Scatter& to, size_t max) {
  return consume(
      max,
      [&](const std::byte* src, size_t n, size_t at) {
        if (n > to.run_from(at)) {  // the piece spans both places
          const size_t first = to.run_from(at);
          copy_bytes(to.at(at), src, first);
          copy_bytes(to.rest, src + first, n - first);
          return;
        }
        // A full cell is copied inline: a small message lands cell by cell, and a call per
        // cell costs more than its bytes.
        if (n == Cell::kInlineBytes) {
          std::memcpy(to.at(at), src, Cell::kInlineBytes);
        } else {
          copy_bytes(to.at(at), src, n);
        }
      },
      [&](uint64_t address, size_t n, size_t at) -> absl::StatusOr<size_t> {
        n = std::min(n, to.run_from(at));  // one place per remote read
        std::byte* dst = to.at(at);
        if (in_step(dst, address)) return read_remote(dst, address, n);
        auto staged = stage_remote(address, n);
        if (!staged.ok()) return staged.status();
        copy_bytes(dst, staged->first, staged->second);
        return staged->second;
      });
}

bool Ring::readable() const {
  return written(cells_done_, cells_[cells_done_ & cell_mask_].tag.load(std::memory_order_acquire));
}

}  // namespace weft::transport::shm
