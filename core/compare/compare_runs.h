// A grid's runs from plan to summary, without processes: which runs a comparison makes (each a
// config, a run directory, a log and the `--set` overrides its trainer gets), what each finished
// run left behind (its stats.pb, its exit code, its log), and the files that summarise them
// (summary.md, runs.csv, curves.csv). momoe-compare (launcher/compare_main.cc) starts the runs.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "core/compare/compare_grid.h"

namespace moe {

// One training run of a grid.
struct GridRun {
  std::string variant;
  uint64_t seed = 0;
  bool gpu = false;    // trains with train.device = CUDA
  std::string config;  // the base config file
  std::string run_dir, log;
  std::vector<std::string> sets;  // KEY=VALUE overrides, in the order they apply
};

// Every (variant, seed) of the grid, variant-major, under out/runs/<variant>-seed<seed>. A CPU run
// gets parallel.threads = cpu_threads first (a grid or variant override still wins);
// variant_on_gpu says which variants train on a GPU.
std::vector<GridRun> plan_grid_runs(const CompareGrid& grid, const std::string& out,
                                    const std::map<std::string, bool>& variant_on_gpu,
                                    int64_t cpu_threads);

// The record of a run that has ended with exit_code: its stats.pb's summary; not ok, with the
// last error line of its log, when it failed.
CompareRun collect_grid_run(const GridRun& run, int exit_code);

// What a finished comparison is compared with (--baseline): a finished grid's rows and its name.
struct CompareBaseline {
  std::string label;  // "" = none
  std::vector<CompareRow> rows;
};

// The tables of a finished grid: the comparison and, with a baseline, the paired differences.
struct CompareTables {
  std::string table, against, balance;
};

// Writes out/summary.md (the table, the baseline section, the variants), out/runs.csv and
// out/curves.csv, each atomically, and returns the tables for the console.
StatusOr<CompareTables> write_comparison(const std::string& out, const CompareGrid& grid,
                                         const std::vector<CompareRun>& results,
                                         const std::vector<double>& target_losses,
                                         const CompareBaseline& baseline);

}  // namespace moe
