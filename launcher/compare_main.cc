// momoe-compare: trains every variant of a grid at every seed at the same budget (several runs at
// a time), then writes the comparison: a Markdown table and CSV (final clean and attacked
// perplexity, mean and spread over seeds; steps to reach given losses) and a loss-against-step
// plot with one band per variant.
//
//   momoe-compare                                   the "papers" grid (about 22 min on 2 cores)
//   momoe-compare --preset papers-ablations --baseline runs/compare --out runs/ablations
//                                                   each departure, paired with the papers grid
//   momoe-compare --results runs/capacity --baseline runs/compare
//                                                   two finished grids, paired by seed
//   momoe-compare --config configs/quickstart.pbtxt --seeds 1,2 --set train.steps=300
//                 --variant 'smoe model.arch=sgsgsg' --variant 'momentum model.arch=smsmsm'
//   momoe-compare --config base.pbtxt --grid my_grid.txt --out runs/my_comparison
//
// Each run is `momoe-train --fresh` in OUT/runs/<variant>-seed<seed>/ (its log beside it); the
// results are OUT/summary.md, OUT/runs.csv, OUT/curves.csv and OUT/loss.png. CPU runs share the
// cores (--jobs at a time, each with its slice of threads); GPU runs (train.device = CUDA) run one
// per visible GPU by default, each seeing only its own.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>
#include <thread>

#include "core/base/device.h"
#include "core/io/file_util.h"
#include "launcher/compare_grid.h"
#include "launcher/exit_status.h"
#include "launcher/flags.h"
#include "proto/stats_convert.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

std::string config_dir() {
  const char* env = std::getenv("MOMOE_CONFIG_DIR");
  return env != nullptr && *env != '\0' ? env : MOE_CONFIG_DIR;
}

// momoe-train next to this executable.
std::string trainer_path() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path beside = self.parent_path() / "momoe-train";
    if (fs::exists(beside)) return beside.string();
  }
  return "momoe-train";  // from PATH
}

StatusOr<std::vector<double>> parse_losses(const std::string& list) {
  std::vector<double> out;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !std::isfinite(v)) {
      return invalid_argument_error("--losses '", list, "': '", item, "' is not a number");
    }
    out.push_back(v);
  }
  return out;
}

struct Job {
  std::string variant;
  bool gpu = false;  // trains with train.device = CUDA
  uint64_t seed = 0;
  std::string run_dir, log;
  std::vector<std::string> argv;
};

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                        "0123456789_-+=.,/:@") == std::string::npos) {
    return s;
  }
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// gpu >= 0: the run sees only that GPU (CUDA_VISIBLE_DEVICES), so runs spread over the GPUs.
pid_t start(const Job& job, int gpu) {
  std::fflush(nullptr);  // or the child would write our buffered output again
  std::vector<char*> argv;
  for (const std::string& a : job.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    FILE* log = std::freopen(job.log.c_str(), "w", stdout);
    if (log != nullptr) ::dup2(::fileno(stdout), 2);
    if (gpu >= 0) setenv("CUDA_VISIBLE_DEVICES", std::to_string(gpu).c_str(), 1);
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "momoe-compare: cannot run %s: %s\n", argv[0], std::strerror(errno));
    ::_exit(127);
  }
  return pid;
}

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

// DIR/runs.csv of a finished momoe-compare.
StatusOr<std::vector<CompareRow>> read_runs_csv(const std::string& dir) {
  const std::string path = dir + "/runs.csv";
  StatusOr<std::string> text = io::read_file(path);
  if (!text.ok()) {
    return text.status().with_context(
        str_cat(dir, " is not a finished momoe-compare output (no readable runs.csv)"));
  }
  return parse_runs_csv(*text, path);
}

