/* Compiled as strict C99 (tests/CMakeLists.txt): weft.h must stand alone as a C header.
 * c_api_test runs these from C, where an enum argument may hold any int (in C++ a value
 * outside the enumerators is undefined, so the test cannot make one there). */
#include "weft/weft.h"

int weft_c_header_check(void);
weftResult_t weft_c_call_raw(weftComm_t comm, int which, int type, int op, float* out);

int weft_c_header_check(void) {
  int version = 0;
  int count = -1;
  weftComm_t comm = NULL;
  weftUniqueId id;
  const weftDataType_t type = weftFloat;
  const weftRedOp_t op = weftSum;
  const char* message;
  if (sizeof(id.internal) != 128) return 1;
  if (weftGetVersion(&version) != weftSuccess || version != WEFT_VERSION_CODE) return 2;
  if (weftCommCount(comm, &count) != weftInvalidUsage || count != -1) return 3;
  if (weftAllReduce(NULL, NULL, 0, type, op, comm, NULL) != weftInvalidUsage) return 4;
  message = weftGetLastError(NULL);
  if (message == NULL || message[0] == '\0') return 5;
  if (weftCommDestroy(NULL) != weftSuccess) return 6;
  if (weftGetErrorString(weftTimeout) == NULL) return 7;
  message = weftGetErrorString((weftResult_t)99);
  if (message == NULL || message[0] != 'u') return 8; /* "unknown weftResult_t" */
  return 0;
}

/* One collective on a float (0 allreduce, 1 allgather, 2 reduce_scatter, 3 broadcast) with
 * the type and op given as plain ints; *out is the receive buffer, left alone on refusal. */
weftResult_t weft_c_call_raw(weftComm_t comm, int which, int type, int op, float* out) {
  const float x = 1.0f;
  const weftDataType_t t = (weftDataType_t)type;
  const weftRedOp_t o = (weftRedOp_t)op;
  switch (which) {
    case 0: return weftAllReduce(&x, out, 1, t, o, comm, NULL);
    case 1: return weftAllGather(&x, out, 1, t, comm, NULL);
    case 2: return weftReduceScatter(&x, out, 1, t, o, comm, NULL);
    default: return weftBroadcast(&x, out, 1, t, 0, comm, NULL);
  }
}
