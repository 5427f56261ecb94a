/* A C program built against an installed weft with pkg-config (scripts/test-install): it
 * joins the job mpirun started (weftCommInitFromEnv, WEFT_COORDINATOR) and checks four
 * collectives exactly, and that a bad argument leaves the communicator usable. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <weft/weft.h>

#define CHECK(call)                                                                     \
  do {                                                                                  \
    weftResult_t r_ = (call);                                                           \
    if (r_ != weftSuccess) {                                                            \
      fprintf(stderr, "consumer_c: %s failed: %s: %s\n", #call, weftGetErrorString(r_), \
              weftGetLastError(comm));                                                  \
      return 1;                                                                         \
    }                                                                                   \
  } while (0)

#define EXPECT(cond)                                                          \
  do {                                                                        \
    if (!(cond)) {                                                            \
      fprintf(stderr, "consumer_c: rank %d: expected %s\n", rank, #cond); \
      return 1;                                                               \
    }                                                                         \
  } while (0)

enum { kCount = 1001 }; /* not a multiple of any rank count the test runs */

int main(void) {
  weftComm_t comm = NULL;
  int rank = -1, size = 0, version = 0;
  CHECK(weftGetVersion(&version));
  EXPECT(version == WEFT_VERSION_CODE);
  CHECK(weftCommInitFromEnv(&comm));
  CHECK(weftCommUserRank(comm, &rank));
  CHECK(weftCommCount(comm, &size));

  /* allreduce, in place: sum over ranks of (rank + 1) * (i % 7 + 1). */
  int32_t* sum = malloc(kCount * sizeof(int32_t));
  for (int i = 0; i < kCount; ++i) sum[i] = (rank + 1) * (i % 7 + 1);
  CHECK(weftAllReduce(sum, sum, kCount, weftInt32, weftSum, comm, NULL));
  for (int i = 0; i < kCount; ++i) EXPECT(sum[i] == size * (size + 1) / 2 * (i % 7 + 1));

  /* allgather of floats: block r holds r + i / 4. */
  float* mine = malloc(kCount * sizeof(float));
  float* all = malloc((size_t)size * kCount * sizeof(float));
  for (int i = 0; i < kCount; ++i) mine[i] = (float)rank + (float)i / 4.0f;
  CHECK(weftAllGather(mine, all, kCount, weftFloat32, comm, NULL));
  for (int r = 0; r < size; ++r) {
    for (int i = 0; i < kCount; ++i) EXPECT(all[(size_t)r * kCount + i] == (float)r + (float)i / 4.0f);
  }

  /* reduce_scatter max of int64: element j of the full vector is j * 3 + rank. */
  int64_t* full = malloc((size_t)size * kCount * sizeof(int64_t));
  int64_t* part = malloc(kCount * sizeof(int64_t));
  for (size_t j = 0; j < (size_t)size * kCount; ++j) full[j] = (int64_t)j * 3 + rank;
  CHECK(weftReduceScatter(full, part, kCount, weftInt64, weftMax, comm, NULL));
  for (int i = 0; i < kCount; ++i) EXPECT(part[i] == ((int64_t)rank * kCount + i) * 3 + size - 1);

  /* broadcast from the last rank. */
  double value[3] = {rank, rank, rank};
  CHECK(weftBroadcast(value, value, 3, weftFloat64, size - 1, comm, NULL));
  EXPECT(value[0] == size - 1 && value[2] == size - 1);

  /* A bad argument is refused on this rank alone and the communicator stays usable. */
  EXPECT(weftAllReduce(NULL, sum, kCount, weftInt32, weftSum, comm, NULL) == weftInvalidArgument);
  CHECK(weftBarrier(comm, NULL));

  CHECK(weftCommDestroy(comm));
  printf("consumer_c: rank %d of %d: 4 collectives exact, weft %d.%d.%d\n", rank, size,
         version / 10000, version / 100 % 100, version % 100);
  free(sum), free(mine), free(all), free(full), free(part);
  return 0;
}
