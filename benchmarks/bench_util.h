// Shared pieces of momoe-bench: wall-clock timing with warm-ups and medians, JSON-line output, and
// the environment header every benchmark prints first.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "comm/communicator.h"

namespace moe::bench {

struct Timing {
  double median = 0, min = 0, mean = 0;  // seconds
  int iterations = 0;
};
// Runs fn `warmup` times untimed, then `iterations` times timed. With a communicator (collective
// over it): every timed iteration starts after a barrier and counts as the slowest rank's time.
StatusOr<Timing> time_it(int warmup, int iterations, const std::function<Status()>& fn,
                         comm::Communicator* comm = nullptr);

// One JSON object per line: {"bench": name, key: value, ...}. Values are numbers or strings.
class JsonLine {
 public:
  explicit JsonLine(const std::string& bench);
  JsonLine& num(const std::string& key, double value);
  JsonLine& str(const std::string& key, const std::string& value);
  std::string dump() const;

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

// {"bench": "env", host, cores, the CPU and its vector ISA, the BLAS library, version and kernel
// (and blas_warning when the kernel does not use the CPU's ISA), world size, build type (a
// warning when the build is not optimised)}. Loads the BLAS (blas_library.h) if it is not yet.
std::string environment_line(int world_size);

// "--key value" pairs after the subcommand; unknown keys are an error naming them.
class Args {
 public:
  static StatusOr<Args> parse(int argc, char** argv, const std::vector<std::string>& known);
  int64_t get(const std::string& key, int64_t fallback) const;
  std::string get_str(const std::string& key, const std::string& fallback) const;
  std::vector<int64_t> get_list(const std::string& key, std::vector<int64_t> fallback) const;

 private:
  std::map<std::string, std::string> values_;
};

}  // namespace moe::bench
