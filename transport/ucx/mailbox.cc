#include "transport/ucx/mailbox.hpp"

#include <algorithm>
#include <cstring>

#include "transport/ucx/worker.hpp"

namespace weft::transport::ucx {
namespace {

constexpr size_t kRingBytes = Mailbox::kCells * 64;
constexpr size_t kRegionBytes = kRingBytes + 64;  // the ring, then the peer's position
constexpr size_t kMostCells = Mailbox::cells_for(Mailbox::kInlineUpTo);
static_assert((Mailbox::kCells & (Mailbox::kCells - 1)) == 0, "the ring's size is a power of 2");
static_assert(kMostCells + Mailbox::kPublishCells <= Mailbox::kCells);
static_assert(Mailbox::kWindow + Mailbox::kPublishBytes < (uint64_t{1} << 31),
              "offsets compare exactly modulo 2^32");

}  // namespace

absl::StatusOr<std::unique_ptr<Mailbox>> Mailbox::create(ucp_context_h context) {
  std::unique_ptr<Mailbox> m(new Mailbox());
  m->context_ = context;
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_FLAGS;
  params.length = kRegionBytes;
  // UCX allocates it, so that on one host its shared-memory transports can map it into the
  // peer.
  params.flags = UCP_MEM_MAP_ALLOCATE;
  if (ucs_status_t s = ucp_mem_map(context, &params, &m->memh_); s != UCS_OK) {
    m->memh_ = nullptr;
    return ucx_error(s, "mapping a ucx link's mailbox");
  }
  ucp_mem_attr_t attr{};
  attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS;
  if (ucs_status_t s = ucp_mem_query(m->memh_, &attr); s != UCS_OK) {
    return ucx_error(s, "reading where a ucx link's mailbox is");
  }
  auto* base = static_cast<std::byte*>(attr.address);
  std::memset(base, 0, kRegionBytes);  // every page touched now, none on the data path
  m->ring_ = reinterpret_cast<Cell*>(base);
  m->peer_position_ = reinterpret_cast<const Position*>(base + kRingBytes);
  void* key = nullptr;
  size_t key_len = 0;
  if (ucs_status_t s = ucp_rkey_pack(context, m->memh_, &key, &key_len); s != UCS_OK) {
    return ucx_error(s, "packing a ucx link's mailbox key");
  }
  const auto address = reinterpret_cast<uint64_t>(base);
  m->card_.assign(reinterpret_cast<const char*>(&address), sizeof address);
  m->card_.append(static_cast<const char*>(key), key_len);
  ucp_rkey_buffer_release(key);
  return m;
}

Mailbox::~Mailbox() {
  if (rkey_ != nullptr) ucp_rkey_destroy(rkey_);
  if (memh_ != nullptr) ucp_mem_unmap(context_, memh_);
}

absl::StatusOr<bool> Mailbox::reach(ucp_ep_h ep, std::string_view card) {
  uint64_t address = 0;
  if (card.size() <= sizeof address) return false;  // the peer has no mailbox
  std::memcpy(&address, card.data(), sizeof address);
  if (ucs_status_t s = ucp_ep_rkey_unpack(ep, card.data() + sizeof address, &rkey_); s != UCS_OK) {
    rkey_ = nullptr;
    return ucx_error(s, "unpacking the peer's mailbox key");
  }
  void* mapped = nullptr;
  if (ucp_rkey_ptr(rkey_, address, &mapped) != UCS_OK) return false;  // not on this host
  // Only this side writes there, and has written nothing yet: zeros fault in the pages of
  // this process's mapping now rather than on the data path.
  std::memset(mapped, 0, kRegionBytes);
  peer_ring_ = static_cast<Cell*>(mapped);
  peer_position_out_ = reinterpret_cast<Position*>(static_cast<std::byte*>(mapped) + kRingBytes);
  return true;
}

void Mailbox::load_peer_position() {
  seen_.cells = __atomic_load_n(&peer_position_->cells, __ATOMIC_ACQUIRE);
  seen_.bytes = __atomic_load_n(&peer_position_->bytes, __ATOMIC_ACQUIRE);
}

bool Mailbox::room(size_t len) {
  const size_t cells = cells_for(len);
  if (kCells - (written_ - seen_.cells) >= cells) return true;
  load_peer_position();
  return kCells - (written_ - seen_.cells) >= cells;
}

uint64_t Mailbox::window(uint64_t sent) {
  if (sent - seen_.bytes < kWindow / 2) return kWindow - (sent - seen_.bytes);
  load_peer_position();
  return sent - seen_.bytes >= kWindow ? 0 : kWindow - (sent - seen_.bytes);
}

void Mailbox::write(uint64_t offset, const std::byte* data, size_t len) {
  const uint64_t at = written_;
  Cell* cell = &peer_ring_[at % kCells];
  const uint32_t low = static_cast<uint32_t>(offset);
  std::memcpy(cell->data, &low, sizeof low);
  size_t from = std::min(len, kCellBytes - 8);
  std::memcpy(cell->data + 8, data, from);
  // Each cell's data before its tag: a reader that finds the tag finds the data.
  __atomic_store_n(&cell->tag, sequence(at) | len, __ATOMIC_RELEASE);
  for (uint64_t i = at + 1; from < len; ++i, from += kCellBytes) {
    cell = &peer_ring_[i % kCells];
    std::memcpy(cell->data, data + from, std::min(kCellBytes, len - from));
    __atomic_store_n(&cell->tag, sequence(i), __ATOMIC_RELEASE);
  }
  written_ += cells_for(len);
}

std::optional<Mailbox::Packet> Mailbox::peek() const {
  const uint64_t t = tag(read_);
  if (!landed(read_, t)) return std::nullopt;
  uint32_t offset;
  std::memcpy(&offset, ring_[read_ % kCells].data, sizeof offset);
  return Packet{static_cast<uint32_t>(t & kLength), offset};
}

bool Mailbox::take(const Packet& p, std::byte* dst) {
  const size_t n = cells_for(p.len);
  // The first cell landed, so the packet is being written: its other cells follow within a
  // copy's time. Returning instead would send the caller into its backoff (a 512-byte
  // allreduce took 3 us against 1 us so).
  for (int spins = 0; !landed(read_ + n - 1, tag(read_ + n - 1)); ++spins) {
    if (spins == kPatience) return false;
    __builtin_ia32_pause();
  }
  // Every tag is stored with release order after the cells before it: the last one landed,
  // so have they.
  size_t to = std::min<size_t>(p.len, kCellBytes - 8);
  std::memcpy(dst, ring_[read_ % kCells].data + 8, to);
  for (uint64_t i = read_ + 1; to < p.len; ++i, to += kCellBytes) {
    std::memcpy(dst + to, ring_[i % kCells].data, std::min<size_t>(kCellBytes, p.len - to));
  }
  read_ += n;
  return true;
}

void Mailbox::publish_now(uint64_t landed) {
  // Where this side cannot map the peer's region, the peer cannot map this side's either and
  // writes no packets: nothing to tell.
  if (peer_position_out_ == nullptr) return;
  published_ = Position{read_, landed};
  __atomic_store_n(&peer_position_out_->cells, published_.cells, __ATOMIC_RELEASE);
  __atomic_store_n(&peer_position_out_->bytes, published_.bytes, __ATOMIC_RELEASE);
}

}  // namespace weft::transport::ucx
