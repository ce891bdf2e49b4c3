// momoe-compare: trains every variant of a grid at every seed at the same budget (several runs at
// a time), then writes the comparison: a Markdown table and CSV (final clean and attacked
// perplexity, mean and spread over seeds; steps to reach given losses) and a loss-against-step
// plot with one band per variant.
//
//   momoe-compare --preset papers                   the "papers" grid (about 22 min on 2 cores)
//   momoe-compare --preset papers-ablations --baseline runs/compare --out runs/ablations
//                                                   each departure, paired with the papers grid
//   momoe-compare --results runs/capacity --baseline runs/compare
//                                                   two finished grids, paired by seed
//   momoe-compare --config configs/quickstart.pbtxt --seeds 1,2 --set train.steps=300
//                 --variant 'smoe model.arch=sgsgsg' --variant 'momentum model.arch=smsmsm'
//   momoe-compare --config base.pbtxt --grid my_grid.txt --out runs/my_comparison
//
// A grid is always chosen explicitly (--preset, --grid, --variant or --results): with none of them
// momoe-compare trains nothing and writes nothing, and without arguments it prints its usage.
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

#include "base/device.h"
#include "core/compare/compare_grid.h"
#include "core/compare/compare_runs.h"
#include "io/file_util.h"
#include "launcher/exit_status.h"
#include "launcher/flags.h"

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

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                        "0123456789_-+=.,/:@") == std::string::npos) {
    return s;
  }
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// The momoe-train command line of one run.
std::vector<std::string> trainer_argv(const GridRun& run) {
  std::vector<std::string> argv = {trainer_path(), "--config",  run.config,
                                   "--run-dir",    run.run_dir, "--fresh"};
  for (const std::string& s : run.sets) {
    argv.push_back("--set");
    argv.push_back(s);
  }
  return argv;
}

// gpu >= 0: the run sees only that GPU (CUDA_VISIBLE_DEVICES), so runs spread over the GPUs.
pid_t start(const GridRun& run, int gpu) {
  const std::vector<std::string> args = trainer_argv(run);
  std::fflush(nullptr);  // or the child would write our buffered output again
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    FILE* log = std::freopen(run.log.c_str(), "w", stdout);
    if (log != nullptr) ::dup2(::fileno(stdout), 2);
    if (gpu >= 0) setenv("CUDA_VISIBLE_DEVICES", std::to_string(gpu).c_str(), 1);
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "momoe-compare: cannot run %s: %s\n", argv[0], std::strerror(errno));
    ::_exit(127);
  }
  return pid;
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

void define_flags(FlagParser& flags) {
  flags.value("config", "the base config (default: the preset's)");
  flags.value(
      "preset",
      "a built-in grid: papers (the papers' settings), "
      "papers-capacity (capacity 1.25, balance loss 0.01), papers-ablations (each departure "
      "from the papers alone), gpu-medium, modern (the recipes of configs/modern beside the "
      "seeds' routers, on the block of current models)");
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
}

// What to pass to train the papers grid: the usage's last line, and the refusal of a command line
// that chooses no grid.
constexpr char kChooseGrid[] =
    "choose the grid: --preset papers trains the papers grid (7 variants x 2 seeds = 14 runs, "
    "about 22 minutes on every core, into runs/compare; add --dry-run to list its runs first), "
    "or --preset NAME, --grid FILE, --variant SPEC, --results DIR";

FlagParser compare_flags() {
  FlagParser flags(
      "usage: momoe-compare (--preset NAME | --grid FILE | --variant SPEC... | --results DIR) "
      "[flags]\n",
      str_cat("example: momoe-compare --config configs/quickstart.pbtxt --seeds 1,2 --set "
              "train.steps=300 --variant 'smoe model.arch=sgsgsg' --variant 'momentum "
              "model.arch=smsmsm' --final-eval subset --out runs/mine\n"
              "         momoe-compare --preset papers --out runs/papers\n"
              "         momoe-compare --preset papers-ablations --baseline runs/papers --out "
              "runs/ablations\n"
              "         momoe-compare --preset papers-capacity --out runs/capacity\n"
              "         momoe-compare --results runs/capacity --baseline runs/papers\n",
              kChooseGrid, "\n"));
  define_flags(flags);
  return flags;
}

