#include "base/cpu_info.h"

#include <cstdint>
#include <cstring>

#include "base/status.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define MOE_X86 1
#endif

namespace moe {
namespace {

#ifdef MOE_X86
struct Regs {
  uint32_t a = 0, b = 0, c = 0, d = 0;
};

Regs cpuid(uint32_t leaf, uint32_t subleaf = 0) {
  Regs r;
  __cpuid_count(leaf, subleaf, r.a, r.b, r.c, r.d);
  return r;
}

// XCR0: which register states the OS saves on a context switch (valid only with OSXSAVE).
uint64_t xcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

bool bit(uint32_t word, int n) { return ((word >> n) & 1u) != 0; }

CpuInfo read_cpu() {
  CpuInfo info;
  const Regs v = cpuid(0);
  const uint32_t max_leaf = v.a;
  char vendor[13] = {};
  std::memcpy(vendor + 0, &v.b, 4);
  std::memcpy(vendor + 4, &v.d, 4);
  std::memcpy(vendor + 8, &v.c, 4);
  info.vendor = vendor;
  if (max_leaf < 1) return info;

  const Regs l1 = cpuid(1);
  const int base_family = static_cast<int>((l1.a >> 8) & 0xF);
  const int base_model = static_cast<int>((l1.a >> 4) & 0xF);
  const int ext_family = static_cast<int>((l1.a >> 20) & 0xFF);
  const int ext_model = static_cast<int>((l1.a >> 16) & 0xF);
  info.family = base_family == 0xF ? base_family + ext_family : base_family;
  info.model =
      (base_family == 0x6 || base_family == 0xF) ? (ext_model << 4) + base_model : base_model;

  const bool osxsave = bit(l1.c, 27);
  const uint64_t xcr = osxsave ? xcr0() : 0;
  const bool ymm_state = (xcr & 0x6) == 0x6;                 // SSE and AVX state
  const bool zmm_state = ymm_state && (xcr & 0xE0) == 0xE0;  // opmask, ZMM_Hi256, Hi16_ZMM
  const bool tile_state = (xcr & 0x60000) == 0x60000;        // XTILECFG, XTILEDATA

  info.avx = ymm_state && bit(l1.c, 28);
  info.fma = info.avx && bit(l1.c, 12);
  if (max_leaf >= 7) {
    const Regs l7 = cpuid(7, 0);
    info.avx2 = info.avx && bit(l7.b, 5);
    info.avx512f = zmm_state && bit(l7.b, 16);
    info.avx512dq = info.avx512f && bit(l7.b, 17);
    info.avx512cd = info.avx512f && bit(l7.b, 28);
    info.avx512bw = info.avx512f && bit(l7.b, 30);
    info.avx512vl = info.avx512f && bit(l7.b, 31);
    info.amx_tile = tile_state && bit(l7.d, 24);
    if (l7.a >= 1) info.avx512_bf16 = info.avx512f && bit(cpuid(7, 1).a, 5);
  }

  if (cpuid(0x80000000).a >= 0x80000004) {
    char brand[49] = {};
    for (uint32_t i = 0; i < 3; ++i) {
      const Regs r = cpuid(0x80000002 + i);
      std::memcpy(brand + 16 * i + 0, &r.a, 4);
      std::memcpy(brand + 16 * i + 4, &r.b, 4);
      std::memcpy(brand + 16 * i + 8, &r.c, 4);
      std::memcpy(brand + 16 * i + 12, &r.d, 4);
    }
    std::string s = brand;
    const size_t first = s.find_first_not_of(' ');
    const size_t last = s.find_last_not_of(' ');
    info.brand = first == std::string::npos ? "" : s.substr(first, last - first + 1);
  }
  return info;
}
#else
CpuInfo read_cpu() { return CpuInfo{}; }
#endif

}  // namespace

IsaLevel CpuInfo::level() const {
  if (avx512f && avx512cd && avx512bw && avx512dq && avx512vl && avx2 && fma) {
    return IsaLevel::kAvx512;
  }
  if (avx2 && fma) return IsaLevel::kAvx2;
  if (avx) return IsaLevel::kAvx;
  return IsaLevel::kBaseline;
}

const char* isa_level_name(IsaLevel level) {
  switch (level) {
    case IsaLevel::kAvx512:
      return "AVX-512";
    case IsaLevel::kAvx2:
      return "AVX2";
    case IsaLevel::kAvx:
      return "AVX";
    case IsaLevel::kBaseline:
      break;
  }
  return "SSE only";
}

std::string CpuInfo::isa_summary() const {
  std::string s = isa_level_name(level());
  std::string extra;
  if (avx512_bf16) extra += "+BF16";
  if (amx_tile) extra += std::string(extra.empty() ? "" : ", ") + "AMX";
  return extra.empty() ? s : str_cat(s, " (", extra, ")");
}

std::string CpuInfo::description() const {
  const std::string name = brand.empty() ? (vendor.empty() ? "unknown CPU" : vendor) : brand;
  if (vendor.empty()) return name;
  return str_cat(name, " (family ", family, ", model ", model, ")");
}

const CpuInfo& cpu_info() {
  static const CpuInfo info = read_cpu();
  return info;
}

}  // namespace moe
