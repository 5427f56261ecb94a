// ucx addressing: a rank publishes its UCP worker's address (binary, as UCX makes it) under
// the name "ucx", and peers create endpoints to it when a link first opens.
//
// Every message of a link carries the link's tag in its high 32 bits, made from the job
// secret, the job and the two ranks: a stranger that reaches the worker cannot forge it, so
// its messages match no receive and never reach a collective; and one rank's links, sharing
// one worker, never match each other's messages. The low 32 bits carry the stream offset of
// the message's first byte, so that the receiver can put the link's tagged messages and its
// mailbox packets (mailbox.hpp) in one order; UCX delivers the messages of one link in the
// order they were sent. One offset is kept for a notice: a zero-length message there says the
// sender closed its end (no message of the stream has zero length).
#pragma once

#include <cstdint>

#include "src/base/job_secret.hpp"

namespace weft::transport::ucx {

/// The bits of a tag that carry a message's stream offset.
inline constexpr uint64_t kTagOffsetBits = 0xffffffff;

/// The offset of the closing notice. A stream message may start there too (once every 4 GiB),
/// and then hides a notice sent after it from a probe until it is received.
inline constexpr uint64_t kClosedOffset = kTagOffsetBits;

/// The tag of every message rank `from` sends rank `to` in job `job_id`, with its offset bits
/// zero.
uint64_t link_tag(const JobSecret& secret, uint64_t job_id, int from, int to);

}  // namespace weft::transport::ucx
