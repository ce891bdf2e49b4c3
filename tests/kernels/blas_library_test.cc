// The BLAS is loaded at run time with a kernel chosen from the CPU's features (blas_library.h):
// the policy on made-up CPUs, and the library this process loaded on the real one.
#include "kernels/cpu/blas_library.h"

#include <gtest/gtest.h>
#include <strings.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/cpu/blas_ref.h"
#include "kernels/cpu/sgemm_accuracy.h"

namespace moe::kernels::ref {
namespace {

CpuInfo make_cpu(const std::string& vendor, int family, int model, IsaLevel level,
                 bool bf16 = false) {
  CpuInfo c;
  c.vendor = vendor;
  c.brand = vendor == "AuthenticAMD" ? "AMD EPYC" : "Intel(R) Xeon(R)";
  c.family = family;
  c.model = model;
  c.avx = level >= IsaLevel::kAvx;
  c.fma = c.avx2 = level >= IsaLevel::kAvx2;
  c.avx512f = c.avx512cd = c.avx512bw = c.avx512dq = c.avx512vl = level >= IsaLevel::kAvx512;
  c.avx512_bf16 = bf16 && level >= IsaLevel::kAvx512;
  return c;
}

const CpuInfo kEmeraldRapids = make_cpu("GenuineIntel", 6, 207, IsaLevel::kAvx512, true);
const CpuInfo kSkylakeSp = make_cpu("GenuineIntel", 6, 85, IsaLevel::kAvx512);
const CpuInfo kZen4 = make_cpu("AuthenticAMD", 25, 17, IsaLevel::kAvx512, true);
const CpuInfo kZen3 = make_cpu("AuthenticAMD", 25, 1, IsaLevel::kAvx2);
const CpuInfo kHaswell = make_cpu("GenuineIntel", 6, 63, IsaLevel::kAvx2);
const CpuInfo kSandyBridge = make_cpu("GenuineIntel", 6, 42, IsaLevel::kAvx);
const CpuInfo kOld = make_cpu("GenuineIntel", 6, 26, IsaLevel::kBaseline);

TEST(CpuInfoTest, LevelNeedsEveryExtensionOfIt) {
  EXPECT_EQ(kEmeraldRapids.level(), IsaLevel::kAvx512);
  EXPECT_EQ(kZen3.level(), IsaLevel::kAvx2);
  CpuInfo no_vl = kSkylakeSp;
  no_vl.avx512vl = false;  // AVX-512F alone (Knights Landing) is not Skylake-SP's AVX-512
  EXPECT_EQ(no_vl.level(), IsaLevel::kAvx2);
  CpuInfo no_fma = kHaswell;
  no_fma.fma = false;
  EXPECT_EQ(no_fma.level(), IsaLevel::kAvx);
  EXPECT_EQ(kEmeraldRapids.isa_summary(), "AVX-512 (+BF16)");
  EXPECT_EQ(kOld.isa_summary(), "SSE only");
  EXPECT_EQ(kZen3.description(), "AMD EPYC (family 25, model 1)");
}

TEST(CpuInfoTest, ThisCpuIsReadConsistently) {
  const CpuInfo& cpu = cpu_info();
#if defined(__x86_64__)
  EXPECT_FALSE(cpu.vendor.empty());
  EXPECT_GT(cpu.family, 0);
  // What the compiler's own CPU detection (GCC reads CPUID and XCR0 too) says must agree.
  __builtin_cpu_init();
  EXPECT_EQ(cpu.avx2, __builtin_cpu_supports("avx2") != 0);
  EXPECT_EQ(cpu.fma, __builtin_cpu_supports("fma") != 0);
  EXPECT_EQ(cpu.avx512f, __builtin_cpu_supports("avx512f") != 0);
  EXPECT_EQ(cpu.avx512bw, __builtin_cpu_supports("avx512bw") != 0);
#endif
  EXPECT_FALSE(cpu.isa_summary().empty());
}

TEST(BlasPolicyTest, CoreFollowsFeaturesNotModelNumbers) {
  // The Xeon of the bug report (family 6, model 207), which OpenBLAS 0.3.21 does not know.
  EXPECT_EQ(openblas_core_for(kEmeraldRapids), "Cooperlake");
  EXPECT_EQ(openblas_core_for(make_cpu("GenuineIntel", 6, 250, IsaLevel::kAvx512, true)),
            "Cooperlake");
  EXPECT_EQ(openblas_core_for(kSkylakeSp), "SkylakeX");
  EXPECT_EQ(openblas_core_for(kZen4), "Cooperlake");
  EXPECT_EQ(openblas_core_for(kZen3), "Haswell");
  EXPECT_EQ(openblas_core_for(kHaswell), "Haswell");
  EXPECT_EQ(openblas_core_for(kSandyBridge), "Sandybridge");
  EXPECT_EQ(openblas_core_for(kOld), "");
}

TEST(BlasPolicyTest, ACoreTheCpuCannotRunIsRefusedByName) {
  EXPECT_TRUE(check_openblas_core_runs("Prescott", kOld).ok());
  EXPECT_TRUE(check_openblas_core_runs("haswell", kZen3).ok());  // OpenBLAS ignores case too
  EXPECT_TRUE(check_openblas_core_runs("Zen", kHaswell).ok());
  EXPECT_TRUE(check_openblas_core_runs("SkylakeX", kZen4).ok());
  EXPECT_TRUE(check_openblas_core_runs("Cooperlake", kEmeraldRapids).ok());
  EXPECT_TRUE(check_openblas_core_runs("NoSuchCore", kOld).ok());  // OpenBLAS refuses it itself

  const Status avx512 = check_openblas_core_runs("SkylakeX", kZen3);
  EXPECT_FALSE(avx512.ok());
  EXPECT_NE(avx512.message().find("AVX-512"), std::string::npos) << avx512.message();
  EXPECT_NE(avx512.message().find("AMD EPYC (family 25, model 1)"), std::string::npos);
  const Status bf16 = check_openblas_core_runs("Cooperlake", kSkylakeSp);
  EXPECT_FALSE(bf16.ok());
  EXPECT_NE(bf16.message().find("BF16"), std::string::npos) << bf16.message();
  EXPECT_FALSE(check_openblas_core_runs("Haswell", kSandyBridge).ok());
  const Status xop = check_openblas_core_runs("Excavator", kZen3);  // FMA4/XOP: family 15h only
  EXPECT_FALSE(xop.ok());
  EXPECT_NE(xop.message().find("15h"), std::string::npos) << xop.message();
  EXPECT_TRUE(
      check_openblas_core_runs("Excavator", make_cpu("AuthenticAMD", 21, 96, IsaLevel::kAvx2))
          .ok());
}

TEST(BlasPolicyTest, AGenericKernelOnAVectorCpuIsWarnedAboutWithTheFix) {
  const std::string w = openblas_kernel_warning("Prescott", "", false, kEmeraldRapids);
  EXPECT_NE(w.find("Prescott"), std::string::npos) << w;
  EXPECT_NE(w.find("AVX-512"), std::string::npos) << w;
  EXPECT_NE(w.find("OPENBLAS_CORETYPE=Cooperlake"), std::string::npos) << w;
  // Forced by the user: the fix is to stop forcing it.
  const std::string forced = openblas_kernel_warning("Prescott", "Prescott", true, kZen3);
  EXPECT_NE(forced.find("unset OPENBLAS_CORETYPE"), std::string::npos) << forced;
  EXPECT_NE(openblas_kernel_warning("Haswell", "", false, kSkylakeSp), "");
  // A core that uses the CPU's ISA, or a CPU with nothing better: no warning.
  EXPECT_EQ(openblas_kernel_warning("Cooperlake", "Cooperlake", false, kEmeraldRapids), "");
  EXPECT_EQ(openblas_kernel_warning("Haswell", "", false, kZen3), "");
  EXPECT_EQ(openblas_kernel_warning("Zen", "Zen", false, kZen3), "");
  EXPECT_EQ(openblas_kernel_warning("Prescott", "", false, kOld), "");
  // OpenBLAS ignored the request (an unknown name): said, with what it runs instead.
  const std::string ignored = openblas_kernel_warning("Haswell", "Skylake", true, kZen3);
  EXPECT_NE(ignored.find("ignored"), std::string::npos) << ignored;
  // Our choice ignored (an OpenBLAS built for one CPU): said only when that kernel is slower.
  EXPECT_EQ(openblas_kernel_warning("Haswell", "Zen", false, kZen3), "");
  const std::string single =
      openblas_kernel_warning("Haswell", "Cooperlake", false, kEmeraldRapids);
  EXPECT_NE(single, "");
  // ... and then the fix is another build, not the variable momoe already set.
  EXPECT_NE(single.find("without DYNAMIC_ARCH"), std::string::npos) << single;
  EXPECT_EQ(single.find("set OPENBLAS_CORETYPE"), std::string::npos) << single;
}

TEST(BlasLibraryTest, TheLoadedLibraryIsNamedWithItsKernel) {
  ASSERT_TRUE(load_blas().ok()) << load_blas().message();
  const BlasInfo& info = blas_info();
  EXPECT_FALSE(info.library.empty());
  EXPECT_NE(info.summary().find(info.library), std::string::npos);
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  const char* other = std::getenv("MOMOE_BLAS");
  if (other == nullptr && info.library != "OpenBLAS") {
    ADD_FAILURE() << "the default BLAS is OpenBLAS, loaded " << info.summary();
  }
  if (other != nullptr && std::string(other).find("blis") != std::string::npos) {
    EXPECT_EQ(info.library, "BLIS") << info.summary();
    EXPECT_FALSE(info.version.empty());
    EXPECT_FALSE(info.kernel.empty());  // BLIS's sub-configuration, e.g. zen3 or skx
    EXPECT_EQ(info.path, other);
  }
  if (info.library == "OpenBLAS") {
    EXPECT_FALSE(info.version.empty());
    ASSERT_FALSE(info.kernel.empty());
    if (forced != nullptr && *forced != '\0') {
      // The harness runs the suite under forced cores: that core must be the one running.
      EXPECT_TRUE(strcasecmp(info.kernel.c_str(), forced) == 0) << info.summary();
      EXPECT_EQ(info.chosen_by, "OPENBLAS_CORETYPE");
    } else if (!openblas_core_for(cpu_info()).empty()) {
      EXPECT_EQ(info.kernel, openblas_core_for(cpu_info())) << info.summary();
      EXPECT_EQ(info.chosen_by, "CPU features");
      EXPECT_EQ(info.warning, "") << info.warning;
    }
    // The core is set only while the library loads: the environment is the user's again.
    if (forced == nullptr) {
      EXPECT_EQ(std::getenv("OPENBLAS_CORETYPE"), nullptr);
    }
  }
}

TEST(BlasLibraryTest, ProductsRunThroughTheLoadedLibrary) {
  // 2x3 * 3x2, exact in binary floating point.
  const std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {7, 8, 9, 10, 11, 12};
  std::vector<float> c(4, -1.0f);
  gemm<float>(false, false, 2, 2, 3, 1.0f, a.data(), 3, b.data(), 2, 0.0f, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{58, 64, 139, 154}));
  std::vector<double> cd(4, 1.0);
  const std::vector<double> ad(a.begin(), a.end()), bd(b.begin(), b.end());
  gemm<double>(true, false, 2, 2, 3, 2.0, ad.data(), 2, bd.data(), 2, 1.0, cd.data(), 2);
  // A^T where A is the 3x2 matrix {1 2; 3 4; 5 6}: A^T B = {89 98; 116 128}; 2x + 1.
  EXPECT_EQ(cd, (std::vector<double>{179, 197, 233, 257}));
}

// Whether the loaded kernel computes sgemm correctly on this CPU (tests/run.sh runs this under
// every OpenBLAS kernel the CPU can run): on each of momoe's GEMM shapes, every element is within
// the classical error bound of a float32 K-term product against an exact (f64) sum
// (kernels/cpu/sgemm_accuracy.h). The bound is derived, not measured: a correct kernel in
// any summation order meets it.
TEST(BlasLibraryTest, SgemmMeetsFloat32sErrorBoundOnMomoesShapes) {
  ASSERT_TRUE(load_blas().ok()) << load_blas().message();
  uint64_t seed = 1;
  for (const GemmShape& shape : momoe_gemm_shapes(64)) {
    const SgemmAccuracy r = measure_sgemm(shape, seed++);
    EXPECT_TRUE(r.ok()) << blas_info().summary() << ": " << shape.name << " (" << shape.m << " x "
                        << shape.n << " x " << shape.k << "): worst error " << r.ratio
                        << " u sum|a||b|, bound " << r.bound;
    // Not vacuous: rounding shows, far below the bound.
    EXPECT_GT(r.ratio, 0.0) << shape.name;
  }
}

}  // namespace
}  // namespace moe::kernels::ref
