/* weft's C API, in the shape of NCCL's (ncclCommInitRank, ncclAllReduce, ...), over the C++
 * API of weft/weft.hpp. It compiles as C99 and as C++.
 *
 * Every function returns a weftResult_t; weftGetLastError() gives the message of the last
 * failure, which names the rank, the peer and what to do. Buffers are host or device
 * memory. A call on device buffers is ordered on `stream` (a cudaStream_t; NULL: the default
 * stream) as NCCL's are: it returns at once, runs once the work queued on the stream before it
 * has, and the stream's later work waits for its results. Between ranks of one host its data
 * goes GPU to GPU (cuda_ipc, WEFT_CUDA_IPC; the first such call returns once every rank has
 * made it, as it sets that up); otherwise it crosses a host path through pinned buffers (the
 * host fallback). A failure after the call returned breaks the comm:
 * weftCommGetAsyncError reports it, and the stream still goes on, past results that are then
 * not to be used. A call on host buffers first waits until the comm's calls queued on streams
 * have run, then runs on the calling thread. Where this process can use no GPU, a non-NULL stream is
 * weftInvalidArgument with the reason (no CUDA in this build, no driver, no GPU). With host
 * buffers and a NULL stream no CUDA is involved. The timeout of every
 * wait is WEFT_TIMEOUT seconds; the C API has no per-call timeout.
 *
 * As with NCCL, one thread drives a communicator at a time, and every rank must call the same
 * collectives in the same order with matching arguments.
 *
 * What the results are:
 * - Integer sum and prod wrap around (modulo 2^bits, for signed types too, with no undefined
 *   behaviour). Integer avg is that wrapped sum, read in its own type, divided by the rank
 *   count, rounding toward zero (-7 / 2 = -3). Float avg divides the sum once at the end;
 *   half and bfloat16 sums round to their type at every addition.
 * - max and min propagate NaN.
 * - Buffers are host or device memory. sendbuff and recvbuff may be the same buffer (in
 *   place, at the offsets each call states) but must not otherwise overlap: weft does not
 *   check for partial overlap, and its results are then undefined.
 * - In-place reduce-scatter leaves the other ranks' blocks of the buffer as they were;
 *   in-place allgather writes every block of recvbuff but this rank's own, which it leaves
 *   in place. sendbuff is never written by an out-of-place call.
 *
 * What an error leaves:
 * - A bad argument found on this rank (weftInvalidArgument: a NULL buffer, an unknown type,
 *   op or algorithm, a root out of range, a count that overflows) refuses the call before
 *   anything is sent: the communicator stays usable. The other ranks, which did make the
 *   call, wait for this rank until their timeout.
 * - A collective that fails (a peer stopped, a link failed, a timeout, ranks that disagree on
 *   the call: the last is weftInvalidArgument on every rank, naming both calls) breaks the
 *   communicator: every later call returns weftInvalidUsage. Destroy it and create a new one,
 *   or shrink it to the ranks that remain (weftCommShrink). */
#ifndef WEFT_WEFT_H_
#define WEFT_WEFT_H_

#include <stddef.h>

#include "weft/export.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WEFT_MAJOR 0
#define WEFT_MINOR 1
#define WEFT_PATCH 0
/** The version as weftGetVersion() reports it: major * 10000 + minor * 100 + patch. */
#define WEFT_VERSION(X, Y, Z) ((X) * 10000 + (Y) * 100 + (Z))
#define WEFT_VERSION_CODE WEFT_VERSION(WEFT_MAJOR, WEFT_MINOR, WEFT_PATCH)

/** A communicator: a group of ranks that run collectives together. Opaque. */
typedef struct weftComm* weftComm_t;

/** Lets ranks find each other: the rendezvous address and a job id. One process creates it
 *  with weftGetUniqueId and hands the same bytes to every rank (MPI_Bcast, a file, ...). */
typedef struct {
  char internal[128];
} weftUniqueId;

