// The one error-macro header. Macros are textual, so the CUDA/cuBLAS/NCCL/MPI variants need their
// library headers only where they are used.
//
//   MOE_CHECK(cond, args...)            invariant (programmer error): print file:line and abort.
//   MOE_RETURN_IF_ERROR(status_expr)    propagate a non-OK Status.
//   MOE_ASSIGN_OR_RETURN(lhs, expr)     unwrap a StatusOr or propagate its error.
//   MOE_CUDA_STATUS(expr)               cudaError_t -> Status ("cuda: <expr>: <error string>").
//   MOE_CUDA_RETURN_IF_ERROR(expr), MOE_CUBLAS_RETURN_IF_ERROR(expr),
//   MOE_NCCL_RETURN_IF_ERROR(expr), MOE_MPI_RETURN_IF_ERROR(expr)
#pragma once

#include <cstdio>
#include <cstdlib>

#include "base/status.h"

namespace moe::detail {
[[noreturn]] void check_failed(const char* file, int line, const char* cond,
                               const std::string& msg);
}  // namespace moe::detail

#define MOE_CHECK(cond, ...)                                                               \
  do {                                                                                     \
    if (!(cond))                                                                           \
      ::moe::detail::check_failed(__FILE__, __LINE__, #cond, ::moe::str_cat(__VA_ARGS__)); \
  } while (0)

#define MOE_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::moe::Status _moe_status = (expr);        \
    if (!_moe_status.ok()) return _moe_status; \
  } while (0)

#define MOE_CONCAT_INNER_(a, b) a##b
#define MOE_CONCAT_(a, b) MOE_CONCAT_INNER_(a, b)
#define MOE_ASSIGN_OR_RETURN(lhs, expr) \
  MOE_ASSIGN_OR_RETURN_IMPL_(MOE_CONCAT_(_moe_statusor_, __LINE__), lhs, expr)
#define MOE_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()

// One generator for every native library's error type (ggml's CUDA_CHECK_GEN).
#define MOE_NATIVE_STATUS_GEN(prefix, expr, success, error_string)                                 \
  [&]() -> ::moe::Status {                                                                         \
    auto _moe_err = (expr);                                                                        \
    if (_moe_err == (success)) return ::moe::Status::OK();                                         \
    return ::moe::internal_error(prefix ": ", #expr, ": ", error_string(_moe_err), " (", __FILE__, \
                                 ":", __LINE__, ")");                                              \
  }()

#define MOE_CUDA_STATUS(expr) MOE_NATIVE_STATUS_GEN("cuda", expr, cudaSuccess, cudaGetErrorString)
// cuBLAS is loaded at run time (base/cublas_library.h, which the caller includes).
#define MOE_CUBLAS_STATUS(expr) \
  MOE_NATIVE_STATUS_GEN("cublas", expr, CUBLAS_STATUS_SUCCESS, ::moe::cublas_status_string)
#define MOE_NCCL_STATUS(expr) MOE_NATIVE_STATUS_GEN("nccl", expr, ncclSuccess, ncclGetErrorString)
#define MOE_MPI_STATUS(expr) \
  MOE_NATIVE_STATUS_GEN("mpi", expr, MPI_SUCCESS, ::moe::detail::mpi_error_string)

#define MOE_CUDA_RETURN_IF_ERROR(expr) MOE_RETURN_IF_ERROR(MOE_CUDA_STATUS(expr))
#define MOE_CUBLAS_RETURN_IF_ERROR(expr) MOE_RETURN_IF_ERROR(MOE_CUBLAS_STATUS(expr))
#define MOE_NCCL_RETURN_IF_ERROR(expr) MOE_RETURN_IF_ERROR(MOE_NCCL_STATUS(expr))
#define MOE_MPI_RETURN_IF_ERROR(expr) MOE_RETURN_IF_ERROR(MOE_MPI_STATUS(expr))