// --results DIR --baseline DIR: two finished grids, printed side by side; trains nothing.
Status print_results(const FlagParser& flags, const CompareBaseline& baseline) {
  if (baseline.label.empty()) {
    return invalid_argument_error(
        "--results compares a finished grid with --baseline DIR; give both");
  }
  for (const char* other : {"config", "preset", "grid", "variant", "set", "seeds", "final-eval",
                            "losses", "jobs", "out", "dry-run"}) {
    if (flags.has(other)) {
      return invalid_argument_error("--results compares two finished grids and trains nothing: --",
                                    other, " has no effect with it");
    }
  }
  if (!flags.positional().empty()) {
    return invalid_argument_error("unexpected argument '", flags.positional()[0], "'");
  }
  MOE_ASSIGN_OR_RETURN(std::vector<CompareRow> rows, read_runs_csv(flags.get("results")));
  std::printf("%s against %s (paired by seed; differences are %s - %s):\n\n%s",
              flags.get("results").c_str(), baseline.label.c_str(), flags.get("results").c_str(),
              baseline.label.c_str(),
              baseline_markdown(rows, baseline.rows, baseline.label).c_str());
  return Status::OK();
}

// train.final_eval's value for --final-eval.
StatusOr<std::string> final_eval_value(const std::string& flag) {
  if (flag == "both") return std::string("BOTH");
  if (flag == "subset") return std::string("SUBSET");
  if (flag == "whole") return std::string("WHOLE");
  if (flag == "none") return std::string("NONE");
  return invalid_argument_error("--final-eval ", flag, " is not one of both, subset, whole, none");
}

// The grid the flags describe (a preset, a grid file, --variant specs; --config, --set, --seeds,
// --final-eval) and the losses to report steps-to-reach for.
Status grid_from_flags(const FlagParser& flags, CompareGrid* grid, std::vector<double>* targets) {
  const bool custom = flags.has("grid") || flags.has("variant");
  if (!custom || flags.has("preset")) {
    const std::string preset = flags.get("preset", "papers");
    MOE_ASSIGN_OR_RETURN(ComparePreset p, compare_preset(preset));
    const CompareGrid preset_grid = grid_of_preset(p, config_dir());
    grid->base_config = preset_grid.base_config;
    grid->common = preset_grid.common;
    grid->variants = preset_grid.variants;
    if (preset == "papers" || preset == "papers-capacity" || preset == "papers-ablations" ||
        preset == "modern") {
      *targets = {6.0, 5.5, 5.25};
    }
  }
  if (flags.has("grid")) {
    MOE_ASSIGN_OR_RETURN(std::string text, io::read_file(flags.get("grid")));
    MOE_ASSIGN_OR_RETURN(grid->variants, parse_grid_text(text, flags.get("grid")));
  }
  if (flags.has("variant")) {
    if (!flags.has("grid")) grid->variants.clear();  // --variant replaces a preset's list
    for (const std::string& spec : flags.get_all("variant")) {
      MOE_ASSIGN_OR_RETURN(CompareVariant v, parse_variant(spec));
      grid->variants.push_back(std::move(v));
    }
  }
  if (flags.has("config")) grid->base_config = flags.get("config");
  if (grid->base_config.empty()) {
    return invalid_argument_error(
        "--config is required with --grid or --variant (the base every variant overrides)");
  }
  for (const std::string& s : flags.get_all("set")) grid->common.push_back(s);
  if (flags.has("final-eval")) {
    MOE_ASSIGN_OR_RETURN(std::string value, final_eval_value(flags.get("final-eval")));
    grid->common.push_back(str_cat("train.final_eval=", value));
  }
  MOE_ASSIGN_OR_RETURN(grid->seeds, parse_seeds(flags.get("seeds", "1,2")));
  if (flags.has("losses")) {
    MOE_ASSIGN_OR_RETURN(*targets, parse_losses(flags.get("losses")));
  }
  return Status::OK();
}

