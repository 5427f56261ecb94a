// A C++ program built against an installed weft with CMake's find_package(weft)
// (scripts/test-install): it builds its communicator from MPI (weft/mpi.hpp) and checks
// allreduce and reduce_scatter exactly, in place.
#include <cstdio>
#include <vector>

#include <weft/mpi.hpp>  // includes <mpi.h>, without MPI's deprecated C++ bindings
#include <weft/weft.hpp>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  auto comm = weft::create_from_mpi(MPI_COMM_WORLD);
  if (!comm.ok()) {
    std::fprintf(stderr, "consumer_cxx: %s\n", comm.status().ToString().c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  weft::Communicator& c = **comm;
  const int rank = c.rank(), size = c.size();
  int failures = 0;

  // allreduce avg of doubles, in place: the sum of rank * 2 over ranks is size * (size - 1).
  std::vector<double> v(4099, rank * 2.0);
  if (auto s = c.allreduce(v.data(), v.data(), v.size(), weft::DataType::kFloat64,
                           {.op = weft::ReduceOp::kAvg});
      !s.ok()) {
    std::fprintf(stderr, "consumer_cxx: allreduce: %s\n", s.ToString().c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  for (double x : v) failures += x != size - 1.0;

  // reduce_scatter min of uint8, in place: block `rank` of the buffer gets the result.
  const size_t block = 13;
  std::vector<uint8_t> buf(block * size);
  for (size_t j = 0; j < buf.size(); ++j) buf[j] = static_cast<uint8_t>(j + rank);
  uint8_t* mine = buf.data() + rank * block;
  if (auto s = c.reduce_scatter(buf.data(), mine, block, weft::DataType::kUint8,
                                {.op = weft::ReduceOp::kMin});
      !s.ok()) {
    std::fprintf(stderr, "consumer_cxx: reduce_scatter: %s\n", s.ToString().c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  for (size_t i = 0; i < block; ++i) failures += mine[i] != static_cast<uint8_t>(rank * block + i);

  if (failures) std::fprintf(stderr, "consumer_cxx: rank %d: %d wrong elements\n", rank, failures);
  else std::printf("consumer_cxx: rank %d of %d: 2 collectives exact\n", rank, size);
  comm->reset();
  MPI_Finalize();
  return failures ? 1 : 0;
}
