// What the host CPU is and which vector instructions this process may use: the vendor, family,
// model and brand string from CPUID, and each vector ISA extension that the CPU reports AND the
// operating system saves the registers of (XGETBV), so "usable" here means "will not fault".
// Read once (cpu_info()); on a CPU that is not x86-64 every flag is false.
#pragma once

#include <string>

namespace moe {

// Vector ISA levels, ordered: a kernel built for one level runs on every CPU of that level or
// higher.
enum class IsaLevel { kBaseline = 0, kAvx = 1, kAvx2 = 2, kAvx512 = 3 };

struct CpuInfo {
  std::string vendor;  // "GenuineIntel", "AuthenticAMD", ... ("" off x86-64)
  std::string brand;   // "AMD EPYC 7B13 64-Core Processor", trimmed ("" when not reported)
  int family = 0;      // display family and model, as /proc/cpuinfo prints them
  int model = 0;
  bool avx = false;  // AVX, with YMM state enabled by the OS
  bool fma = false;  // FMA3
  bool avx2 = false;
  bool avx512f = false;  // the five of Skylake-SP, with ZMM and opmask state enabled
  bool avx512cd = false;
  bool avx512bw = false;
  bool avx512dq = false;
  bool avx512vl = false;
  bool avx512_bf16 = false;
  bool amx_tile = false;  // AMX tiles, with tile state enabled

  bool is_amd() const { return vendor == "AuthenticAMD" || vendor == "HygonGenuine"; }
  // The highest level whose instructions are all usable.
  IsaLevel level() const;
  // "AVX-512 (+BF16, AMX)", "AVX2", "AVX", "SSE only": the usable vector ISA, for start-up lines.
  std::string isa_summary() const;
  // "Intel(R) Xeon(R) Platinum 8480+ (family 6, model 143)": the brand and the model numbers.
  std::string description() const;
};

// The CPU this process runs on, read once.
const CpuInfo& cpu_info();

const char* isa_level_name(IsaLevel level);

}  // namespace moe
