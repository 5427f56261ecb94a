// What only the shm transport does: offers (the peer reads the sender's buffer) that must
// resume where they left off, and cell tags, written by the peer, that the reader checks
// before it trusts them. transport_test.cc runs the suite every transport passes.
#include <unistd.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/unit/transport_harness.hpp"
#include "transport/shm/context.hpp"
#include "transport/shm/ring.hpp"

namespace weft::transport {
namespace {

const TransportCase kShm{"shm", "shm", &shm::make_transport, false};

// While the peer may still be reading an offer, the sender's buffer is the peer's to read: a
// send that resumes anywhere else is a caller's bug and fails instead of corrupting the stream.
TEST(ShmTransport, AnOfferResumesOnlyWhereItLeftOff) {
  Ranks r = make_ranks(kShm, 2);
  ASSERT_EQ(r.transports.size(), 2u);
  std::unique_ptr<Pair> a, b;
  ASSERT_TRUE(connect_pair(r, 0, 1, a, b));
  EXPECT_EQ(drain(*b), 0u);  // b checks that it may read a's memory
  const std::vector<std::byte> x = make_message(7, 1 << 20), y = make_message(8, 1 << 20);
  auto posted = a->offer_some(x.data(), x.size());
  ASSERT_TRUE(posted.ok()) << posted.status();
  EXPECT_EQ(*posted, 0u) << "an offer counts as taken only once the peer has read it";
  auto elsewhere = a->offer_some(y.data(), y.size());
  EXPECT_EQ(elsewhere.status().code(), absl::StatusCode::kInternal) << elsewhere.status();

  std::vector<std::byte> got(x.size());
  size_t done = 0;
  for (int i = 0; i < 1000 && done < got.size(); ++i) {
    auto n = b->recv_into(got.data() + done, got.size() - done);
    ASSERT_TRUE(n.ok()) << n.status();
    done += *n;
  }
  EXPECT_EQ(first_mismatch(got, 7), -1);
  auto taken = a->offer_some(x.data(), x.size());
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(*taken, x.size());
  EXPECT_EQ(a->stats().bytes_sent_single_copy, x.size());
}

// The peer writes the cell tags; the reader checks each before it trusts the count in it.
TEST(ShmTransport, CorruptCellsAreRefusedNotFollowed) {
  constexpr uint64_t kFirstCell = uint64_t{1} << 32;  // sequence number 1
  const uint64_t bad_tags[] = {
      kFirstCell | 0,                                       // empty
      kFirstCell | shm::Cell::kBulk | shm::Cell::kOffer | 8,  // two kinds
      kFirstCell | 57,                                      // inline, longer than a cell
      kFirstCell | shm::Cell::kBulk | (1 << 20),            // bulk, past the stretch limit
      kFirstCell | shm::Cell::kOffer | 4096,                // an offer nobody allowed
  };
  for (const uint64_t tag : bad_tags) {
    const std::string name = absl::StrCat("/weft-test-corrupt-", getpid(), "-", tag & 0xffffffff);
    auto receiver = shm::Ring::create(name, 1 << 16);
    ASSERT_TRUE(receiver.ok()) << receiver.status();
    auto sender = shm::Ring::attach(name, Deadline::after(absl::Seconds(5)), [] { return true; });
    ASSERT_TRUE(sender.ok()) << sender.status();
    // Cells start one page after the header (transport/shm/ring.cc).
    auto* cells = reinterpret_cast<shm::Cell*>(reinterpret_cast<std::byte*>(&sender->header()) + 4096);
    cells[0].tag.store(tag, std::memory_order_release);
    std::byte out[64];
    auto got = receiver->read_into(Scatter{out, sizeof out, nullptr}, sizeof out);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << std::hex << tag;
    EXPECT_NE(got.status().message().find("corrupt"), absl::string_view::npos) << got.status();
  }
}

// The ring's sizes come from its header once, at attach, and must be the ones weft makes: a
// cell count of 0 (every index then masked by ~0) or an odd bulk size would send reads and
// writes past the mapping.
TEST(ShmTransport, AHeaderWithSizesWeftNeverMakesIsRefusedAtAttach) {
  for (int corruption : {0, 1, 2}) {
    const std::string name = absl::StrCat("/weft-test-header-", getpid(), "-", corruption);
    auto creator = shm::Ring::create(name, 1 << 16);
    ASSERT_TRUE(creator.ok()) << creator.status();
    shm::RingHeader& h = creator->header();
    if (corruption == 0) {
      h.bulk_capacity += h.cells * sizeof(shm::Cell);  // the same mapping size, no cells
      h.cells = 0;
    } else if (corruption == 1) {
      h.cells = (uint64_t{1} << 58) + h.cells;  // wraps back to the right size when multiplied
    } else {
      h.cells -= 1;
      h.bulk_capacity += sizeof(shm::Cell);  // same size, odd capacity
    }
    auto attached = shm::Ring::attach(name, Deadline::after(absl::Seconds(5)), [] { return true; });
    EXPECT_EQ(attached.status().code(), absl::StatusCode::kFailedPrecondition) << corruption;
    EXPECT_NE(attached.status().message().find("not a weft ring"), absl::string_view::npos)
        << attached.status();
  }
}

}  // namespace
}  // namespace weft::transport
