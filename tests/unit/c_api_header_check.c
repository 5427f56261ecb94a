/* Compiled as strict C99 (tests/CMakeLists.txt): weft.h must stand alone as a C header.
 * c_api_test calls weft_c_header_check() to run these calls from C. */
#include "weft/weft.h"

int weft_c_header_check(void);

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
  return 0;
}
