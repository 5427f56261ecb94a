// One tcp path for tests of a link's halves (inbound.hpp, outbound.hpp) against frames read
// and written by hand: a data and a control socket, and the test's ends of them.
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "transport/tcp/frame.hpp"
#include "transport/tcp/path.hpp"

namespace weft::transport::tcp {

/// One path: a link half's data and control sockets, and the test's ends of them.
struct TestPath {
  std::unique_ptr<Path> data, control;
  int data_peer = -1, control_peer = -1;

  explicit TestPath(int index) {
    int d[2], c[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, d), 0);
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, c), 0);
    data = std::make_unique<Path>(d[0], "path " + std::to_string(index));
    control = std::make_unique<Path>(c[0], "path " + std::to_string(index));
    data->pair_with(control.get());
    data_peer = d[1], control_peer = c[1];
  }
  ~TestPath() {
    ::close(data_peer);
    ::close(control_peer);
  }

  /// A data frame of `len` bytes at `offset`, byte k of the stream being k % 251.
  void send(uint32_t epoch, uint64_t offset, uint32_t len, uint8_t next_path,
            uint64_t ack = 0, bool lent = false, bool checksummed = false) const {
    Frame f;
    f.type = Frame::kData;
    f.lent = lent;
    f.checksummed = checksummed;
    f.epoch = epoch, f.offset = offset, f.length = len, f.next_path = next_path, f.ack = ack;
    std::vector<std::byte> wire(kFrameHeaderBytes + len);
    for (uint32_t k = 0; k < len; ++k) {
      wire[kFrameHeaderBytes + k] = std::byte{static_cast<uint8_t>((offset + k) % 251)};
    }
    if (checksummed) f.payload_crc = crc32c(wire.data() + kFrameHeaderBytes, len);
    encode_frame(f, wire.data());
    ASSERT_EQ(::write(data_peer, wire.data(), wire.size()), static_cast<ssize_t>(wire.size()));
  }

  /// The next frame header a link half wrote on `fd` (the test's end of a control socket);
  /// nullopt when none is there.
  static std::optional<Frame> read_frame(int fd) {
    std::byte header[kFrameHeaderBytes];
    if (::read(fd, header, sizeof header) != static_cast<ssize_t>(sizeof header)) return std::nullopt;
    auto f = decode_frame(header);
    EXPECT_TRUE(f.ok()) << f.status();
    if (!f.ok()) return std::nullopt;
    return *f;
  }

  /// Appends what the link half has written on the data socket so far to `stream`.
  void drain(std::vector<std::byte>& stream) const {
    std::byte buf[64 << 10];
    for (ssize_t n; (n = ::read(data_peer, buf, sizeof buf)) > 0;) {
      stream.insert(stream.end(), buf, buf + n);
    }
  }

  /// The whole frames at the start of `stream`, each with its payload.
  static std::vector<std::pair<Frame, std::vector<std::byte>>> frames(
      const std::vector<std::byte>& stream) {
    std::vector<std::pair<Frame, std::vector<std::byte>>> out;
    for (size_t at = 0; at + kFrameHeaderBytes <= stream.size();) {
      auto f = decode_frame(stream.data() + at);
      EXPECT_TRUE(f.ok()) << f.status();
      if (!f.ok() || at + kFrameHeaderBytes + f->length > stream.size()) break;
      at += kFrameHeaderBytes;
      out.emplace_back(*f, std::vector<std::byte>(stream.begin() + at, stream.begin() + at + f->length));
      at += f->length;
    }
    return out;
  }
};

}  // namespace weft::transport::tcp
