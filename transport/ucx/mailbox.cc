#include "transport/ucx/mailbox.hpp"

#include <algorithm>
#include <cstring>

#include "transport/ucx/worker.hpp"

namespace weft::transport::ucx {
namespace {

constexpr size_t kRingBytes = Mailbox::kCells * 64;
// The cells, a line for the peer's position, the bulk ring.
constexpr size_t kRegionBytes = kRingBytes + 64 + Mailbox::kBulkBytes;
constexpr size_t kMostCells = Mailbox::cells_for(Mailbox::kInlineUpTo);
static_assert(kMostCells * Mailbox::kCellBytes == Mailbox::kGatherBytes);
static_assert(Mailbox::kInlineUpTo < 0xffff, "a cells packet's length fits its tag");
static_assert(Mailbox::kCells < 0x10000, "a cell a lap behind has another sequence number");
static_assert((Mailbox::kCells & (Mailbox::kCells - 1)) == 0, "the ring's size is a power of 2");
static_assert(kMostCells + Mailbox::kPublishCells <= Mailbox::kCells);
// A stretch and the skip before it, with what the reader read but has not yet published.
static_assert(2 * Mailbox::kPacketsUpTo + Mailbox::kPublishBulk <= Mailbox::kBulkBytes);
static_assert(Mailbox::kPacketsUpTo > Mailbox::kInlineUpTo && Mailbox::kPacketsUpTo <= 0xffffffff);
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
  m->bulk_ = base + kRingBytes + 64;
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
  peer_bulk_ = static_cast<std::byte*>(mapped) + kRingBytes + 64;
  peer_position_out_ = reinterpret_cast<Position*>(static_cast<std::byte*>(mapped) + kRingBytes);
  return true;
}

void Mailbox::load_peer_position() {
  seen_.cells = __atomic_load_n(&peer_position_->cells, __ATOMIC_ACQUIRE);
  seen_.bulk = __atomic_load_n(&peer_position_->bulk, __ATOMIC_ACQUIRE);
  seen_.bytes = __atomic_load_n(&peer_position_->bytes, __ATOMIC_ACQUIRE);
}

uint64_t Mailbox::bulk_place(uint64_t used, size_t len) {
  if (used % kBulkBytes + stretch(len) <= kBulkBytes) return used;
  return (used / kBulkBytes + 1) * kBulkBytes;
}

bool Mailbox::room(size_t len) {
  const auto fits = [&] {
    if (kCells - (written_ - seen_.cells) < cells_for(len)) return false;
    return len <= kInlineUpTo ||
           bulk_place(bulk_written_, len) + stretch(len) - seen_.bulk <= kBulkBytes;
  };
  if (fits()) return true;
  load_peer_position();
  return fits();
}

uint64_t Mailbox::window(uint64_t sent) {
  if (sent - seen_.bytes < kWindow / 2) return kWindow - (sent - seen_.bytes);
  load_peer_position();
  return sent - seen_.bytes >= kWindow ? 0 : kWindow - (sent - seen_.bytes);
}

void Mailbox::write(uint64_t offset, const Gather& from, size_t len) {
  if (len > kInlineUpTo) return write_bulk(offset, from, len);
  const size_t cells = cells_for(len);
  if (cells == 1) {
    Cell* cell = &peer_ring_[written_ % kCells];
    from.copy_out(cell->data, 0, len);
    // The cell's data before its tag: a reader that finds the tag finds the data.
    __atomic_store_n(&cell->tag, first_tag(written_, len, offset), __ATOMIC_RELEASE);
    written_ += 1;
    return;
  }
  // The packet gathered here first, then copied a cell at a time: a copy per cell straight
  // from the caller's two places cost a 2-rank 512-byte allgather (a 280-byte packet) about
  // 250 instructions more.
  std::byte packet[kGatherBytes];
  from.copy_out(packet, 0, len);
  for (size_t i = 0; i < cells; ++i) {
    Cell* cell = &peer_ring_[(written_ + i) % kCells];
    std::memcpy(cell->data, packet + i * kCellBytes, std::min(kCellBytes, len - i * kCellBytes));
    __atomic_store_n(&cell->tag,
                     i == 0 ? first_tag(written_, len, offset) : sequence(written_ + i),
                     __ATOMIC_RELEASE);
  }
  written_ += cells;
}

void Mailbox::write_bulk(uint64_t offset, const Gather& from, size_t len) {
  const uint64_t at = bulk_place(bulk_written_, len);
  pace_.copy(len, [&] { from.copy_out(peer_bulk_ + at % kBulkBytes, 0, len); });
  Cell* cell = &peer_ring_[written_ % kCells];
  const uint64_t length = len;
  std::memcpy(cell->data, &length, sizeof length);
  std::memcpy(cell->data + 8, &at, sizeof at);
  // The stretch, then its cell: a reader that finds the cell finds the bytes.
  __atomic_store_n(&cell->tag, first_tag(written_, kBulk, offset), __ATOMIC_RELEASE);
  bulk_written_ = at + stretch(len);
  written_ += 1;
}

std::optional<Mailbox::Packet> Mailbox::peek() const {
  const uint64_t t = tag(read_);
  if (!landed(read_, t)) return std::nullopt;
  Packet p{static_cast<uint32_t>(t >> 32) & 0xffff, static_cast<uint32_t>(t), 0};
  // A length no writer gives a packet reads as 0, which valid() refuses: cells take at most
  // kInlineUpTo, and a bulk packet more.
  if (p.len != kBulk && p.len > kInlineUpTo) p.len = 0;
  if (p.len == kBulk) {
    const std::byte* data = ring_[read_ % kCells].data;
    uint64_t length = 0;
    std::memcpy(&length, data, sizeof length);
    std::memcpy(&p.bulk_at, data + 8, sizeof p.bulk_at);
    p.len = length > kInlineUpTo && length <= kPacketsUpTo ? static_cast<uint32_t>(length) : 0;
  }
  return p;
}

bool Mailbox::valid(const Packet& p) const {
  if (p.len == 0 || p.len > kPacketsUpTo) return false;
  return p.len <= kInlineUpTo ||
         (p.bulk_at >= bulk_read_ && p.bulk_at % kBulkBytes + p.len <= kBulkBytes);
}

const std::byte* Mailbox::take(const Packet& p, std::byte (&scratch)[kGatherBytes]) {
  if (in_bulk(p)) {  // its cell landed (peek), and so had its bytes before it
    consume_bulk(p);
    return bulk_bytes(p, 0);
  }
  const size_t n = cells_for(p.len);
  if (n == 1) return ring_[read_++ % kCells].data;  // landed (peek)
  return gather(n, scratch);
}

const std::byte* Mailbox::take_bulk_whole(size_t* len) {
  const std::optional<Packet> p = peek();
  if (!p || !valid(*p)) return nullptr;
  consume_bulk(*p);
  *len = p->len;
  return bulk_bytes(*p, 0);
}

const std::byte* Mailbox::gather(size_t cells, std::byte (&scratch)[kGatherBytes]) {
  // The first cell landed, so the packet is being written: its other cells follow within a
  // copy's time. Returning instead would send the caller into its backoff (a 512-byte
  // allreduce took 3 us against 1 us so).
  for (int spins = 0; !landed(read_ + cells - 1, tag(read_ + cells - 1)); ++spins) {
    if (spins == kPatience) return nullptr;
    spin_pause();
  }
  // Every tag is stored with release order after the cells before it: the last one landed,
  // so have they. Gathered whole cells at a time (a last cell's bytes past the packet are an
  // earlier lap's, never handed over).
  for (size_t i = 0; i < cells; ++i) {
    std::memcpy(scratch + i * kCellBytes, ring_[(read_ + i) % kCells].data, kCellBytes);
  }
  read_ += cells;
  return scratch;
}

void Mailbox::publish_now(uint64_t landed) {
  // Where this side cannot map the peer's region, the peer cannot map this side's either and
  // writes no packets: nothing to tell.
  if (peer_position_out_ == nullptr) return;
  published_ = Position{read_, bulk_read_, landed};
  __atomic_store_n(&peer_position_out_->cells, published_.cells, __ATOMIC_RELEASE);
  __atomic_store_n(&peer_position_out_->bulk, published_.bulk, __ATOMIC_RELEASE);
  __atomic_store_n(&peer_position_out_->bytes, published_.bytes, __ATOMIC_RELEASE);
}

}  // namespace weft::transport::ucx
