// The ucx mailbox (transport/ucx/mailbox.hpp) between two workers of this process, which
// UCX links by shared memory as it does two processes of one host: packets of every size it
// takes arrive whole and in order over several laps of both its rings, and a cell that says
// its bytes lie outside the bulk ring, or gives a length no writer gives, is refused instead
// of read; take_whole takes a packet only when it may take all of it.
#ifdef WEFT_HAVE_UCX

#include "transport/ucx/mailbox.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "transport/ucx/worker.hpp"

namespace weft::transport::ucx {
namespace {

// Two workers, an endpoint each way, a mailbox on each side that reaches the other's.
class MailboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 2; ++i) {
      auto w = Worker::create("", 1);
      ASSERT_TRUE(w.ok()) << w.status();
      workers_[i] = *std::move(w);
      auto m = Mailbox::create(workers_[i]->context());
      ASSERT_TRUE(m.ok()) << m.status();
      boxes_[i] = *std::move(m);
    }
    for (int i = 0; i < 2; ++i) {
      Worker::Hold hold(*workers_[i]);
      ucp_ep_params_t params{};
      params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
      params.address = reinterpret_cast<const ucp_address_t*>(workers_[1 - i]->address().data());
      ASSERT_EQ(ucp_ep_create(workers_[i]->get(), &params, &eps_[i]), UCS_OK);
      auto mapped = boxes_[i]->reach(eps_[i], boxes_[1 - i]->card());
      ASSERT_TRUE(mapped.ok()) << mapped.status();
      if (!*mapped) GTEST_SKIP() << "UCX maps no shared memory between these workers";
    }
  }
  void TearDown() override {
    for (int i = 0; i < 2; ++i) boxes_[i].reset();  // their keys were unpacked on the endpoints
    for (int i = 0; i < 2; ++i) {
      if (eps_[i] == nullptr) continue;
      Worker::Hold hold(*workers_[i]);
      ucp_ep_destroy(eps_[i]);
    }
  }
  Mailbox& writer() { return *boxes_[0]; }  // writes into the reader's region
  Mailbox& reader() { return *boxes_[1]; }

  std::shared_ptr<Worker> workers_[2];
  std::unique_ptr<Mailbox> boxes_[2];
  ucp_ep_h eps_[2] = {nullptr, nullptr};
};

TEST_F(MailboxTest, PacketsOfEverySizeArriveWholeAndInOrderOverSeveralLaps) {
  std::mt19937_64 rng(20261206);
  const auto size = [&]() -> size_t {
    switch (rng() % 6) {
      case 0: return 1 + rng() % Mailbox::kInlineUpTo;                // cells
      case 1: return Mailbox::kInlineUpTo + (rng() % 2);              // the edge
      case 2: return Mailbox::kPacketsUpTo - (rng() % 2);             // the largest
      default: return Mailbox::kInlineUpTo + 1 + rng() % 8000;        // bulk
    }
  };
  std::vector<std::byte> sent, got;
  uint64_t landed = 0;
  // Three laps of the bulk ring, the writer going until the rings are full each round.
  for (int round = 0; round < 1000 && sent.size() < 3 * Mailbox::kBulkBytes; ++round) {
    for (;;) {
      const size_t len = size();
      if (!writer().room(len) || writer().window(sent.size()) < len) break;
      std::vector<std::byte> bytes(len);
      for (auto& b : bytes) b = static_cast<std::byte>(rng());
      writer().write(sent.size(), Gather{bytes.data(), len, nullptr}, len);
      sent.insert(sent.end(), bytes.begin(), bytes.end());
    }
    while (landed < sent.size()) {
      const std::optional<Mailbox::Packet> p = reader().peek();
      ASSERT_TRUE(p.has_value()) << "a packet written is not there, at byte " << landed;
      ASSERT_EQ(p->offset, static_cast<uint32_t>(landed));
      ASSERT_TRUE(reader().valid(*p)) << p->len << " bytes at bulk " << p->bulk_at;
      std::byte scratch[Mailbox::kGatherBytes];
      const std::byte* data = reader().take(*p, scratch);
      ASSERT_NE(data, nullptr);
      got.insert(got.end(), data, data + p->len);
      landed += p->len;
      reader().publish(landed);
    }
    EXPECT_FALSE(reader().peek().has_value()) << "a packet nobody wrote";
  }
  ASSERT_GE(sent.size(), 3 * Mailbox::kBulkBytes) << "the rings never filled";
  ASSERT_EQ(got.size(), sent.size());
  EXPECT_TRUE(std::memcmp(got.data(), sent.data(), sent.size()) == 0);
}

