// transport/cuda_ipc/ where there is no GPU: the stand-in copier's windows (memfds) stand in
// for device memory. A rank's address survives the wire, a malformed one is refused, and
// connecting maps every rank's window so that one rank's writes are the others' reads; a
// window that cannot be mapped is an error that names its rank; released windows are
// unmapped at once, the peers' mappings staying.
#include <algorithm>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "src/device/copier.hpp"
#include "src/device/shared_fd.hpp"
#include "transport/cuda_ipc/context.hpp"

namespace weft::transport::cuda_ipc {
namespace {

using ::testing::HasSubstr;

TEST(CudaIpcAddress, RoundTripsAndRefusesWhatNoRankWrote) {
  std::byte record[Address::kBytes];
  ASSERT_TRUE((Address{"1234:7", ""}).encode(record).ok());
  auto back = Address::decode(record);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->handle, "1234:7");
  ASSERT_TRUE((Address{"", "no GPU"}).encode(record).ok());
  back = Address::decode(record);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->handle, "");
  EXPECT_EQ(back->why_not, "no GPU");
  EXPECT_FALSE((Address{std::string(Address::kBytes, 'x'), ""}).encode(record).ok());
  record[0] = std::byte{7};
  EXPECT_FALSE(Address::decode(record).ok());
  record[0] = std::byte{1}, record[1] = std::byte{0}, record[2] = std::byte{0};  // empty handle
  EXPECT_FALSE(Address::decode(record).ok());
}

// `n` ranks as threads of this process, each with a stand-in copier and a context whose
// window has `slot`-byte slots, and what each publishes.
struct Ranks {
  Ranks(int n, size_t slot) {
    for (int r = 0; r < n; ++r) {
      copiers.push_back(device::stand_in_copier());
      contexts.push_back(std::make_unique<Context>(*copiers[r], r, n, slot));
      addresses.push_back(contexts[r]->address());
    }
  }
  std::vector<std::unique_ptr<device::Copier>> copiers;
  std::vector<std::unique_ptr<Context>> contexts;
  std::vector<Address> addresses;
};

TEST(CudaIpcContext, EveryRankMapsEveryWindow) {
  device::FdPost post;  // the ranks are threads of this process: one post serves them all
  constexpr int n = 3;
  constexpr size_t slot = 4096;
  Ranks ranks(n, slot);
  auto& [copiers, contexts, addresses] = ranks;
  for (int r = 0; r < n; ++r) {
    ASSERT_FALSE(contexts[r]->address().handle.empty()) << contexts[r]->address().why_not;
  }
  for (int r = 0; r < n; ++r) ASSERT_TRUE(contexts[r]->connect(addresses).ok());
  // Rank r writes piece 5 (slot 1) of its own window; every rank reads it through its mapping.
  for (int r = 0; r < n; ++r) std::memset(contexts[r]->pair(r).slot(5), 'a' + r, slot);
  for (int reader = 0; reader < n; ++reader) {
    for (int r = 0; r < n; ++r) {
      const std::byte* seen = contexts[reader]->pair(r).slot(5);
      EXPECT_EQ(seen[0], std::byte('a' + r)) << "rank " << reader << " reading rank " << r;
      EXPECT_EQ(seen[slot - 1], std::byte('a' + r));
      EXPECT_NE(contexts[reader]->pair(r).slot(4), seen) << "two slots";
    }
  }
  // A window outlives its owner in the ranks that mapped it.
  const std::byte* kept = contexts[0]->pair(2).slot(5);
  contexts[2].reset();
  copiers[2].reset();
  EXPECT_EQ(kept[0], std::byte('c'));
}

TEST(CudaIpcContext, AWindowThatCannotBeMappedNamesItsRank) {
  device::FdPost post;
  auto copier = device::stand_in_copier();
  Context mine(*copier, 0, 3, 4096);
  std::vector<Address> addresses = {mine.address(), Address{"999999999:3", ""},
                                    Address{"", "rank 2 has no GPU"}};
  absl::Status s = mine.connect(addresses);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("rank 1"));
  addresses[1] = mine.address();  // any window will do for rank 1
  s = mine.connect(addresses);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("rank 2 has no GPU"));
}

// A rank whose call failed must not write its window any more (a peer whose call passed may
// still read it): once kStop is set, the copies into the window are skipped.
TEST(CudaIpcContext, ACopyIntoTheWindowIsSkippedOnceStopped) {
  auto copier = device::stand_in_copier();
  Context mine(*copier, 0, 1, 4096);
  ASSERT_TRUE(mine.connect({mine.address()}).ok());
  std::byte* slot = mine.pair(0).slot(1);
  std::vector<std::byte> rows(2 * 64, std::byte{7});
  device::StandInStream stream;
  ASSERT_TRUE(copier->copy_unless_stopped_on(&stream, slot, 32, rows.data(), 64, 32, 2).ok());
  stream.synchronize();
  EXPECT_EQ(slot[0], std::byte{7});
  EXPECT_EQ(slot[63], std::byte{7});
  EXPECT_EQ(slot[64], std::byte{0}) << "two rows of 32 bytes, no more";
  copier->write(device::Word::kStop, 1);
  std::fill(rows.begin(), rows.end(), std::byte{9});
  ASSERT_TRUE(copier->copy_unless_stopped_on(&stream, slot, 32, rows.data(), 64, 32, 2).ok());
  stream.synchronize();
  EXPECT_EQ(slot[0], std::byte{7}) << "copied after the stop";
}

// The stand-in's windows as this process maps them (memfds named weft-window).
int windows_mapped() {
  std::ifstream maps("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);) n += line.find("weft-window") != std::string::npos;
  return n;
}

// Ranks that agreed not to use cuda_ipc (one could not map a window) give the device memory
// back then, not when the communicator goes.
TEST(CudaIpcContext, ReleasedWindowsAreUnmappedAndThePeersKeepTheirs) {
  device::FdPost post;
  constexpr int n = 3;
  constexpr size_t slot = 4096;
  const int before = windows_mapped();
  Ranks ranks(n, slot);
  auto& [copiers, contexts, addresses] = ranks;
  for (int r = 0; r < n; ++r) ASSERT_TRUE(contexts[r]->connect(addresses).ok());
  ASSERT_EQ(windows_mapped() - before, n * n) << "each rank maps its own window and its peers'";
  std::memset(contexts[0]->pair(0).slot(0), 'z', slot);
  contexts[0]->release();
  EXPECT_EQ(windows_mapped() - before, n * n - n);
  EXPECT_EQ(contexts[1]->pair(0).slot(0)[0], std::byte{'z'}) << "rank 0's window, as rank 1 maps it";
  contexts[0]->release();  // nothing left to give back
  for (int r = 1; r < n; ++r) contexts[r]->release();
  EXPECT_EQ(windows_mapped(), before);
}

}  // namespace
}  // namespace weft::transport::cuda_ipc
