// ucx addressing: a rank publishes its UCP worker's address (binary, as UCX makes it) under
// the name "ucx", and peers create endpoints to it when a link first opens.
//
// Every message of a link carries one tag, made from the job secret, the job and the two
// ranks: a stranger that reaches the worker cannot forge it, so its messages match no
// receive and never reach a collective; and one rank's links, sharing one worker, never
// match each other's messages. UCX delivers the messages of one tag from one endpoint in
// the order they were sent, which makes a link's messages one ordered byte stream.
#pragma once

#include <cstdint>

#include "src/base/job_secret.hpp"

namespace weft::transport::ucx {

/// The tag of every message rank `from` sends rank `to` in job `job_id`.
uint64_t link_tag(const JobSecret& secret, uint64_t job_id, int from, int to);

}  // namespace weft::transport::ucx
