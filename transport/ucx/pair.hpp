// A ucx link: one UCP endpoint to the peer's worker, and the link's byte stream carried as
// tagged messages (address.hpp: one tag per direction, which UCX keeps in order).
//
// Sending. send_some copies into a ring of this link's own (pages touched when the link opens)
// and posts the bytes as one message; the ring's space comes back as UCX completes the sends,
// oldest first, and an empty ring starts over at its beginning, so small sends stay in cache.
// send_some_more copies without posting: the bytes leave with the next send as one message (a
// call check's state and its data), or before the link's next wait, offer or tend, so nothing
// held back is ever waited for. offer_some posts the caller's own buffer, and its bytes count
// as taken once the send completed.
//
// Every message up to kEagerUpTo, copied or offered, asks UCX for fast completion, which UCX
// sends eagerly, through its own buffers, up to UCX_RNDV_SEND_NBR_THRESH (256 KiB by default),
// as Open MPI's blocking sends ask it. Larger offers go by UCX's zero-copy rendezvous (RDMA
// where the transport has it, CMA between processes of one host) straight into where the peer
// wants them. Below that the rendezvous's round trip, which the sender waits for, costs more
// than UCX's copy: a 16 KiB allreduce took 7-9 us by rendezvous against 4.7-5.6 us eagerly; a
// 32 KiB allgather 4.5 against 3.0 us, a 256 KiB allreduce 42-45 against 29 us (the ring's
// second half sends bytes just reduced, still in the sender's cache). A 128-256 KiB allgather
// of a buffer nobody writes between calls went 10% faster by rendezvous, the only case found
// where it wins below 256 KiB. Where the mailbox's large packets are written slowly (the
// peer's core far from this one, transport/bulk_pace.hpp), offers from 64 KiB go neither
// as packets nor eagerly but by rendezvous, read in one copy; copied sends stay packets
// (by rendezvous too, a 64 KiB allreduce took 48 us there instead of 33). So does the
// caller's input (lend_input) from that size once this side writes packets: bytes this
// call has not written are no likelier in this core's cache than in the peer's, and the
// two copies of a packet cost twice the one read (a 2-rank 512 KiB allgather in place
// 29-32 us as packets, 16-17 by rendezvous; Open MPI 14-16). Bytes the call has just
// written, reduced or forwarded, stay packets: sent by rendezvous, a 512 KiB allreduce's
// second half made it 91-117 us instead of 72-78. An offer
// larger than kMaxMessage leaves as several messages, up to kOffersInFlight of them under
// way at once, so that the peer finds the next one posted as soon as it has read one.
//
// Receiving. The next message is found with a tag probe, so its length is known before it
// lands: one that fits where the caller wants the next bytes goes straight there (for a
// large one a rendezvous into the user's buffer), any other into this link's receive buffer,
// from which it is handed over as the caller asks. A receive lands about one large message
// at most, so that the caller's own sends go on between them. A zero-length message says
// the peer closed the link: after its last bytes, for the receives, and at the offset kept for
// it (address.hpp), for check_peer, which finds it however much of the stream is unread.
//
// Mailboxes. Between processes of one host, once a side has read the other's hello (which
// carries its mailbox's card: the higher rank reads it when it opens the link, the lower with
// its first receive or, on a link it only sends on, its first send), its messages up to
// Mailbox::kPacketsUpTo, copied sends and offers alike, are written straight from the caller's
// bytes into the peer's mailbox, where the peer finds them by polling its own memory
// (mailbox.hpp) and hands them over from there when the caller wants all of one. Every
// message's tag carries its stream offset (address.hpp), so the receiver takes packets and
// tagged messages in the stream's order. Between hosts every message goes by tag.
//
// Waits. A message once matched is finished within the path timeout, UCX progressing the
// worker meanwhile (a message that has begun to arrive is as good as a copy under way);
// everything else returns at once. An error UCX reports on the endpoint fails the link,
// with UCX's words and the peer named. A matched message that does not finish in time cannot
// be taken back from UCX, which would go on writing it into the caller's buffer: the worker
// is then never progressed again (Worker::stop_progress), and the communicator is done.
#pragma once

