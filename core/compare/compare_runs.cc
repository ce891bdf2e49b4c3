#include "core/compare/compare_runs.h"

#include <sstream>

#include "io/file_util.h"
#include "proto/stats_convert.h"

namespace moe {
namespace {

// The last line of a log that says why a run failed.
std::string last_error_line(const std::string& log) {
  StatusOr<std::string> text = io::read_file(log);
  if (!text.ok()) return "no log";
  std::istringstream in(*text);
  std::string line, last;
  while (std::getline(in, line)) {
    if (line.find(" E ") != std::string::npos || line.find("error") != std::string::npos ||
        line.find("ERROR") != std::string::npos || line.find("INVALID") != std::string::npos) {
      last = line;
    }
  }
  return last.empty() ? "see " + log : last;
}

}  // namespace

std::vector<GridRun> plan_grid_runs(const CompareGrid& grid, const std::string& out,
                                    const std::map<std::string, bool>& variant_on_gpu,
                                    int64_t cpu_threads) {
  std::vector<GridRun> runs;
  for (const CompareVariant& v : grid.variants) {
    for (uint64_t seed : grid.seeds) {
      GridRun r;
      r.variant = v.name;
      const auto gpu = variant_on_gpu.find(v.name);
      r.gpu = gpu != variant_on_gpu.end() && gpu->second;
      r.seed = seed;
      r.config = v.config.empty() ? grid.base_config : v.config;
      r.run_dir = str_cat(out, "/runs/", v.name, "-seed", seed);
      r.log = r.run_dir + ".log";
      // CPU runs share the cores: each gets its slice of threads (unless the grid sets them).
      if (!r.gpu) r.sets.push_back(str_cat("parallel.threads=", cpu_threads));
      r.sets.insert(r.sets.end(), grid.common.begin(), grid.common.end());
      r.sets.insert(r.sets.end(), v.overrides.begin(), v.overrides.end());
      r.sets.push_back(str_cat("train.seed=", seed));
      runs.push_back(std::move(r));
    }
  }
  return runs;
}

CompareRun collect_grid_run(const GridRun& run, int exit_code) {
  CompareRun r;
  StatusOr<StatsFileContents> stats = read_stats_file(run.run_dir + "/stats.pb");
  if (stats.ok()) {
    r = summarize_run(run.variant, run.seed, stats->steps);
  } else {
    r.variant = run.variant;
    r.seed = run.seed;
    r.error = stats.status().to_string();
  }
  if (exit_code != 0) {
    r.ok = false;
    r.error = last_error_line(run.log);
  }
  return r;
}

StatusOr<CompareTables> write_comparison(const std::string& out, const CompareGrid& grid,
                                         const std::vector<CompareRun>& results,
                                         const std::vector<double>& target_losses,
                                         const CompareBaseline& baseline) {
  CompareTables tables;
  tables.table = compare_markdown(grid.variants, results, target_losses);
  std::ostringstream md;
  md << "# momoe-compare\n\nBase config `" << grid.base_config << "`";
  for (const std::string& s : grid.common) md << " `--set " << s << "`";
  md << "; seeds";
  for (uint64_t s : grid.seeds) md << " " << s;
  md << ". Perplexities are the final evaluation of each run (mean +- sample standard deviation "
        "over seeds); steps to a loss use the mean training loss of the last 10 steps.\n\n"
     << tables.table << "\n";
  tables.balance = balance_markdown(grid.variants, results);
  md << "## Balance\n\nOver each run's last " << kBalanceSteps
     << " training steps, averaged over the MoE layers: the busiest expert's load over the mean "
        "load, the share of assignments dropped by the capacity, and loss-free balancing's bias "
        "spread (the largest bias minus the smallest).\n\n"
     << tables.balance << "\n";
  if (!baseline.label.empty()) {
    tables.against = baseline_markdown(compare_rows(results), baseline.rows, baseline.label);
    md << "## Against " << baseline.label
       << "\n\nPaired by seed; differences are this grid's minus the baseline's (mean +- sample "
          "standard deviation over the paired seeds).\n\n"
       << tables.against << "\n";
  }
  md << variants_markdown(grid.variants);
  MOE_RETURN_IF_ERROR(io::write_file_atomic(out + "/summary.md", md.str()));
  MOE_RETURN_IF_ERROR(
      io::write_file_atomic(out + "/runs.csv", compare_csv(grid.variants, results, target_losses)));
  MOE_RETURN_IF_ERROR(io::write_file_atomic(out + "/curves.csv", curves_csv(results)));
  return tables;
}

}  // namespace moe
