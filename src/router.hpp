// The router turns the link graph into schedules. Today: one ring that keeps each host's
// ranks together, so a ring crosses the network once per host. The health monitor will have
// it route around isolated links by handing out a new ring for a later epoch.
#pragma once

#include "collectives/collective.hpp"
#include "src/topology.hpp"

namespace weft {

Schedule make_schedule(const Topology& topology);

}  // namespace weft