#include <ucp/api/ucp.h>

#include <array>
#include <memory>
#include <optional>
#include <string>

#include "absl/functional/function_ref.h"
#include "transport/transport.hpp"
#include "transport/ucx/address.hpp"
#include "transport/ucx/mailbox.hpp"
#include "transport/ucx/requests.hpp"
#include "transport/ucx/worker.hpp"

namespace weft::transport::ucx {

class UcxPair : public Pair, private HoldsBytes {
 public:
  struct Options {
    int self = -1;
    int peer = -1;
    int32_t peer_pid = 0;
    bool same_host = false;  ///< the peer's process can be asked whether it still runs
    uint64_t tag_out = 0;    ///< address.hpp's link_tag(self -> peer)
    uint64_t tag_in = 0;     ///< and back
    int stall_ms = 5000;     ///< how long a matched message may take to finish
  };

  /// Creates the endpoint and sends the hello; the higher rank also waits, until
  /// `deadline`, for the peer's (so a peer that never connects is an error there, as in
  /// shm: the lower rank returns at once).
  static absl::StatusOr<std::unique_ptr<UcxPair>> open(std::shared_ptr<Worker> worker,
                                                       const std::string& peer_address,
                                                       const Options& options, Deadline deadline);
  ~UcxPair() override;

  int peer() const override { return o_.peer; }
  absl::StatusOr<size_t> send_some(const std::byte* data, size_t len) override;
  absl::StatusOr<size_t> send_some_more(const std::byte* data, size_t len) override;
  absl::StatusOr<size_t> send_gathered(const Gather& from, size_t len) override;
  absl::StatusOr<size_t> offer_some(const std::byte* data, size_t len) override;
  absl::StatusOr<size_t> lend_input(const std::byte* data, size_t len) override;
  absl::StatusOr<size_t> lend_to_reduce(const std::byte* data, size_t len) override;
  absl::StatusOr<size_t> recv_some(size_t max, Sink sink) override;
  absl::StatusOr<size_t> recv_scatter(const Scatter& to, size_t max) override;
  absl::Status check_peer() override;
  PairStats stats() const override;
  bool tend() override;
  /// Whether this side writes its small messages into the peer's mailbox (one host, the
  /// peer's hello read) rather than sending them by tag.
  bool writes_packets() const { return packets_out_; }
  /// Bytes of offers this side posted for UCX's rendezvous (no fast completion), which the
  /// peer reads in one copy where UCX has one (CMA on one host).
  uint64_t bytes_offered_by_rendezvous() const { return offered_by_rendezvous_; }
  /// The worker this link runs on (a test holds it to stop this side mid-message).
  Worker& worker() const { return *worker_; }

  static constexpr size_t kMaxMessage = size_t{4} << 20;  ///< and the receive buffer's size
  static constexpr size_t kSendRingBytes = size_t{8} << 20;
  /// Offers below this go as copied sends (a packet, or a copy in the ring that leaves with
  /// any held bytes), not from the caller's buffer.
  static constexpr size_t kOfferFrom = size_t{4} << 10;
  /// Messages of one offer under way at once. One at a time, a receiver that has read a
  /// message waits for the sender to see that and post the next, and two ranks trading
  /// blocks of more than kMaxMessage took turns reading instead of reading together.
  static constexpr size_t kOffersInFlight = 4;
  /// Bytes the peer reduces (lend_to_reduce) go in messages of this size instead, this many
  /// under way: each lands in the peer's receive buffer and is reduced from there, so the
  /// peer reuses the first 512 KiB of that buffer, still in its cache, where a 4 MiB message
  /// was written out to memory and read back (a 2-rank 8 MiB allreduce 16% faster). Bytes
  /// the peer only copies keep whole messages: they land straight in the user's buffer, and
  /// each message's rendezvous costs (a 2-rank 8 MiB allgather in place 19% slower so).
  static constexpr size_t kReducedMessageBytes = size_t{512} << 10;
  static constexpr size_t kReducedInFlight = 16;
  /// Messages up to this ask UCX for fast completion (eager; see above).
  static constexpr size_t kEagerUpTo = size_t{256} << 10;
  /// send_some_more holds back at most this much before it posts anyway.
  static constexpr size_t kHoldUpTo = size_t{16} << 10;
  /// A send cut short by the ring's end to less than this (or than the whole send) starts
  /// over at the ring's beginning instead: one message, not two.
  static constexpr size_t kUncutUpTo = size_t{16} << 10;