typedef enum {
  /** The call did what it says. */
  weftSuccess = 0,
  /** A device (CUDA) call failed. Reserved: host-memory weft does not return it yet. */
  weftUnhandledError,
  /** The system refused a resource (out of memory, /dev/shm full) or access (a peer that
   *  cannot prove the job secret, a socket of another user). */
  weftSystemError,
  /** A bug in weft, or a failure it has no better code for; the message says which. */
  weftInternalError,
  /** A bad argument on this rank: a null pointer, an unknown type or op, a root that is not
   *  a rank, a count that overflows, a stream where no GPU can be used, a bad WEFT_* variable
   *  (one that names no network interface, too). */
  weftInvalidArgument,
  /** The communicator cannot be used: NULL, not initialised, destroyed, or failed earlier. */
  weftInvalidUsage,
  /** A peer went away, a link failed, or a peer's bytes arrived out of step or corrupted. */
  weftRemoteError,
  /** The operation has not completed. Reserved: no weft call returns it (a call on a stream
   *  that has not run yet returned weftSuccess; failures after that show through
   *  weftCommGetAsyncError). */
  weftInProgress,
  /** A wait ran past WEFT_TIMEOUT: a peer stopped calling or a link stalled. */
  weftTimeout,
} weftResult_t;

/** Element types; the values are those of weft::DataType. */
typedef enum {
  weftInt8 = 0,
  weftChar = 0,
  weftUint8 = 1,
  weftInt32 = 2,
  weftInt = 2,
  weftUint32 = 3,
  weftInt64 = 4,
  weftUint64 = 5,
  weftFloat16 = 6,
  weftHalf = 6,
  weftFloat32 = 7,
  weftFloat = 7,
  weftFloat64 = 8,
  weftDouble = 8,
  weftBfloat16 = 9,
} weftDataType_t;

/** Reduction operators; the values are those of weft::ReduceOp. weftAvg is the sum divided
 *  by the rank count (integer division for integer types). */
typedef enum {
  weftSum = 0,
  weftProd = 1,
  weftMax = 2,
  weftMin = 3,
  weftAvg = 4,
} weftRedOp_t;

/** Stores WEFT_VERSION_CODE of the library (not of this header) in *version. */
WEFT_API weftResult_t weftGetVersion(int* version);

/** Creates an id and serves its rendezvous from this process until every rank has arrived
 *  or WEFT_TIMEOUT has passed. Listens on WEFT_SOCKET_IFNAME (default: the first
 *  non-loopback interface that is up). */
WEFT_API weftResult_t weftGetUniqueId(weftUniqueId* uniqueId);

/** Joins the job named by `commId` as `rank` of `nranks`; returns once every rank has
 *  joined. On failure *comm is set to NULL. */
WEFT_API weftResult_t weftCommInitRank(weftComm_t* comm, int nranks, weftUniqueId commId, int rank);

/** Joins the job the launcher describes (mpirun, Slurm, or WEFT_RANK / WEFT_SIZE), meeting
 *  the other ranks at WEFT_COORDINATOR=host:port (rank 0 serves it). On failure *comm is set
 *  to NULL. */
WEFT_API weftResult_t weftCommInitFromEnv(weftComm_t* comm);

/** Frees the communicator and closes its links, after sending what they still owe their
 *  peers (at most 10 seconds; none after a failure). NULL is allowed and does nothing. */
WEFT_API weftResult_t weftCommDestroy(weftComm_t comm);

/** Like ncclCommAbort: callable from any thread; the collective in progress on `comm` (if
 *  any) returns within a wait step, and every later call fails. Destroy the comm after. */
WEFT_API weftResult_t weftCommAbort(weftComm_t comm);

/** Link health (docs/HEALTH.md): the state of a link, rail, GPU, NVLink or InfiniBand port. */
typedef enum {
  weftHealthy = 0,
  weftSuspect = 1, /**< a counter passed its SUSPECT threshold: the link works, but wears */
  weftFailing = 2, /**< a counter passed its FAILING threshold: expect errors or slowness */
  weftIsolated = 3, /**< taken out of use: every rank routes around it until its quiet time ends */
  weftProbation = 4, /**< back in use after isolation, watched: failing again isolates it again */
} weftHealthState_t;

#define WEFT_HEALTH_MAX_COUNTERS 16

/** One scope the health monitor watches, with its state and (up to 16 of) its counters.
 *  Strings are NUL-terminated and cut to fit. */
typedef struct {
  char kind[16];    /**< "link", "rail", "gpu", "nvlink", "ib_port" */
  char name[96];    /**< "rail 1 (weft-r1) to rank 3" */
  int peer;         /**< link, rail: the rank at the other end; nvlink: the rank it reaches */
  int rail;         /**< rail: its number; ib_port: the rail it carries; else -1 */
  int gpu;          /**< gpu, nvlink: the GPU's NVML index; else -1 */
  int link;         /**< nvlink: its number; ib_port: the port number; else -1 */
  char device[64];  /**< rail: interface; gpu: PCI bus id; nvlink: far end's; ib_port: HCA */
  weftHealthState_t state;
  char reason[160]; /**< why it is not healthy: counter, measure, threshold, window */
  int counterCount;
  struct {
    char name[48];
    double value; /**< as last read */
    double rate;  /**< per second over the policy's window (cumulative counters) */
  } counters[WEFT_HEALTH_MAX_COUNTERS];
} weftLinkHealth_t;

