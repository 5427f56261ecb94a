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
if(WEFT_HAVE_CUDA)
  # Machine code for sm_80 (A100), sm_90 (H100, H200) and sm_100 (B200), and sm_100's PTX so
  # that later GPUs can compile it when they load it.
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 80-real 90-real 100)
  endif()
  set(WEFT_CUDA_ARCHITECTURE_NAMES "")
  foreach(arch IN LISTS CMAKE_CUDA_ARCHITECTURES)
    string(REGEX REPLACE "-real$" "" number "${arch}")
    set(name "sm_${number}")
    if(NOT arch MATCHES "-real$")
      set(name "${name} (+PTX)")
    endif()
    list(APPEND WEFT_CUDA_ARCHITECTURE_NAMES "${name}")
  endforeach()
  list(JOIN WEFT_CUDA_ARCHITECTURE_NAMES ", " WEFT_CUDA_ARCHITECTURE_NAMES)
  # NCCL's header, for `weft bench --compare nccl`, which loads the library only when asked.
  # The toolkit carries it on these machines; elsewhere PyTorch's NCCL wheel may.
  execute_process(
    COMMAND python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'include'))"
    OUTPUT_VARIABLE weft_pip_nccl OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  find_path(WEFT_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${weft_pip_nccl})
  set(CMAKE_CUDA_COMPILER ${CUDAToolkit_NVCC_EXECUTABLE})
  enable_language(CUDA)
  # CMake 3.25 knows nvcc's standards up to C++17; nvcc 13 takes C++20, as the rest of weft.
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_COMPILE_FEATURES cuda_std_20)
  list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
  set(CMAKE_CUDA_STANDARD 20)
  # Packages that name /usr/include (Abseil's, OpenSSL's) must not put it on nvcc's line as
  # -isystem: that breaks libstdc++'s #include_next <math.h>.
  list(APPEND CMAKE_CUDA_IMPLICIT_INCLUDE_DIRECTORIES /usr/include)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
endif()

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
