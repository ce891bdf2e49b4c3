# Finds every external dependency once and exposes it as an imported target. Optional ones switch
# their MOE_WITH_* option off with a message when they are missing, so the CPU tree always builds.

find_package(Threads REQUIRED)

# A real BLAS on the CPU, loaded at run time (kernels/cpu/blas_library.h): OpenBLAS from
# Debian's libopenblas0 by default, or the CBLAS library $MOMOE_BLAS names. Nothing links it, so
# that momoe chooses OpenBLAS's kernel from the CPU's features before the library's constructor
# (which would pick it from a table of CPU models) runs.
add_library(moe_blas INTERFACE)
target_link_libraries(moe_blas INTERFACE ${CMAKE_DL_LIBS})

find_package(Protobuf REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(ZLIB REQUIRED)  # gzip corpora and CRC32 checksums (core/data)

if(MOE_WITH_CUDA)
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED)
endif()

if(MOE_WITH_MPI)
  find_package(MPI COMPONENTS CXX)
  if(NOT MPI_CXX_FOUND)
    message(WARNING "MPI not found: the MPI backend is switched off")
    set(MOE_WITH_MPI OFF)
  endif()
endif()

if(MOE_WITH_NCCL AND NOT MOE_WITH_CUDA)
  set(MOE_WITH_NCCL OFF)
endif()
if(MOE_WITH_NCCL)
  find_path(MOE_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} PATHS /usr/include)
  find_library(MOE_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} PATHS /usr/lib/x86_64-linux-gnu /usr/lib)
  if(MOE_NCCL_INCLUDE_DIR AND MOE_NCCL_LIBRARY)
    add_library(moe_nccl INTERFACE)
    target_include_directories(moe_nccl SYSTEM INTERFACE ${MOE_NCCL_INCLUDE_DIR})
    target_link_libraries(moe_nccl INTERFACE ${MOE_NCCL_LIBRARY})
  else()
    message(WARNING "NCCL not found: the NCCL backend is switched off")
    set(MOE_WITH_NCCL OFF)
  endif()
endif()

if(MOE_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(MOE_BUILD_BENCHMARKS)
  find_package(benchmark REQUIRED)
endif()

# Warning flags shared by every target of ours.
add_library(moe_warnings INTERFACE)
target_compile_options(moe_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${MOE_WERROR}>>:-Werror>
  # CUDA: nvcc's own warnings and the host compiler's, as errors under MOE_WERROR.
  # nvcc's front end flags a discarded `Status&` from operator= of a [[nodiscard]] class (2810),
  # which GCC rightly does not: silenced.
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter --diag-suppress=2810>
  $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${MOE_WERROR}>>:-Werror=all-warnings -Xcompiler=-Werror>)
