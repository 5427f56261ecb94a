# Finds weft's dependencies. Required: Abseil, threads. Optional (WEFT_WITH_*): MPI, CUDA,
# UCX, libibverbs; each sets WEFT_HAVE_<NAME> when it will be built in.

find_package(Threads REQUIRED)
find_package(absl REQUIRED)
# HMAC-SHA256 for proving the job secret on every connection (src/base/job_secret.hpp).
find_package(OpenSSL REQUIRED COMPONENTS Crypto)

function(weft_optional name found)
  if(WEFT_WITH_${name} STREQUAL "ON" AND NOT ${found})
    message(FATAL_ERROR "WEFT_WITH_${name}=ON but ${name} was not found; run scripts/setup")
  endif()
  if(NOT WEFT_WITH_${name} STREQUAL "OFF" AND ${found})
    set(WEFT_HAVE_${name} ON PARENT_SCOPE)
  else()
    set(WEFT_HAVE_${name} OFF PARENT_SCOPE)
  endif()
endfunction()

if(NOT WEFT_WITH_MPI STREQUAL "OFF")
  find_package(MPI COMPONENTS C QUIET)
endif()
weft_optional(MPI MPI_C_FOUND)

if(NOT WEFT_WITH_CUDA STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
endif()
weft_optional(CUDA CUDAToolkit_FOUND)

if(NOT WEFT_WITH_UCX STREQUAL "OFF")
  find_package(ucx QUIET)
endif()
weft_optional(UCX ucx_FOUND)

if(NOT WEFT_WITH_VERBS STREQUAL "OFF")
  find_library(IBVERBS_LIBRARY ibverbs)
  find_path(IBVERBS_INCLUDE_DIR infiniband/verbs.h)
endif()
set(WEFT_VERBS_FOUND OFF)
if(IBVERBS_LIBRARY AND IBVERBS_INCLUDE_DIR)
  set(WEFT_VERBS_FOUND ON)
endif()
weft_optional(VERBS WEFT_VERBS_FOUND)

message(STATUS "weft: MPI=${WEFT_HAVE_MPI} CUDA=${WEFT_HAVE_CUDA} UCX=${WEFT_HAVE_UCX} VERBS=${WEFT_HAVE_VERBS}")