Status run(int argc, char** argv) {
  FlagParser flags;
  flags.value("config", "the base config (default: the preset's)");
  flags.value(
      "preset",
      "a built-in grid: papers (default without --grid/--variant: the papers' settings), "
      "papers-capacity (capacity 1.25, balance loss 0.01), papers-ablations (each departure "
      "from the papers alone), gpu-medium");
  flags.value("grid", "a grid file: one variant per line, NAME KEY=VALUE ...");
  flags.value("variant", "one variant, 'NAME KEY=VALUE ...' (repeatable)", true);
  flags.value("set", "KEY=VALUE override for every variant (repeatable)", true);
  flags.value("seeds", "comma-separated seeds (default 1,2)");
  flags.value("final-eval",
              "each run's final evaluation: both (default), subset, whole or none "
              "(subset skips the whole-split pass, the slow part of a small grid)");
  flags.value("losses", "comma-separated training losses to report steps-to-reach for");
  flags.value("jobs",
              "runs at a time (default: the number of cores; GPU runs: the number of GPUs)");
  flags.value("out", "output directory (default runs/compare)");
  flags.value("baseline",
              "a finished momoe-compare output directory to compare with: summary.md adds each "
              "variant against the baseline's variant of the same name, else of the name before "
              "its '+' (smoe+capacity against smoe), paired by seed (train both with the same "
              "base config, steps and --final-eval)");
  flags.value("results",
              "with --baseline: print the finished grid in this directory (its runs.csv) against "
              "the baseline; trains nothing, writes nothing");
  flags.switch_flag("dry-run", "print the runs and exit");
  flags.switch_flag("help", "show this help");
  MOE_RETURN_IF_ERROR(flags.parse(argc, argv));
  if (flags.has("help")) {
    std::printf(
        "usage: momoe-compare [flags]\n%s"
        "example: momoe-compare --config configs/quickstart.pbtxt --seeds 1,2 --set "
        "train.steps=300 --variant 'smoe model.arch=sgsgsg' --variant 'momentum "
        "model.arch=smsmsm' --final-eval subset --out runs/mine\n"
        "         momoe-compare --preset papers --out runs/papers\n"
        "         momoe-compare --preset papers-ablations --baseline runs/papers --out "
        "runs/ablations\n"
        "         momoe-compare --preset papers-capacity --out runs/capacity\n"
        "         momoe-compare --results runs/capacity --baseline runs/papers\n",
        flags.usage().c_str());
    return Status::OK();
  }
  // The grid to compare against, read before anything trains.
  std::vector<CompareRow> baseline;
  if (flags.has("baseline")) {
    MOE_ASSIGN_OR_RETURN(baseline, read_runs_csv(flags.get("baseline")));
  }
  if (flags.has("results")) {
    if (!flags.has("baseline")) {
      return invalid_argument_error(
          "--results compares a finished grid with --baseline DIR; give both");
    }
    for (const char* other : {"config", "preset", "grid", "variant", "set", "seeds", "final-eval",
                              "losses", "jobs", "out", "dry-run"}) {
      if (flags.has(other)) {
        return invalid_argument_error(
            "--results compares two finished grids and trains nothing: --", other,
            " has no effect with it");
      }
    }
    if (!flags.positional().empty()) {
      return invalid_argument_error("unexpected argument '", flags.positional()[0], "'");
    }
    MOE_ASSIGN_OR_RETURN(std::vector<CompareRow> rows, read_runs_csv(flags.get("results")));
    std::printf("%s against %s (paired by seed; differences are %s - %s):\n\n%s",
                flags.get("results").c_str(), flags.get("baseline").c_str(),
                flags.get("results").c_str(), flags.get("baseline").c_str(),
                baseline_markdown(rows, baseline, flags.get("baseline")).c_str());
    return Status::OK();
  }
  if (!flags.positional().empty()) {
    return invalid_argument_error("unexpected argument '", flags.positional()[0], "'");
  }

  CompareGrid grid;
  std::vector<double> targets;
  const bool custom = flags.has("grid") || flags.has("variant");
  if (!custom || flags.has("preset")) {
    MOE_ASSIGN_OR_RETURN(ComparePreset p, compare_preset(flags.get("preset", "papers")));
    grid.base_config = config_dir() + "/" + p.base_config;
    grid.common = p.common;
    grid.variants = p.variants;
    const std::string preset = flags.get("preset", "papers");
    if (preset == "papers" || preset == "papers-capacity" || preset == "papers-ablations") {
      targets = {6.0, 5.5, 5.25};
    }
  }
  if (flags.has("grid")) {
    MOE_ASSIGN_OR_RETURN(std::string text, io::read_file(flags.get("grid")));
    MOE_ASSIGN_OR_RETURN(grid.variants, parse_grid_text(text, flags.get("grid")));
  }
  if (flags.has("variant")) {
    if (!flags.has("grid")) grid.variants.clear();  // --variant replaces a preset's list
    for (const std::string& spec : flags.get_all("variant")) {
      MOE_ASSIGN_OR_RETURN(CompareVariant v, parse_variant(spec));
      grid.variants.push_back(std::move(v));
    }
  }
  if (flags.has("config")) grid.base_config = flags.get("config");
  if (grid.base_config.empty()) {
    return invalid_argument_error(
        "--config is required with --grid or --variant (the base every "
        "variant overrides)");
  }
  for (const std::string& s : flags.get_all("set")) grid.common.push_back(s);
  if (flags.has("final-eval")) {
    const std::string f = flags.get("final-eval");
    const char* value = f == "both"     ? "BOTH"
                        : f == "subset" ? "SUBSET"
                        : f == "whole"  ? "WHOLE"
                        : f == "none"   ? "NONE"
                                        : nullptr;
    if (value == nullptr) {
      return invalid_argument_error("--final-eval ", f, " is not one of both, subset, whole, none");
    }
    grid.common.push_back(str_cat("train.final_eval=", value));
  }
  MOE_ASSIGN_OR_RETURN(grid.seeds, parse_seeds(flags.get("seeds", "1,2")));
  if (flags.has("losses")) {
    MOE_ASSIGN_OR_RETURN(targets, parse_losses(flags.get("losses")));
  }
  if (flags.has("baseline")) {
    std::vector<std::string> names;
    for (const CompareVariant& v : grid.variants) names.push_back(v.name);
    const std::vector<std::string> unpaired = unpaired_variants(names, grid.seeds, baseline);
    std::string list;
    for (const std::string& n : unpaired) list += " " + n;
    if (unpaired.size() == names.size()) {
      return invalid_argument_error("--baseline ", flags.get("baseline"),
                                    ": no variant of this grid pairs with a finished run there at "
                                    "these seeds (same name, or the name before '+'):",
                                    list);
    }
    if (!unpaired.empty()) {
      std::fprintf(stderr, "momoe-compare: no baseline run in %s for:%s\n",
                   flags.get("baseline").c_str(), list.c_str());
    }
  }
  // Every variant resolves and shares one budget before anything runs.
  bool on_gpu = false;
  std::map<std::string, bool> variant_on_gpu;
  for (uint64_t seed : grid.seeds) {
    MOE_ASSIGN_OR_RETURN(std::vector<RunConfig> resolved, resolve_grid(grid, seed));
    for (size_t i = 0; i < resolved.size() && i < grid.variants.size(); ++i) {
      const bool gpu = resolved[i].train.device == DeviceKind::kCuda;
      variant_on_gpu[grid.variants[i].name] = gpu;
      on_gpu |= gpu;
    }
  }
  // GPU runs: one at a time per visible GPU (each run sees its own, unless CUDA_VISIBLE_DEVICES
  // was set for us); CPU runs share the cores.
  const int gpus =
      on_gpu && std::getenv("CUDA_VISIBLE_DEVICES") == nullptr ? cuda_device_count() : 0;
  const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  MOE_ASSIGN_OR_RETURN(int64_t jobs, flags.get_int("jobs", on_gpu ? std::max(1, gpus) : cores));
  if (jobs < 1) return invalid_argument_error("--jobs ", jobs, " must be >= 1");
  const std::string out = flags.get("out", "runs/compare");

  if (fs::exists(out + "/summary.md")) {
    return failed_precondition_error(out,
                                     " already holds a comparison (summary.md); choose another "
                                     "--out or move it away");
  }

  std::vector<Job> queue;
  for (const CompareVariant& v : grid.variants) {
    for (uint64_t seed : grid.seeds) {
      Job j;
      j.variant = v.name;
      j.gpu = variant_on_gpu[v.name];
      j.seed = seed;
      j.run_dir = str_cat(out, "/runs/", v.name, "-seed", seed);
      j.log = j.run_dir + ".log";
      j.argv = {trainer_path(), "--config", v.config.empty() ? grid.base_config : v.config,
                "--run-dir",    j.run_dir,  "--fresh"};
      std::vector<std::string> sets = grid.common;
      sets.insert(sets.end(), v.overrides.begin(), v.overrides.end());
      sets.push_back(str_cat("train.seed=", seed));
      // CPU runs share the cores: each gets its slice of threads (unless the grid sets them).
      if (!j.gpu) {
        sets.insert(sets.begin(), str_cat("parallel.threads=", std::max<int64_t>(1, cores / jobs)));
      }
      for (const std::string& s : sets) {
        j.argv.push_back("--set");
        j.argv.push_back(s);
      }
      queue.push_back(std::move(j));
    }
  }
  std::printf("momoe-compare: %zu variants x %zu seeds = %zu runs, %lld at a time, in %s\n",
              grid.variants.size(), grid.seeds.size(), queue.size(), static_cast<long long>(jobs),
              out.c_str());
  if (flags.has("dry-run")) {
    for (const Job& j : queue) {
      std::string line;
      for (const std::string& a : j.argv) line += (line.empty() ? "" : " ") + shell_quote(a);
      std::printf("%s\n", line.c_str());
    }
    return Status::OK();
  }
  std::error_code ec;
  fs::create_directories(out + "/runs", ec);
  if (ec) return internal_error("cannot create ", out, "/runs: ", ec.message());
  // One BLAS thread per run: the runs themselves fill the cores.
  setenv("OPENBLAS_NUM_THREADS", "1", 0);
  setenv("OMP_NUM_THREADS", "1", 0);

  std::map<pid_t, size_t> running;
  std::map<pid_t, int> gpu_of;
  std::vector<int> runs_on_gpu(std::max(1, gpus), 0);
  std::vector<int> exit_codes(queue.size(), -1);
  size_t next = 0, done = 0;
  while (done < queue.size()) {
    while (next < queue.size() && static_cast<int64_t>(running.size()) < jobs) {
      // The least busy GPU (none for CPU runs).
      const int gpu =
          gpus > 0 && queue[next].gpu
              ? static_cast<int>(std::min_element(runs_on_gpu.begin(), runs_on_gpu.end()) -
                                 runs_on_gpu.begin())
              : -1;
      const pid_t pid = start(queue[next], gpu);
      if (pid < 0) return internal_error("fork failed: ", std::strerror(errno));
      running[pid] = next++;
      if (gpu >= 0) {
        gpu_of[pid] = gpu;
        ++runs_on_gpu[gpu];
      }
    }
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      return internal_error("waitpid: ", std::strerror(errno));
    }
    auto it = running.find(pid);
    if (it == running.end()) continue;
    const size_t i = it->second;
    running.erase(it);
    if (auto g = gpu_of.find(pid); g != gpu_of.end()) {
      --runs_on_gpu[g->second];
      gpu_of.erase(g);
    }
    exit_codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    ++done;
    std::printf("[%zu/%zu] %s seed %llu: %s\n", done, queue.size(), queue[i].variant.c_str(),
                static_cast<unsigned long long>(queue[i].seed),
                exit_codes[i] == 0 ? "done" : str_cat("failed (exit ", exit_codes[i], ")").c_str());
    std::fflush(stdout);
  }

  std::vector<CompareRun> results;
  int failed = 0;
  for (size_t i = 0; i < queue.size(); ++i) {
    const Job& j = queue[i];
    CompareRun r;
    StatusOr<StatsFileContents> stats = read_stats_file(j.run_dir + "/stats.pb");
    if (stats.ok()) {
      r = summarize_run(j.variant, j.seed, stats->steps);
    } else {
      r.variant = j.variant;
      r.seed = j.seed;
      r.error = stats.status().to_string();
    }
    if (exit_codes[i] != 0) {
      r.ok = false;
      r.error = last_error_line(j.log);
    }
    if (!r.ok) {
      ++failed;
      std::fprintf(stderr, "momoe-compare: %s seed %llu failed: %s\n", j.variant.c_str(),
                   static_cast<unsigned long long>(j.seed), r.error.c_str());
    }
    results.push_back(std::move(r));
  }
  const std::string table = compare_markdown(grid.variants, results, targets);
  std::ostringstream md;
  md << "# momoe-compare\n\nBase config `" << grid.base_config << "`";
  for (const std::string& s : grid.common) md << " `--set " << s << "`";
  md << "; seeds";
  for (uint64_t s : grid.seeds) md << " " << s;
  md << ". Perplexities are the final evaluation of each run (mean +- sample standard deviation "
        "over seeds); steps to a loss use the mean training loss of the last 10 steps.\n\n"
     << table << "\n";
  const std::string against =
      flags.has("baseline")
          ? baseline_markdown(compare_rows(results), baseline, flags.get("baseline"))
          : std::string();
  if (flags.has("baseline")) {
    md << "## Against " << flags.get("baseline")
       << "\n\nPaired by seed; differences are this grid's minus the baseline's (mean +- sample "
          "standard deviation over the paired seeds).\n\n"
       << against << "\n";
  }
  md << variants_markdown(grid.variants);
  MOE_RETURN_IF_ERROR(io::write_file_atomic(out + "/summary.md", md.str()));
  MOE_RETURN_IF_ERROR(
      io::write_file_atomic(out + "/runs.csv", compare_csv(grid.variants, results, targets)));
  MOE_RETURN_IF_ERROR(io::write_file_atomic(out + "/curves.csv", curves_csv(results)));
  std::printf("\n%s\n", table.c_str());
  if (flags.has("baseline")) {
    std::printf("against %s:\n\n%s\n", flags.get("baseline").c_str(), against.c_str());
  }
  std::printf("wrote %s/summary.md, runs.csv, curves.csv\n", out.c_str());
  // The first python3 with matplotlib: PATH's, else the system's (a pyenv or venv python on PATH
  // often lacks it).
  const std::string args =
      str_cat(" ", shell_quote(MOE_PLOT_COMPARE_SCRIPT), " ", shell_quote(out + "/curves.csv"), " ",
              shell_quote(out + "/loss.png"));
  bool plotted = false;
  for (const char* python : {"python3", "/usr/bin/python3"}) {
    if (std::system((python + args + " > /dev/null 2>&1").c_str()) == 0) {
      plotted = true;
      break;
    }
  }
  if (plotted) {
    std::printf("wrote %s/loss.png\n", out.c_str());
  } else {
    std::printf("no plot (needs python3 with matplotlib): python3%s\n", args.c_str());
  }
  if (failed > 0) return internal_error(failed, " of ", queue.size(), " runs failed (see above)");
  return Status::OK();
}

}  // namespace
}  // namespace moe

int main(int argc, char** argv) {
  const moe::Status s = moe::run(argc, argv);
  return s.ok() ? 0 : moe::exit_with(s);
}
