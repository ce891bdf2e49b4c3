#include "benchmarks/bench_util.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iomanip>
#include <numeric>
#include <sstream>
#include <thread>

#include "base/check.h"
#include "base/cpu_info.h"
#include "base/cublas_library.h"
#include "base/device.h"
#include "base/did_you_mean.h"
#include "kernels/cpu/blas_library.h"

namespace moe::bench {

StatusOr<Timing> time_it(int warmup, int iterations, const std::function<Status()>& fn,
                         comm::Communicator* comm) {
  for (int i = 0; i < warmup; ++i) MOE_RETURN_IF_ERROR(fn());
  std::vector<double> t;
  for (int i = 0; i < iterations; ++i) {
    if (comm != nullptr) MOE_RETURN_IF_ERROR(comm->barrier());
    const auto t0 = std::chrono::steady_clock::now();
    MOE_RETURN_IF_ERROR(fn());
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  if (comm != nullptr && iterations > 0) {
    Tensor slowest = Tensor::from_vector<double>({iterations}, t);
    MOE_RETURN_IF_ERROR(comm->all_reduce(slowest, slowest, comm::ReduceOp::kMax));
    t.assign(slowest.data<double>(), slowest.data<double>() + iterations);
  }
  Timing out;
  out.iterations = iterations;
  if (t.empty()) return out;
  std::sort(t.begin(), t.end());
  out.median = t[t.size() / 2];
  out.min = t.front();
  out.mean = std::accumulate(t.begin(), t.end(), 0.0) / static_cast<double>(t.size());
  return out;
}

JsonLine::JsonLine(const std::string& bench) { str("bench", bench); }

JsonLine& JsonLine::num(const std::string& key, double value) {
  std::ostringstream os;
  os << std::setprecision(6) << value;
  fields_.emplace_back(key, os.str());
  return *this;
}

JsonLine& JsonLine::str(const std::string& key, const std::string& value) {
  std::string quoted = "\"";
  for (char c : value) {
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += (c == '\n' || c == '\t') ? ' ' : c;
  }
  fields_.emplace_back(key, quoted + "\"");
  return *this;
}

std::string JsonLine::dump() const {
  std::string out = "{";
  for (size_t i = 0; i < fields_.size(); ++i) {
    out += (i ? ", \"" : "\"") + fields_[i].first + "\": " + fields_[i].second;
  }
  return out + "}";
}

std::string environment_line(int world_size) {
  char host[256] = "?";
  gethostname(host, sizeof(host) - 1);
  const CpuInfo& cpu = cpu_info();
  const kernels::ref::BlasInfo& blas = kernels::ref::blas_info();
  JsonLine j("env");
  j.str("host", host)
      .num("cores", std::thread::hardware_concurrency())
      .str("cpu", cpu.description())
      .str("cpu_isa", cpu.isa_summary())
      .str("blas", blas.library + (blas.version.empty() ? "" : " " + blas.version))
      .str("blas_kernel", blas.kernel)
      .str("blas_kernel_chosen_by", blas.chosen_by);
  if (!blas.warning.empty()) j.str("blas_warning", blas.warning);
  j.num("world_size", world_size).num("cuda_devices", cuda_device_count());
#if defined(MOE_WITH_CUDA)
  // The cuBLAS a GPU run would load (base/cublas_library.h), or why it cannot (cublas_error).
  StatusOr<const CublasApi*> cublas = load_cublas();
  if (cublas.ok()) {
    j.str("cublas", (*cublas)->path);
  } else {
    j.str("cublas_error", cublas.status().message());
  }
#endif
#ifdef NDEBUG
  j.str("build", "optimised");
#else
  j.str("build", "NOT OPTIMISED: timings are meaningless");
#endif
  return j.dump();
}

Status check_one_of(const std::string& flag, const std::string& value,
                    const std::vector<std::string>& allowed) {
  if (std::find(allowed.begin(), allowed.end(), value) != allowed.end()) return Status::OK();
  std::string list;
  for (const std::string& a : allowed) list += (list.empty() ? "" : ", ") + a;
  return invalid_argument_error("--", flag, " ", value, " is not one of ", list,
                                did_you_mean(value, allowed));
}

StatusOr<Args> Args::parse(int argc, char** argv, const std::vector<std::string>& known) {
  Args a;
  for (int i = 0; i < argc; ++i) {
    std::string key = argv[i];
    if (key.rfind("--", 0) != 0)
      return invalid_argument_error("expected --key value, got '", key, "'");
    key = key.substr(2);
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      std::string list;
      for (const std::string& k : known) list += " --" + k;
      return invalid_argument_error("unknown option --", key, did_you_mean(key, known, "--"),
                                    "; the options:", list, " (--help: each with its default)");
    }
    if (i + 1 >= argc) return invalid_argument_error("--", key, " needs a value");
    a.values_[key] = argv[++i];
  }
  return a;
}

int64_t Args::get(const std::string& key, int64_t fallback) const {
  auto it = values_.find(key);
  return it == values_.end() ? fallback : std::strtoll(it->second.c_str(), nullptr, 10);
}

std::string Args::get_str(const std::string& key, const std::string& fallback) const {
  auto it = values_.find(key);
  return it == values_.end() ? fallback : it->second;
}

std::vector<int64_t> Args::get_list(const std::string& key, std::vector<int64_t> fallback) const {
  auto it = values_.find(key);
  if (it == values_.end()) return fallback;
  std::vector<int64_t> out;
  std::stringstream ss(it->second);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::strtoll(item.c_str(), nullptr, 10));
  return out;
}

}  // namespace moe::bench
