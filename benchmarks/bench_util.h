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

// A benchmark checked and ready to run. Each subcommand's entry point (momoe_bench.cc) checks
// every flag and value before it measures or prints anything (bad input: kInvalidArgument, which
// momoe-bench prints alone and exits 2 on) and returns its run; momoe-bench then prints the
// environment line and runs it.
using BenchRun = std::function<Status()>;

// kInvalidArgument unless `value` of --`flag` is one of `allowed` ("--preset quickstrat is not one
// of quickstart, smoe-medium, gpu-large, all (did you mean quickstart?)").
Status check_one_of(const std::string& flag, const std::string& value,
                    const std::vector<std::string>& allowed);

// "--key value" pairs after the subcommand; an unknown key is an error naming it, the closest
// known keys and every known key.
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