 private:
  UcxPair(std::shared_ptr<Worker> worker, const Options& options);

  // What an offer's bytes are, which decides how they go.
  enum class Lent {
    kOffered,  // offer_some, lend_some: kMaxMessage messages, packets up to kPacketsUpTo
    kInput,    // lend_input: on one host, from BulkPace::kTimedFrom, read by the peer in one copy
    kReduced,  // lend_to_reduce: kReducedMessageBytes messages
  };
  // Whether `len` bytes of the caller's input go in one copy, by rendezvous (pair.hpp).
  static bool input_in_one_copy(Lent lent, size_t len) {
    return lent == Lent::kInput && len >= BulkPace::kTimedFrom;
  }

  // The operations of the same names, with the worker held (Worker::Hold).
  absl::StatusOr<size_t> send_locked(const std::byte* data, size_t len);
  absl::Status check_peer_locked();
  // offer_some, lend_input and lend_to_reduce: holds the worker and offers `lent` bytes.
  absl::StatusOr<size_t> offer(const std::byte* data, size_t len, Lent lent);

  // Sending.
  // Copies into the ring and posts what is held with it as one message; with `more`, holds
  // the bytes back instead (send_some_more), up to kHoldUpTo.
  absl::StatusOr<size_t> stage(const std::byte* data, size_t len, bool more);
  absl::Status post_pending();  // posts the bytes held back, if any
  // Whether the next `len` bytes of the stream can go as a packet now; an `offered` message
  // (the caller's own buffer) only while large packets are written fast (bulk_pace.hpp).
  bool packet_fits(size_t len, bool offered);
  // Whether an offered message of `len` bytes asks UCX for fast completion (eager).
  bool offer_eagerly(size_t len) const;
  void send_held_bytes() override;  // from the worker's thread (Worker::holding)
  absl::Status post(const std::byte* data, size_t len, uint64_t ring_end);
  // Writes the stream's next `len` bytes, from `from`, into the peer's mailbox as one packet
  // (packet_fits said it fits); the ring is free up to `ring_end` once sends before it are.
  void write_packet(const Gather& from, size_t len, uint64_t ring_end);
  // A send with nothing before it to wait for or to join (no bytes held back, no offer or
  // send under way) that fits a packet: written now, straight from `from`, and true.
  bool send_packet_now(const Gather& from, size_t len);
  absl::Status reclaim();  // frees the ring space of completed sends, oldest first
  // Receiving: the next message's length (nullopt: none yet), the hello consumed on the way.
  absl::StatusOr<std::optional<size_t>> next_message();
  // recv_some and recv_scatter: up to `max` bytes, each run from the receive buffer handed
  // over with its place in the receive (`at`); a message that fits at `direct` (when set)
  // lands there instead.
  using HandOver = absl::FunctionRef<void(const std::byte* data, size_t n, size_t at)>;
  absl::StatusOr<size_t> receive(size_t max, const Scatter* direct, HandOver hand_over);
  absl::Status land(std::byte* dst, size_t len);  // receives the probed message into dst
  // Mailboxes: the packet that comes next in the stream, if one has landed (none: nothing
  // yet, or a tagged message comes first).
  std::optional<Mailbox::Packet> packet_next() const;
  // Takes that packet and says whether it did: handed over straight from the mailbox (`got`
  // counting the bytes) when it lies in the bulk ring (up to `room` bytes of it, the rest left
  // there for the next receive) or `room` holds all of it, else unpacked into the receive
  // buffer.
  absl::StatusOr<bool> take_packet(const Mailbox::Packet& p, size_t room, HandOver hand_over,
                                   size_t* got);
  absl::Status read_hello();  // the probed message, the peer's hello
  // A side that only sends on this link never receives, so it reads the peer's hello from its
  // sends (each public one asks first), as soon as it has come: else every message went by tag.
  // Without a mailbox (between hosts) the hello says nothing a send needs: the first receive
  // reads it, and a send pays no call.
  absl::Status hear_hello_if_pending() {
    return hello_pending_ && mailbox_ != nullptr ? hear_hello() : absl::OkStatus();
  }
  absl::Status hear_hello();
  // Receives and drops this link's messages still queued, before its endpoint closes: UCX
  // answers a rendezvous through the endpoint, and one received after it closed (the
  // worker's drop_unread) failed UCX's check that the endpoint is the worker's.
  void receive_unread();
  // The tag of the peer's message that starts at stream offset `at` (address.hpp).
  uint64_t tag_at(uint64_t at) const { return o_.tag_in | (at & kTagOffsetBits); }
  absl::Status wait(void* request, const char* what);
  // Gives up on a request that did not finish in time (pair.cc says how).
  void abandon(void* request);
  static absl::Status offer_changed();

