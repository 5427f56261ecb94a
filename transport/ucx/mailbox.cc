#include "transport/ucx/mailbox.hpp"

#include <algorithm>
#include <cstring>

#include "transport/ucx/worker.hpp"

namespace weft::transport::ucx {
namespace {

constexpr size_t kRingBytes = Mailbox::kWords * sizeof(uint64_t);
constexpr size_t kRegionBytes = kRingBytes + 64;  // the ring, then the peer's position
constexpr size_t kMostWords = Mailbox::words_for(Mailbox::kInlineUpTo);
static_assert((Mailbox::kWords & (Mailbox::kWords - 1)) == 0, "the ring's size is a power of 2");
static_assert(kMostWords + Mailbox::kPublishWords <= Mailbox::kWords);
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
  m->ring_ = reinterpret_cast<uint64_t*>(base);
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
  peer_ring_ = static_cast<uint64_t*>(mapped);
  peer_position_out_ = reinterpret_cast<Position*>(static_cast<std::byte*>(mapped) + kRingBytes);
  return true;
}

void Mailbox::load_peer_position() {
  seen_.words = __atomic_load_n(&peer_position_->words, __ATOMIC_ACQUIRE);
  seen_.bytes = __atomic_load_n(&peer_position_->bytes, __ATOMIC_ACQUIRE);
}

bool Mailbox::room(size_t len) {
  const size_t words = words_for(len);
  if (kWords - (written_ - seen_.words) >= words) return true;
  load_peer_position();
  return kWords - (written_ - seen_.words) >= words;
}

uint64_t Mailbox::window(uint64_t sent) {
  if (sent - seen_.bytes < kWindow / 2) return kWindow - (sent - seen_.bytes);
  load_peer_position();
  return sent - seen_.bytes >= kWindow ? 0 : kWindow - (sent - seen_.bytes);
}

void Mailbox::write(uint64_t offset, const std::byte* data, size_t len) {
  const size_t n = words_for(len);
  const uint64_t at = written_;
  // One 8-byte store a word: its data and flag land together.
  const auto store = [&](size_t i, uint64_t w) {
    __atomic_store_n(&peer_ring_[(at + i) % kWords], flag_at(at + i) | w, __ATOMIC_RELAXED);
  };
  store(0, (offset & 0xffffffff) << 16 | len);
  // Seven bytes a word: eight loaded at once while the eighth is still the packet's, the last
  // ones as they come.
  size_t i = 1, from = 0;
  for (; from + 8 <= len; ++i, from += 7) {
    uint64_t v;
    std::memcpy(&v, data + from, 8);
    store(i, v & kData);
  }
  for (; from < len; ++i, from += 7) {
    uint64_t v = 0;
    std::memcpy(&v, data + from, std::min<size_t>(7, len - from));
    store(i, v);
  }
  for (; i < n; ++i) store(i, 0);  // every word is rewritten on every lap
  written_ += n;
}

std::optional<Mailbox::Packet> Mailbox::peek() const {
  const uint64_t w = word(read_);
  if (!landed(read_, w)) return std::nullopt;
  return Packet{static_cast<uint32_t>(w & 0xffff), static_cast<uint32_t>((w & kData) >> 16)};
}

bool Mailbox::take(const Packet& p, std::byte* dst) {
  const size_t n = 1 + (p.len + 6) / 7;  // the header and the data; the padding is not read
  // The header landed, so the packet is being written: its other words follow within a
  // copy's time. Returning instead would send the caller into its backoff (a 512-byte
  // allreduce took 3 us against 1 us so).
  for (int spins = 0; !landed(read_ + n - 1, word(read_ + n - 1)); ++spins) {
    if (spins == kPatience) return false;
    __builtin_ia32_pause();
  }
  for (size_t i = 1; i < n; ++i) {
    const uint64_t w = word(read_ + i);
    if (!landed(read_ + i, w)) return false;  // the writer's stores need not land in order
    // Eight bytes stored, seven of them data: the next word's store overwrites the eighth.
    const uint64_t v = w & kData;
    std::memcpy(dst + 7 * (i - 1), &v, 8);
  }
  read_ += words_for(p.len);
  return true;
}

void Mailbox::publish_now(uint64_t landed) {
  // Where this side cannot map the peer's region, the peer cannot map this side's either and
  // writes no packets: nothing to tell.
  if (peer_position_out_ == nullptr) return;
  published_ = Position{read_, landed};
  __atomic_store_n(&peer_position_out_->words, published_.words, __ATOMIC_RELEASE);
  __atomic_store_n(&peer_position_out_->bytes, published_.bytes, __ATOMIC_RELEASE);
}

}  // namespace weft::transport::ucx