TEST_F(MailboxTest, ACellThatPutsItsBytesOutsideTheBulkRingIsRefused) {
  std::vector<std::byte> bytes(1000, std::byte{7});
  ASSERT_TRUE(writer().room(bytes.size()));
  writer().write(0, Gather{bytes.data(), bytes.size(), nullptr}, bytes.size());
  std::optional<Mailbox::Packet> p = reader().peek();
  ASSERT_TRUE(p.has_value());
  EXPECT_TRUE(reader().valid(*p));
  // The reader's region starts where its card says; the first cell's bytes 8-15 say where
  // the packet's bytes lie. Point them at the ring's last 100 bytes.
  uint64_t region = 0;
  std::memcpy(&region, reader().card().data(), sizeof region);
  const uint64_t past_the_end = Mailbox::kBulkBytes - 100;
  std::memcpy(reinterpret_cast<std::byte*>(region) + 8, &past_the_end, sizeof past_the_end);
  p = reader().peek();
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->bulk_at, past_the_end);
  EXPECT_FALSE(reader().valid(*p)) << "1000 bytes from 100 before the ring's end";
}

TEST_F(MailboxTest, ALengthNoWriterGivesIsRefused) {
  uint64_t region = 0;
  std::memcpy(&region, reader().card().data(), sizeof region);
  auto* first = reinterpret_cast<std::byte*>(region);  // the reader's first cell
  uint64_t tag = 0;

  // A packet of cells whose tag (bytes 56-63: sequence, length, offset) claims 1000 bytes,
  // more than cells carry.
  std::vector<std::byte> bytes(40, std::byte{7});
  writer().write(0, Gather{bytes.data(), bytes.size(), nullptr}, bytes.size());
  std::optional<Mailbox::Packet> p = reader().peek();
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->len, 40u);
  EXPECT_TRUE(reader().valid(*p));
  std::memcpy(&tag, first + 56, sizeof tag);
  tag = (tag & ~(uint64_t{0xffff} << 32)) | uint64_t{1000} << 32;
  std::memcpy(first + 56, &tag, sizeof tag);
  p = reader().peek();
  ASSERT_TRUE(p.has_value());
  EXPECT_FALSE(reader().valid(*p)) << "a 1000-byte packet of cells";

  // A bulk packet's cell (its length in bytes 0-7) that says 100 bytes, which go as cells.
  std::memcpy(&tag, first + 56, sizeof tag);
  tag |= uint64_t{0xffff} << 32;
  std::memcpy(first + 56, &tag, sizeof tag);
  const uint64_t small = 100;
  std::memcpy(first, &small, sizeof small);
  p = reader().peek();
  ASSERT_TRUE(p.has_value());
  EXPECT_FALSE(reader().valid(*p)) << "a 100-byte bulk packet";
}

TEST_F(MailboxTest, TakeWholeTakesOnlyAWholePacketAtTheOffsetAsked) {
  std::vector<std::byte> bytes(1240);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>(i * 7 + 1);
  // One cell, four cells, and a bulk packet, at stream offsets 0, 40 and 240.
  for (const auto& [at, len] : {std::pair<size_t, size_t>{0, 40}, {40, 200}, {240, 1000}}) {
    ASSERT_TRUE(writer().room(len));
    writer().write(at, Gather{bytes.data() + at, len, nullptr}, len);
  }
  std::byte scratch[Mailbox::kGatherBytes];
  size_t len = 0;
  EXPECT_EQ(reader().take_whole(1, 100, scratch, &len), nullptr) << "another offset";
  EXPECT_EQ(reader().take_whole(0, 39, scratch, &len), nullptr) << "more than the caller wants";
  std::optional<Mailbox::Packet> p = reader().peek();
  ASSERT_TRUE(p.has_value()) << "a refusal consumed the packet";
  EXPECT_EQ(p->len, 40u);

  const std::byte* data = reader().take_whole(0, 40, scratch, &len);
  ASSERT_NE(data, nullptr);
  ASSERT_EQ(len, 40u);
  EXPECT_TRUE(std::memcmp(data, bytes.data(), 40) == 0);

  EXPECT_EQ(reader().take_whole(40, 199, scratch, &len), nullptr);
  data = reader().take_whole(40, 200, scratch, &len);
  ASSERT_NE(data, nullptr) << "four cells, all landed";
  ASSERT_EQ(len, 200u);
  EXPECT_TRUE(std::memcmp(data, bytes.data() + 40, 200) == 0);

  EXPECT_EQ(reader().take_whole(240, 999, scratch, &len), nullptr) << "a bulk packet, cut";
  data = reader().take_whole(240, 5000, scratch, &len);
  ASSERT_NE(data, nullptr) << "a bulk packet";
  ASSERT_EQ(len, 1000u);
  EXPECT_TRUE(std::memcmp(data, bytes.data() + 240, 1000) == 0);
  EXPECT_EQ(reader().take_whole(1240, 100, scratch, &len), nullptr) << "nothing written";
}

}  // namespace
}  // namespace weft::transport::ucx

#endif  // WEFT_HAVE_UCX