  absl::Status usable();  // the link's failure, if it failed
  bool peer_sent_closed() const;  // the peer's closing notice (address.hpp) has come
  bool readable() const;  // bytes of the peer's wait here to be received
  absl::Status fail(absl::Status cause);
  absl::Status failure(const char* what, ucs_status_t status);

  std::shared_ptr<Worker> worker_;
  Options o_;
  ucp_ep_h ep_ = nullptr;

  std::unique_ptr<std::byte[]> ring_;  // kSendRingBytes; positions count bytes ever used
  uint64_t allocated_ = 0, freed_ = 0;
  size_t pending_at_ = 0, pending_len_ = 0;  // held back in the ring: offset, bytes
  static constexpr size_t kMaxInFlight = 256;
  RequestQueue<uint64_t, kMaxInFlight> sends_;  // marks: the ring is free up to here once done
  // An offer under way (offer_some): its messages, marked with where each ends in the caller's
  // buffer. Bytes [offer_at_, offer_done_) completed but are not yet handed back as taken,
  // [offer_done_, offer_posted_) are still under way. offer_at_ is null when no offer is.
  RequestQueue<const std::byte*, kReducedInFlight> offered_;
  Lent offer_lent_ = Lent::kOffered;  // of the offer under way
  uint64_t offered_by_rendezvous_ = 0;
  const std::byte* offer_at_ = nullptr;
  const std::byte* offer_done_ = nullptr;
  const std::byte* offer_posted_ = nullptr;

  // Null between hosts, and where UCX could not allocate one.
  std::unique_ptr<Mailbox> mailbox_;
  bool packets_out_ = false;  // this side writes packets: UCX maps the peer's mailbox here
  uint64_t sent_ = 0;    // stream bytes posted
  uint64_t landed_ = 0;  // stream bytes received
  // Bytes of the next bulk packet already handed over: a receive asking for less than a
  // packet (a call check's head before its data) takes the rest from the bulk ring later,
  // not from a copy in the inbox.
  size_t packet_part_ = 0;
  // The low 32 bits of the stream offset where the packet this side reads next starts, as
  // its cell gives them.
  uint32_t packet_start() const { return static_cast<uint32_t>(landed_ - packet_part_); }
  static constexpr size_t kPrefetchRestBytes = 4096;  // of a packet's rest, asked for early

  std::unique_ptr<std::byte[]> inbox_;  // kMaxMessage
  size_t inbox_at_ = 0, inbox_len_ = 0;  // unread bytes [at, len)
  ucp_tag_message_h probed_ = nullptr;   // matched, not yet received
  size_t probed_len_ = 0;
  bool hello_pending_ = true;  // the peer's hello is its first message
  bool peer_closed_ = false;

  absl::Status failed_;  // the link's thread only
  // UCX reports endpoint errors from whichever thread progresses the worker; the worker's.
  EndpointFailure* endpoint_failure_ = nullptr;

  LinkCounter bytes_sent_, bytes_received_, errors_;
};

}  // namespace weft::transport::ucx
