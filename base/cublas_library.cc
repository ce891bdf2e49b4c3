#include "base/cublas_library.h"

#include <dlfcn.h>
#include <link.h>

#include <type_traits>

#include "base/check.h"

namespace moe {
namespace {

// Compiles only where the headers declare these exact overloads (unevaluated: nothing linked).
static_assert(std::is_same_v<decltype(static_cast<CublasGemmExFn>(&cublasGemmEx)), CublasGemmExFn>);
static_assert(
    std::is_same_v<decltype(static_cast<CublasGemmStridedBatchedExFn>(&cublasGemmStridedBatchedEx)),
                   CublasGemmStridedBatchedExFn>);

struct Loaded {
  Status status;
  CublasApi api;
};

// Resolves `name` into *fn; false (with the loader's message in *error) when it is missing.
template <typename Fn>
bool resolve(void* handle, const char* name, Fn* fn, std::string* error) {
  dlerror();
  *fn = reinterpret_cast<Fn>(dlsym(handle, name));
  if (*fn != nullptr) return true;
  const char* why = dlerror();
  *error = str_cat(name, " (", why != nullptr ? why : "null", ")");
  return false;
}

Loaded load() {
  Loaded l;
  const std::string soname = cublas_soname();
  void* handle = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    l.status = failed_precondition_error(
        "cuBLAS cannot be loaded: ", why != nullptr ? why : soname,
        "; install the CUDA toolkit's cuBLAS ", CUBLAS_VER_MAJOR,
        ".x (or PyTorch's nvidia-cublas wheel) and put its folder on LD_LIBRARY_PATH");
    return l;
  }
  CublasApi& a = l.api;
  std::string missing;
  const bool all =
      resolve(handle, "cublasCreate_v2", &a.create, &missing) &&
      resolve(handle, "cublasDestroy_v2", &a.destroy, &missing) &&
      resolve(handle, "cublasSetStream_v2", &a.set_stream, &missing) &&
      resolve(handle, "cublasSetWorkspace_v2", &a.set_workspace, &missing) &&
      resolve(handle, "cublasGemmEx", &a.gemm_ex, &missing) &&
      resolve(handle, "cublasGemmStridedBatchedEx", &a.gemm_strided_batched_ex, &missing) &&
      resolve(handle, "cublasGemmGroupedBatchedEx", &a.gemm_grouped_batched_ex, &missing) &&
      resolve(handle, "cublasGetStatusString", &a.status_string, &missing);
  link_map* map = nullptr;
  a.path = dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr ? map->l_name : soname;
  if (!all) {
    l.status = failed_precondition_error(a.path, " lacks ", missing, ": momoe needs cuBLAS ",
                                         CUBLAS_VER_MAJOR, ".", CUBLAS_VER_MINOR,
                                         " or newer; put that folder first on LD_LIBRARY_PATH");
  }
  return l;  // the handle stays open for the process's life
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

}  // namespace

std::string cublas_soname() { return str_cat("libcublas.so.", CUBLAS_VER_MAJOR); }

StatusOr<const CublasApi*> load_cublas() {
  const Loaded& l = loaded();
  if (!l.status.ok()) return l.status;
  return &l.api;
}

const CublasApi& cublas() {
  const Loaded& l = loaded();
  MOE_CHECK(l.status.ok(), l.status.message());
  return l.api;
}

std::string cublas_status_string(cublasStatus_t status) {
  const Loaded& l = loaded();
  if (l.status.ok()) return l.api.status_string(status);
  return str_cat("cuBLAS status ", static_cast<int>(status));
}

}  // namespace moe
