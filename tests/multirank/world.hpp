#pragma once

#include "weft/weft.hpp"

namespace weft::testing {
/// The communicator over every rank of the job, built once by mpi_main.cc.
extern Communicator* g_world;
}  // namespace weft::testing