/** Thread-safe snapshot of every scope's health: fills up to `capacity` entries of `health`
 *  (NULL with capacity 0 to ask for the count) and sets *count to how many scopes there are.
 *  *count is 0 with WEFT_HEALTH=off. */
WEFT_API weftResult_t weftCommHealth(weftComm_t comm, weftLinkHealth_t* health, int capacity, int* count);

/** One state change, as the JSON log line has it. */
typedef struct {
  double time;               /**< seconds since the Unix epoch */
  weftLinkHealth_t scope;    /**< the scope, its new state and reason (counters left empty) */
  weftHealthState_t from;
  weftHealthState_t to;
  char counter[48];          /**< the counter whose rule decided */
  double value, measured, threshold, windowSeconds;
} weftHealthChange_t;

/** Thread-safe poll: *got is 1 and *change the oldest change not yet taken, or *got is 0. */
WEFT_API weftResult_t weftCommHealthPoll(weftComm_t comm, weftHealthChange_t* change, int* got);

/** Like ncclCommGetAsyncError: callable from any thread; *asyncError is weftSuccess while the
 *  comm works, else the error that broke it (its message: weftGetLastError(comm)), including
 *  one that a call met after it returned (a call queued on a stream, src/engine.hpp). */
WEFT_API weftResult_t weftCommGetAsyncError(weftComm_t comm, weftResult_t* asyncError);

/** After a rank died or hung, every surviving rank calls this and gets in *newcomm a
 *  communicator of the survivors, in their old order (like ncclCommShrink, but weft finds the
 *  lost ranks itself; see Communicator::shrink). When droppedRanks is not NULL it must have
 *  room for the comm's rank count; it gets the old ranks left out, and *droppedCount (which
 *  may then not be NULL) their number. `comm` refuses collectives afterwards: destroy it.
 *  On failure *newcomm is set to NULL. */
WEFT_API weftResult_t weftCommShrink(weftComm_t comm, weftComm_t* newcomm, int* droppedRanks,
                            int* droppedCount);

/** The number of ranks, and this rank, of the communicator. */
WEFT_API weftResult_t weftCommCount(const weftComm_t comm, int* count);
WEFT_API weftResult_t weftCommUserRank(const weftComm_t comm, int* rank);

/** recvbuff[i] = op over ranks of sendbuff[i], for i < count. In-place when
 *  sendbuff == recvbuff. */
WEFT_API weftResult_t weftAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           weftDataType_t datatype, weftRedOp_t op, weftComm_t comm,
                           void* stream);

/** recvbuff[r * sendcount + i] = sendbuff[i] of rank r. In-place when
 *  sendbuff == recvbuff + rank * sendcount. */
WEFT_API weftResult_t weftAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           weftDataType_t datatype, weftComm_t comm, void* stream);

/** recvbuff[i] = op over ranks of sendbuff[rank * recvcount + i]. In-place when
 *  recvbuff == sendbuff + rank * recvcount. */
WEFT_API weftResult_t weftReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               weftDataType_t datatype, weftRedOp_t op, weftComm_t comm,
                               void* stream);

/** recvbuff[i] = sendbuff[i] of `root`; sendbuff is read on the root only. In-place when
 *  sendbuff == recvbuff. */
WEFT_API weftResult_t weftBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           weftDataType_t datatype, int root, weftComm_t comm, void* stream);

/** Returns once every rank has entered the barrier. */
WEFT_API weftResult_t weftBarrier(weftComm_t comm, void* stream);

/** A short, static description of a result code ("invalid argument", ...). */
WEFT_API const char* weftGetErrorString(weftResult_t result);

/** The message of the last call that failed on `comm` ("" if none has). With a NULL (or
 *  unrecognised) comm: the last failure on this thread of a call that had no communicator to
 *  record it in, such as weftCommInitRank or weftGetUniqueId. Callable from any thread: the
 *  string is this thread's copy and stays valid until its next weftGetLastError call. */
WEFT_API const char* weftGetLastError(weftComm_t comm);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* WEFT_WEFT_H_ */
