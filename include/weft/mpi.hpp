// Building a weft communicator from an MPI communicator. Header-only, so libweft itself
// does not depend on MPI: the caller already links it.
#pragma once

// weft uses MPI's C API only; skip the deprecated C++ bindings and their link dependency.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "weft/weft.hpp"

namespace weft {

/// Collective over `comm`: its rank 0 creates a UniqueId and broadcasts it, then every rank
/// joins with its MPI rank. Every rank gets the same status when the id cannot be made.
inline absl::StatusOr<std::unique_ptr<Communicator>> create_from_mpi(MPI_Comm comm) {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  UniqueId id;
  int ok = 1;
  absl::Status made;
  if (rank == 0) {
    auto fresh = make_unique_id();
    if (fresh.ok()) {
      id = *fresh;
    } else {
      made = fresh.status();
      ok = 0;
    }
  }
  MPI_Bcast(&ok, 1, MPI_INT, 0, comm);
  if (!ok) {
    return rank == 0 ? made
                     : absl::UnavailableError("rank 0 could not create a weft unique id; see its log");
  }
  MPI_Bcast(id.bytes.data(), static_cast<int>(id.bytes.size()), MPI_BYTE, 0, comm);
  return Communicator::create(id, rank, size);
}

}  // namespace weft