// Refuses a baseline no variant pairs with; names the variants that have no pair.
Status check_pairing(const CompareGrid& grid, const CompareBaseline& baseline) {
  std::vector<std::string> names;
  for (const CompareVariant& v : grid.variants) names.push_back(v.name);
  const std::vector<std::string> unpaired = unpaired_variants(names, grid.seeds, baseline.rows);
  std::string list;
  for (const std::string& n : unpaired) list += " " + n;
  if (unpaired.size() == names.size()) {
    return invalid_argument_error("--baseline ", baseline.label,
                                  ": no variant of this grid pairs with a finished run there at "
                                  "these seeds (same name, or the name before '+'):",
                                  list);
  }
  if (!unpaired.empty()) {
    std::fprintf(stderr, "momoe-compare: no baseline run in %s for:%s\n", baseline.label.c_str(),
                 list.c_str());
  }
  return Status::OK();
}

// Which variants train on a GPU, once every variant resolves and shares one budget.
StatusOr<std::map<std::string, bool>> variants_on_gpu(const CompareGrid& grid) {
  std::map<std::string, bool> on_gpu;
  for (uint64_t seed : grid.seeds) {
    MOE_ASSIGN_OR_RETURN(std::vector<RunConfig> resolved, resolve_grid(grid, seed));
    for (size_t i = 0; i < resolved.size() && i < grid.variants.size(); ++i) {
      on_gpu[grid.variants[i].name] = resolved[i].train.device == DeviceKind::kCuda;
    }
  }
  return on_gpu;
}

