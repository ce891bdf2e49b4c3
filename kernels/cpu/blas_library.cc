#include "kernels/cpu/blas_library.h"

#include <dlfcn.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <sstream>

#include "base/check.h"

namespace moe::kernels::ref {
namespace {

constexpr const char* kDefaultLibrary = "libopenblas.so.0";

struct CoreLevel {
  const char* name;
  IsaLevel level;
};

// The x86-64 cores of OpenBLAS 0.3.x's DYNAMIC_ARCH builds and the ISA their kernels use.
// Bulldozer .. Excavator also use AMD family 15h's FMA4/XOP (checked separately).
constexpr CoreLevel kCores[] = {
    {"Katmai", IsaLevel::kBaseline},       {"Coppermine", IsaLevel::kBaseline},
    {"Northwood", IsaLevel::kBaseline},    {"Prescott", IsaLevel::kBaseline},
    {"Banias", IsaLevel::kBaseline},       {"Atom", IsaLevel::kBaseline},
    {"Core2", IsaLevel::kBaseline},        {"Penryn", IsaLevel::kBaseline},
    {"Dunnington", IsaLevel::kBaseline},   {"Nehalem", IsaLevel::kBaseline},
    {"Athlon", IsaLevel::kBaseline},       {"Opteron", IsaLevel::kBaseline},
    {"Opteron_SSE3", IsaLevel::kBaseline}, {"Barcelona", IsaLevel::kBaseline},
    {"Nano", IsaLevel::kBaseline},         {"Bobcat", IsaLevel::kBaseline},
    {"Sandybridge", IsaLevel::kAvx},       {"Bulldozer", IsaLevel::kAvx},
    {"Piledriver", IsaLevel::kAvx},        {"Steamroller", IsaLevel::kAvx},
    {"Haswell", IsaLevel::kAvx2},          {"Zen", IsaLevel::kAvx2},
    {"Excavator", IsaLevel::kAvx2},        {"SkylakeX", IsaLevel::kAvx512},
    {"Cooperlake", IsaLevel::kAvx512},     {"SapphireRapids", IsaLevel::kAvx512},
};

bool same_name(std::string_view a, std::string_view b) {
  return a.size() == b.size() && strncasecmp(a.data(), b.data(), a.size()) == 0;
}

bool is_amd_family15h_core(std::string_view core) {
  for (const char* c : {"Bulldozer", "Piledriver", "Steamroller", "Excavator"})
    if (same_name(core, c)) return true;
  return false;
}

// The cores worth naming to a user (one per ISA generation) that this CPU runs.
std::string runnable_list(const CpuInfo& cpu) {
  std::string out;
  for (const char* core : {"Prescott", "Nehalem", "Sandybridge", "Haswell", "Zen", "SkylakeX",
                           "Cooperlake", "SapphireRapids"}) {
    if (!check_openblas_core_runs(core, cpu).ok()) continue;
    out += std::string(out.empty() ? "" : ", ") + core;
  }
  return out;
}

// A scoped environment variable: set for the constructor of the library being loaded, then
// restored, so child processes and later readers see the user's environment.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had_) {
      ::setenv(name_, old_.c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

template <typename Fn>
Fn symbol(void* handle, const char* name) {
  return reinterpret_cast<Fn>(::dlsym(handle, name));
}

struct Loaded {
  Status status = Status::OK();
  BlasInfo info;
  BlasFunctions fns;
};

// The OpenBLAS core to request at load: the user's OPENBLAS_CORETYPE if it runs here, else the
// one for this CPU's features; "" to let the library choose (not an OpenBLAS, or no match). A
// core named for another library (MOMOE_BLAS not an OpenBLAS) is not this load's business.
// Sets info->chosen_by and info->requested; *user_chose when the user's core is the request.
StatusOr<std::string> requested_core(const CpuInfo& cpu, BlasInfo* info, bool* user_chose) {
  // (getenv's pointer is copied: a ScopedEnv rewrites the variable later.)
  const char* env_core = std::getenv("OPENBLAS_CORETYPE");
  const std::string user_core = env_core != nullptr ? env_core : "";
  std::string lower = info->path;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const bool openblas_path = lower.find("openblas") != std::string::npos;
  *user_chose = !user_core.empty() && openblas_path;
  if (*user_chose) {
    Status runs = check_openblas_core_runs(user_core, cpu);
    if (!runs.ok()) {
      return invalid_argument_error(
          "OPENBLAS_CORETYPE=", user_core, ": ", runs.message(),
          "; unset it (momoe then picks the core from the CPU's features) or choose one of: ",
          runnable_list(cpu));
    }
    info->chosen_by = "OPENBLAS_CORETYPE";
    info->requested = user_core;
    return user_core;
  }
  if (!openblas_path) {
    info->chosen_by = "the library";
    return std::string();
  }
  const std::string requested = openblas_core_for(cpu);
  info->chosen_by = requested.empty() ? "the library" : "CPU features";
  return requested;
}

// What the loaded library says of itself (OpenBLAS, BLIS or another CBLAS): its name, version and
// kernel, with one BLAS thread set, and a warning when the kernel is slow for this CPU.
void describe_library(void* handle, const std::string& requested, bool user_chose,
                      const CpuInfo& cpu, BlasInfo* info) {
  using StrFn = const char* (*)();
  using SetThreadsFn = void (*)(int);
  using BliSetThreadsFn = void (*)(int64_t);  // BLIS's dim_t (64-bit unless built otherwise)
  if (auto config = symbol<StrFn>(handle, "openblas_get_config")) {
    info->library = "OpenBLAS";
    // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ... Haswell MAX_THREADS=64"
    std::istringstream words(config());
    std::string name;
    words >> name >> info->version;
    if (auto corename = symbol<StrFn>(handle, "openblas_get_corename")) info->kernel = corename();
    if (auto set = symbol<SetThreadsFn>(handle, "openblas_set_num_threads")) set(1);
    // A core OpenBLAS does not know, or one built without DYNAMIC_ARCH: its own choice.
    if (!requested.empty() && !same_name(info->kernel, requested)) info->chosen_by = "the library";
    info->warning = openblas_kernel_warning(info->kernel, requested, user_chose, cpu);
  } else if (auto version = symbol<StrFn>(handle, "bli_info_get_version_str")) {
    info->library = "BLIS";
    info->version = version();
    using ArchIdFn = int (*)();
    using ArchNameFn = const char* (*)(int);
    auto id = symbol<ArchIdFn>(handle, "bli_arch_query_id");
    auto arch = symbol<ArchNameFn>(handle, "bli_arch_string");
    if (id != nullptr && arch != nullptr) info->kernel = arch(id());
    if (auto set = symbol<BliSetThreadsFn>(handle, "bli_thread_set_num_threads")) set(1);
    info->chosen_by = "the library";
    if (info->kernel == "generic" && cpu.level() >= IsaLevel::kAvx2) {
      info->warning =
          str_cat("BLIS runs its generic kernel on a CPU with ", isa_level_name(cpu.level()),
                  ": unset MOMOE_BLAS to use OpenBLAS with a kernel for this CPU");
    }
  } else {
    info->library = "CBLAS";
    info->chosen_by = "the library";
  }
}

Loaded load() {
  Loaded out;
  BlasInfo& info = out.info;
  const CpuInfo& cpu = cpu_info();
  const char* chosen = std::getenv("MOMOE_BLAS");
  info.path = chosen != nullptr && *chosen != '\0' ? chosen : kDefaultLibrary;
  bool user_chose = false;
  StatusOr<std::string> core = requested_core(cpu, &info, &user_chose);
  if (!core.ok()) {
    out.status = core.status();
    return out;
  }
  const std::string requested = *core;
  void* handle = nullptr;
  {
    // OpenBLAS reads both in its load-time constructor; one thread, since the pool is the
    // parallelism (no idle BLAS threads are started).
    std::optional<ScopedEnv> core_env;
    if (!requested.empty()) core_env.emplace("OPENBLAS_CORETYPE", requested);
    ScopedEnv threads("OPENBLAS_NUM_THREADS", "1");
    handle = ::dlopen(info.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  }
  if (handle == nullptr) {
    const char* why = ::dlerror();
    out.status = failed_precondition_error(
        "cannot load the BLAS library '", info.path, "' (", why != nullptr ? why : "not found",
        "): install OpenBLAS (Debian: apt-get install libopenblas0-pthread) or set MOMOE_BLAS "
        "to the path of a CBLAS library");
    return out;
  }
  out.fns.sgemm = symbol<SgemmFn>(handle, "cblas_sgemm");
  out.fns.dgemm = symbol<DgemmFn>(handle, "cblas_dgemm");
  if (out.fns.sgemm == nullptr || out.fns.dgemm == nullptr) {
    out.status = failed_precondition_error("the BLAS library '", info.path,
                                           "' has no cblas_sgemm/cblas_dgemm: MOMOE_BLAS must "
                                           "name a library with the CBLAS interface");
    return out;
  }
  describe_library(handle, requested, user_chose, cpu, &info);
  return out;
}

const Loaded& loaded() {
  static std::once_flag once;
  static Loaded* result = nullptr;
  std::call_once(once, [] { result = new Loaded(load()); });  // never freed: used until exit
  return *result;
}

}  // namespace

std::string BlasInfo::summary() const {
  std::string s = library;
  if (!version.empty()) s += " " + version;
  if (!kernel.empty()) s += ", kernel " + kernel;
  if (chosen_by == "OPENBLAS_CORETYPE" && same_name(kernel, requested)) {
    s += " (OPENBLAS_CORETYPE=" + requested + " from the environment, honoured)";
  } else if (!chosen_by.empty()) {
    s += " (chosen by " + chosen_by + ")";
  }
  return s;
}

Status load_blas() { return loaded().status; }

const BlasInfo& blas_info() {
  const Loaded& l = loaded();
  MOE_CHECK(l.status.ok(), l.status.message());
  return l.info;
}

const BlasFunctions& blas_functions() {
  const Loaded& l = loaded();
  MOE_CHECK(l.status.ok(), l.status.message());
  return l.fns;
}

std::string openblas_core_for(const CpuInfo& cpu) {
  switch (cpu.level()) {
    case IsaLevel::kAvx512:
      return cpu.avx512_bf16 ? "Cooperlake" : "SkylakeX";
    // Zen's kernels are Haswell's with other block sizes; on a Zen 3 Haswell's were as fast or
    // faster on the layer shapes (and OpenBLAS picks Haswell there itself).
    case IsaLevel::kAvx2:
      return "Haswell";
    case IsaLevel::kAvx:
      return "Sandybridge";
    case IsaLevel::kBaseline:
      break;
  }
  return "";
}

bool openblas_core_level(std::string_view core, IsaLevel* level) {
  for (const CoreLevel& c : kCores) {
    if (same_name(core, c.name)) {
      *level = c.level;
      return true;
    }
  }
  return false;
}

Status check_openblas_core_runs(std::string_view core, const CpuInfo& cpu) {
  IsaLevel need;
  if (!openblas_core_level(core, &need)) return Status::OK();  // OpenBLAS itself refuses it
  const std::string what = cpu.description();
  if (cpu.level() < need) {
    return failed_precondition_error("the ", core, " kernels need ", isa_level_name(need),
                                     ", which this CPU (", what, ", ", cpu.isa_summary(),
                                     ") does not have");
  }
  if ((same_name(core, "Cooperlake") || same_name(core, "SapphireRapids")) && !cpu.avx512_bf16) {
    return failed_precondition_error("the ", core, " kernels need AVX-512 BF16, which this CPU (",
                                     what, ", ", cpu.isa_summary(), ") does not have");
  }
  if (is_amd_family15h_core(core) && !(cpu.is_amd() && cpu.family == 0x15)) {
    return failed_precondition_error("the ", core,
                                     " kernels need the FMA4/XOP instructions of AMD family 15h "
                                     "(Bulldozer to Excavator); this CPU is ",
                                     what);
  }
  return Status::OK();
}

namespace {

// What momoe-bench sgemm measured (docs/blas_kernels.md): a core's single-threaded sgemm rate on
// momoe's GEMM shapes over the rate of the core momoe picks, median over the shapes, on one CPU
// model. Every core there met float32's error bound on every shape.
struct MeasuredSpeed {
  const char* core;
  const char* against;
  double ratio;
  const char* vendor;
  int family, model;
  const char* cpu;
};
constexpr MeasuredSpeed kMeasured[] = {
    {"Prescott", "Cooperlake", 0.30, "GenuineIntel", 6, 207, "an Intel Xeon (family 6, model 207)"},
    {"Sandybridge", "Cooperlake", 0.55, "GenuineIntel", 6, 207,
     "an Intel Xeon (family 6, model 207)"},
    {"Haswell", "Cooperlake", 0.69, "GenuineIntel", 6, 207, "an Intel Xeon (family 6, model 207)"},
    {"Zen", "Cooperlake", 0.63, "GenuineIntel", 6, 207, "an Intel Xeon (family 6, model 207)"},
};

// What was measured of `core` against `best` (on this CPU model or the one it was measured on),
// or, for a pair never measured, the command that measures it here.
std::string measured_sentence(std::string_view core, const std::string& best, const CpuInfo& cpu) {
  for (const MeasuredSpeed& m : kMeasured) {
    if (!same_name(core, m.core) || best != m.against) continue;
    const bool here = cpu.vendor == m.vendor && cpu.family == m.family && cpu.model == m.model;
    return str_cat("measured on momoe's GEMM shapes (momoe-bench sgemm, docs/blas_kernels.md) on ",
                   here ? "this CPU model" : m.cpu, ": ", m.core, "'s sgemm runs at about ",
                   static_cast<int>(m.ratio * 100 + 0.5), "% of ", m.against,
                   "'s speed, both within float32's error bound",
                   here ? "" : " (momoe-bench sgemm measures this CPU)");
  }
  return str_cat("momoe-bench sgemm measures ", core, " against ", best,
                 " on momoe's GEMM shapes on this CPU (speed, and accuracy against float32's "
                 "error bound)");
}

}  // namespace

std::string openblas_kernel_warning(std::string_view core, std::string_view requested,
                                    bool requested_by_user, const CpuInfo& cpu) {
  // The user's request ignored (an unknown name). Ours ignored means an OpenBLAS built for one
  // CPU (no DYNAMIC_ARCH): only its level matters, below.
  if (requested_by_user && !requested.empty() && !same_name(core, requested)) {
    return str_cat("OpenBLAS ignored the requested core ", requested, " and runs ", core,
                   " (check OPENBLAS_CORETYPE's spelling; this OpenBLAS may not know it)");
  }
  IsaLevel level;
  if (!openblas_core_level(core, &level) || level >= cpu.level()) return "";
  const bool ignored = !requested.empty() && !same_name(core, requested);  // momoe's own choice
  const std::string best = openblas_core_for(cpu);
  const std::string fix =
      requested_by_user
          ? str_cat("to use ", best, ", unset OPENBLAS_CORETYPE (momoe then picks it)")
      : ignored ? str_cat("this OpenBLAS ignored momoe's choice of ", requested,
                          " (built for one CPU, without DYNAMIC_ARCH): install Debian's "
                          "libopenblas0-pthread or point MOMOE_BLAS at a DYNAMIC_ARCH build")
                : str_cat("set OPENBLAS_CORETYPE=", best);
  return str_cat("OpenBLAS runs its ", core, " kernel (", isa_level_name(level), ") on a CPU with ",
                 cpu.isa_summary(),
                 requested_by_user ? str_cat(", as OPENBLAS_CORETYPE=", requested,
                                             " in the environment asks (honoured)")
                                   : std::string(),
                 "; ", measured_sentence(core, best, cpu), "; ", fix);
}

std::string blas_warning_line(int rank) {
  const Loaded& l = loaded();
  if (!l.status.ok() || l.info.warning.empty()) return "";
  return str_cat("momoe: ", rank > 0 ? str_cat("rank ", rank, ": ") : std::string(),
                 "warning: ", l.info.warning);
}

void print_blas_warning(int rank) {
  if (const std::string w = blas_warning_line(rank); !w.empty()) {
    std::fprintf(stderr, "%s\n", w.c_str());
  }
}

}  // namespace moe::kernels::ref
