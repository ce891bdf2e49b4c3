// cuBLAS, loaded with dlopen when the first CUDA context is made instead of linked. A linked
// libcublas (with the libcublasLt it pulls in) costs every process about 0.1 s and 200 MB of
// touched pages at start (/bin/true with it preloaded: 0.09 s, 211 MB, 25,000 page faults), a CPU
// run and every test process included; and a CUDA build would not start at all where cuBLAS is
// not installed. The file is libcublas.so.<major> of the headers compiled against, found as
// dlopen finds it (LD_LIBRARY_PATH, the executable's RUNPATH, the system's library cache).
#pragma once

#if defined(MOE_WITH_CUDA)
#include <cublas_v2.h>

#include <string>

#include "base/status.h"

namespace moe {

// C++ overloads cublasGemmEx and cublasGemmStridedBatchedEx (a cudaDataType compute type, inline):
// the library's own functions take a cublasComputeType_t.
using CublasGemmExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                          int, int, const void*, const void*, cudaDataType, int,
                                          const void*, cudaDataType, int, const void*, void*,
                                          cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
using CublasGemmStridedBatchedExFn = cublasStatus_t (*)(
    cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*, const void*,
    cudaDataType, int, long long, const void*, cudaDataType, int, long long,  // NOLINT(runtime/int)
    const void*, void*, cudaDataType, int, long long, int, cublasComputeType_t,  // NOLINT
    cublasGemmAlgo_t);

// The cuBLAS functions momoe calls.
struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetWorkspace_v2) set_workspace = nullptr;
  CublasGemmExFn gemm_ex = nullptr;
  CublasGemmStridedBatchedExFn gemm_strided_batched_ex = nullptr;
  decltype(&cublasGemmGroupedBatchedEx) gemm_grouped_batched_ex = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
  std::string path;  // the file loaded, as the loader resolved it
};

// The soname momoe loads: "libcublas.so.13" for CUDA 13's headers.
std::string cublas_soname();

// Loads cuBLAS once per process (thread-safe; later calls return the first outcome) and resolves
// every function above. The error names the file, the loader's reason and what to do.
StatusOr<const CublasApi*> load_cublas();

// The loaded functions; load_cublas() must have succeeded (Context::cuda does it first).
const CublasApi& cublas();

// cuBLAS's text for a status ("the requested functionality is not supported"), or its number
// while cuBLAS is not loaded.
std::string cublas_status_string(cublasStatus_t status);

}  // namespace moe
#endif  // MOE_WITH_CUDA
