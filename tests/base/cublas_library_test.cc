// base/cublas_library.h: cuBLAS is opened on first use, not at process start, and every function
// momoe calls resolves. Runs without a GPU: only host functions of cuBLAS are called.
#include "base/cublas_library.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

namespace moe {
namespace {

// Whether a library whose file name contains `name` is mapped into this process.
bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::stringstream text;
  text << maps.rdbuf();
  return text.str().find(name) != std::string::npos;
}

TEST(CublasLibraryTest, OpenedOnFirstUseWithEveryFunction) {
  // Linked, it would be mapped (with libcublasLt's 200 MB) before main: every process would pay.
  ASSERT_FALSE(mapped("libcublas")) << "cuBLAS is linked: it must be opened at run time only";
  StatusOr<const CublasApi*> api = load_cublas();
  ASSERT_TRUE(api.ok()) << api.status().to_string();
  EXPECT_TRUE(mapped("libcublas"));
  const CublasApi& a = **api;
  EXPECT_EQ(a.path.front(), '/') << a.path;
  EXPECT_NE(a.path.find(cublas_soname()), std::string::npos) << a.path;
  for (const void* fn :
       {reinterpret_cast<const void*>(a.create), reinterpret_cast<const void*>(a.destroy),
        reinterpret_cast<const void*>(a.set_stream), reinterpret_cast<const void*>(a.gemm_ex),
        reinterpret_cast<const void*>(a.gemm_strided_batched_ex),
        reinterpret_cast<const void*>(a.gemm_grouped_batched_ex),
        reinterpret_cast<const void*>(a.status_string)}) {
    EXPECT_NE(fn, nullptr);
  }
  EXPECT_EQ(&cublas(), *api);  // loaded once
  EXPECT_EQ(cublas_status_string(CUBLAS_STATUS_NOT_SUPPORTED),
            a.status_string(CUBLAS_STATUS_NOT_SUPPORTED));
  EXPECT_NE(cublas_status_string(CUBLAS_STATUS_NOT_SUPPORTED).find("not supported"),
            std::string::npos);
  EXPECT_EQ(cublas_soname(), "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR));
}

}  // namespace
}  // namespace moe