// Runs every run, `jobs` at a time (GPU runs on the least busy of `gpus` GPUs when gpus > 0), and
// returns each one's exit code.
StatusOr<std::vector<int>> run_all(const std::vector<GridRun>& queue, int64_t jobs, int gpus) {
  std::map<pid_t, size_t> running;
  std::map<pid_t, int> gpu_of;
  std::vector<int> runs_on_gpu(std::max(1, gpus), 0);
  std::vector<int> exit_codes(queue.size(), -1);
  size_t next = 0, done = 0;
  while (done < queue.size()) {
    while (next < queue.size() && static_cast<int64_t>(running.size()) < jobs) {
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
  return exit_codes;
}

// out/loss.png by plot_compare.py under the first python3 with matplotlib: PATH's, else the
// system's (a pyenv or venv python on PATH often lacks it).
void plot(const std::string& out) {
  const std::string args =
      str_cat(" ", shell_quote(MOE_PLOT_COMPARE_SCRIPT), " ", shell_quote(out + "/curves.csv"), " ",
              shell_quote(out + "/loss.png"));
  for (const char* python : {"python3", "/usr/bin/python3"}) {
    if (std::system((python + args + " > /dev/null 2>&1").c_str()) == 0) {
      std::printf("wrote %s/loss.png\n", out.c_str());
      return;
    }
  }
  std::printf("no plot (needs python3 with matplotlib): python3%s\n", args.c_str());
}

// Trains the planned runs, then summarises them into `out`.
Status train_and_summarise(const CompareGrid& grid, const std::vector<GridRun>& queue, int64_t jobs,
                           int gpus, const std::string& out, const std::vector<double>& targets,
                           const CompareBaseline& baseline) {
  std::error_code ec;
  fs::create_directories(out + "/runs", ec);
  if (ec) return internal_error("cannot create ", out, "/runs: ", ec.message());
  // One BLAS thread per run: the runs themselves fill the cores.
  setenv("OPENBLAS_NUM_THREADS", "1", 0);
  setenv("OMP_NUM_THREADS", "1", 0);
  MOE_ASSIGN_OR_RETURN(std::vector<int> exit_codes, run_all(queue, jobs, gpus));
  std::vector<CompareRun> results;
  int failed = 0;
  for (size_t i = 0; i < queue.size(); ++i) {
    results.push_back(collect_grid_run(queue[i], exit_codes[i]));
    if (!results.back().ok) {
      ++failed;
      std::fprintf(stderr, "momoe-compare: %s seed %llu failed: %s\n", queue[i].variant.c_str(),
                   static_cast<unsigned long long>(queue[i].seed), results.back().error.c_str());
    }
  }
  MOE_ASSIGN_OR_RETURN(CompareTables tables,
                       write_comparison(out, grid, results, targets, baseline));
  std::printf("\n%s\n%s\n", tables.table.c_str(), tables.balance.c_str());
  if (!baseline.label.empty()) {
    std::printf("against %s:\n\n%s\n", baseline.label.c_str(), tables.against.c_str());
  }
  std::printf("wrote %s/summary.md, runs.csv, curves.csv\n", out.c_str());
  plot(out);
  if (failed > 0) return internal_error(failed, " of ", queue.size(), " runs failed (see above)");
  return Status::OK();
}

Status run(const FlagParser& flags) {
  if (!flags.has("preset") && !flags.has("grid") && !flags.has("variant") &&
      !flags.has("results")) {
    return invalid_argument_error("momoe-compare trains no grid it is not given: ", kChooseGrid);
  }
  // The grid to compare against, read before anything trains.
  CompareBaseline baseline;
  if (flags.has("baseline")) {
    baseline.label = flags.get("baseline");
    MOE_ASSIGN_OR_RETURN(baseline.rows, read_runs_csv(baseline.label));
  }
  if (flags.has("results")) return print_results(flags, baseline);
  if (!flags.positional().empty()) {
    return invalid_argument_error("unexpected argument '", flags.positional()[0], "'");
  }
  CompareGrid grid;
  std::vector<double> targets;
  MOE_RETURN_IF_ERROR(grid_from_flags(flags, &grid, &targets));
  if (!baseline.label.empty()) MOE_RETURN_IF_ERROR(check_pairing(grid, baseline));
  MOE_ASSIGN_OR_RETURN(auto on_gpu, variants_on_gpu(grid));
  const bool any_gpu = std::any_of(on_gpu.begin(), on_gpu.end(), [](auto& v) { return v.second; });
  // GPU runs: one at a time per visible GPU (each run sees its own, unless CUDA_VISIBLE_DEVICES
  // was set for us); CPU runs share the cores.
  const int gpus =
      any_gpu && std::getenv("CUDA_VISIBLE_DEVICES") == nullptr ? cuda_device_count() : 0;
  const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  MOE_ASSIGN_OR_RETURN(int64_t jobs, flags.get_int("jobs", any_gpu ? std::max(1, gpus) : cores));
  if (jobs < 1) return invalid_argument_error("--jobs ", jobs, " must be >= 1");
  const std::string out = flags.get("out", "runs/compare");
  if (fs::exists(out + "/summary.md")) {
    return failed_precondition_error(out,
                                     " already holds a comparison (summary.md); choose another "
                                     "--out or move it away");
  }
  const std::vector<GridRun> queue =
      plan_grid_runs(grid, out, on_gpu, std::max<int64_t>(1, cores / jobs));
  std::printf("momoe-compare: %zu variants x %zu seeds = %zu runs, %lld at a time, in %s\n",
              grid.variants.size(), grid.seeds.size(), queue.size(), static_cast<long long>(jobs),
              out.c_str());
  if (flags.has("dry-run")) {
    for (const GridRun& r : queue) {
      std::string line;
      for (const std::string& a : trainer_argv(r))
        line += (line.empty() ? "" : " ") + shell_quote(a);
      std::printf("%s\n", line.c_str());
    }
    return Status::OK();
  }
  return train_and_summarise(grid, queue, jobs, gpus, out, targets, baseline);
}

}  // namespace
}  // namespace moe

// No arguments: the usage on stderr and exit 2, since the grids are long and write much.
int main(int argc, char** argv) {
  moe::FlagParser flags = moe::compare_flags();
  if (argc < 2) {
    std::fputs(flags.usage().c_str(), stderr);
    return moe::kExitUserError;
  }
  if (std::optional<int> code = flags.parse_or_exit_code(argc, argv)) return *code;
  const moe::Status s = moe::run(flags);
  return s.ok() ? 0 : moe::exit_with(s);
}
