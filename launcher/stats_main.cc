// momoe-stats: reads RUN_DIR/stats.pb (length-delimited StepStats written by the coordinator).
//
//   momoe-stats RUN_DIR                  summary table per MoE layer (last --window steps)
//   momoe-stats RUN_DIR --csv FILE       one row per step and layer
//   momoe-stats RUN_DIR --json FILE      every record as JSON lines
//   momoe-stats RUN_DIR --follow         print each new step as the run writes it (Ctrl-C ends)
//   momoe-stats RUN_DIR --plot out.png   loss/perplexity curves and per-layer expert-load heatmaps
//                                        (python3 with matplotlib; see plot_stats.py)
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <thread>

#include "base/check.h"
#include "base/logging.h"
#include "launcher/exit_status.h"
#include "launcher/flags.h"
#include "launcher/stats_export.h"
#include "proto/stats_convert.h"

namespace moe {
namespace {

int fail(const Status& s) { return exit_with(s); }

std::string stats_path(const std::string& arg) {
  return std::filesystem::is_directory(arg) ? arg + "/stats.pb" : arg;
}

void warn_damage(const std::string& path, const StatsFileContents& c) {
  if (c.damaged.empty()) return;
  std::string ranges;
  for (const auto& [at, bytes] : c.damaged) {
    ranges += str_cat(ranges.empty() ? "" : ", ", bytes, " bytes at byte ", at);
  }
  if (c.format == 1) {
    log_warning(path, ": the record at byte ", c.damaged_at, " does not parse; showing the ",
                c.steps.size(),
                " records before it (a format-1 file has no checksums to resync on)");
  } else {
    log_warning(path, ": skipped ", c.damaged.size(), " damaged range(s) (", ranges, "); the ",
                c.steps.size(), " intact records around them are shown");
  }
}

// Prints each new record as the run appends it. A file that shrinks or is replaced (a new run
// started with --fresh, a torn record cut off) is read again from its start, with a note.
Status follow(const std::string& path, double poll_seconds, int64_t max_polls) {
  int64_t offset = 0;
  uint64_t inode = 0;
  bool warned = false;
  bool waiting = false;
  for (int64_t poll = 0; max_polls <= 0 || poll < max_polls; ++poll) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0 && !waiting) {
      // A run that has not written its first record yet: say so once.
      std::cout << "momoe-stats: waiting for " << path << " to appear" << std::endl;
      waiting = true;
    }
    if (::stat(path.c_str(), &st) == 0) {
      waiting = false;
      const bool replaced = inode != 0 && static_cast<uint64_t>(st.st_ino) != inode;
      if (replaced || st.st_size < offset) {
        std::cout << "momoe-stats: " << path << (replaced ? " was replaced" : " shrank")
                  << "; reading it again from the start" << std::endl;
        offset = 0;
        warned = false;
      }
      inode = static_cast<uint64_t>(st.st_ino);
      MOE_ASSIGN_OR_RETURN(StatsFileContents c, read_stats_file(path, offset));
      for (const StepStatsInfo& s : c.steps) {
        if (s.rollback_to) {
          std::cout << "momoe-stats: the run "
                    << (s.interrupted ? "resumed from" : "rolled back to") << " step "
                    << *s.rollback_to << "; the steps after it above belong to "
                    << (s.interrupted ? "the interrupted attempt" : "an abandoned branch")
                    << std::endl;
          continue;
        }
        std::cout << step_line(s) << std::endl;
      }
      offset = c.bytes_read;
      if (c.damaged_at >= 0 && !warned) {
        warn_damage(path, c);
        warned = true;
      }
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(poll_seconds));
  }
  return Status::OK();
}

int run(int argc, char** argv) {
  FlagParser flags("usage: momoe-stats RUN_DIR|stats.pb [flags]\n",
                   "example: momoe-stats runs/quickstart --csv stats.csv --json stats.jsonl\n");
  flags.value("csv", "write one row per (step, layer) to this CSV file");
  flags.value("json", "write every record as a JSON line to this file");
  flags.value("plot", "write loss/perplexity and expert-load plots to this PNG");
  flags.value("window", "steps averaged in the summary table (default 20)");
  flags.switch_flag("follow", "print new steps as they are written");
  flags.value("poll-seconds", "--follow polling interval (default 1)");
  flags.value("max-polls", "--follow: stop after this many polls (default: never)");
  if (std::optional<int> code = flags.parse_or_exit_code(argc, argv)) return *code;
  if (flags.positional().size() != 1)
    return fail(invalid_argument_error("expected one RUN_DIR (see --help)"));
  const std::string arg = flags.positional()[0];
  const std::string path = stats_path(arg);
  {
    // A mistyped run directory is an error, not a file to wait for: only a stats file (*.pb) in
    // an existing directory, or a run directory's stats.pb, may appear later.
    std::error_code ec;
    const std::filesystem::path p(arg);
    const bool pb = p.extension() == ".pb";
    const std::filesystem::path dir = p.has_parent_path() ? p.parent_path() : ".";
    if (!std::filesystem::exists(p, ec) && (!pb || !std::filesystem::is_directory(dir, ec))) {
      return fail(invalid_argument_error("no run directory or stats file ", arg));
    }
  }
  if (flags.has("follow")) {
    StatusOr<double> poll = flags.get_double("poll-seconds", 1.0);
    StatusOr<int64_t> max_polls = flags.get_int("max-polls", 0);
    if (!poll.ok()) return fail(poll.status());
    if (!max_polls.ok()) return fail(max_polls.status());
    if (!(*poll > 0) || !std::isfinite(*poll)) {
      return fail(invalid_argument_error("--poll-seconds ", *poll, " must be > 0"));
    }
    Status s = follow(path, *poll, *max_polls);
    return s.ok() ? 0 : fail(s);
  }
  StatusOr<StatsFileContents> contents = read_stats_file(path);
  if (!contents.ok()) return fail(contents.status());
  contents->steps = latest_per_step(std::move(contents->steps));
  if (contents->truncated_tail)
    log_warning(path, ": the last record is incomplete (run still writing, or killed)");
  warn_damage(path, *contents);
  StatusOr<int64_t> window = flags.get_int("window", 20);
  if (!window.ok()) return fail(window.status());
  if (*window < 1) return fail(invalid_argument_error("--window ", *window, " must be >= 1"));
  std::cout << summary_table(contents->steps, *window);
  if (flags.has("csv")) {
    Status s = write_csv(contents->steps, flags.get("csv"));
    if (!s.ok()) return fail(s);
  }
  if (flags.has("json") || flags.has("plot")) {
    const std::string json = flags.has("json") ? flags.get("json") : flags.get("plot") + ".json";
    Status s = write_json_lines(contents->steps, json);
    if (!s.ok()) return fail(s);
    if (flags.has("plot")) {
      s = plot(json, flags.get("plot"));
      if (!flags.has("json")) std::filesystem::remove(json);
      if (!s.ok()) return fail(s);
      std::cout << "wrote " << flags.get("plot") << "\n";
    }
  }
  return 0;
}

}  // namespace
}  // namespace moe

int main(int argc, char** argv) { return moe::run(argc, argv); }
