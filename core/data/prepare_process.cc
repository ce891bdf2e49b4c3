#include "core/data/prepare_process.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/base/check.h"

extern char** environ;

namespace moe::data {

std::string momoe_data_path() {
  if (const char* env = std::getenv("MOMOE_DATA"); env != nullptr && *env != '\0') return env;
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    // Beside this executable (installed, or build/launcher/), or in the build tree's launcher/
    // when this is build/benchmarks/momoe-bench.
    for (const std::filesystem::path& p :
         {self.parent_path() / "momoe-data",
          self.parent_path().parent_path() / "launcher" / "momoe-data"}) {
      if (std::filesystem::exists(p, ec)) return p.string();
    }
  }
  return "momoe-data";
}

Status run_prepare_process(const PrepareSpec& spec, bool quiet) {
  std::vector<std::string> args = {momoe_data_path(), "prepare", "--out", spec.out_dir};
  const auto add_all = [&](const char* flag, const std::vector<std::string>& paths) {
    for (const std::string& p : paths) {
      args.push_back(flag);
      args.push_back(p);
    }
  };
  add_all("--train", spec.train);
  add_all("--valid", spec.valid);
  add_all("--test", spec.test);
  args.insert(args.end(), {"--tokenizer", spec.tokenizer});
  if (spec.tokenizer == "word") {
    if (!spec.vocab_path.empty()) {
      args.insert(args.end(), {"--vocab", spec.vocab_path});
    } else {
      args.insert(args.end(), {"--vocab-max-size", std::to_string(spec.vocab.max_size),
                               "--vocab-min-count", std::to_string(spec.vocab.min_count)});
    }
  } else if (!spec.sp_model_path.empty()) {
    args.insert(args.end(), {"--sp-model", spec.sp_model_path});
  } else {
    args.insert(args.end(), {"--sp-type", spec.sp.model_type, "--sp-vocab-size",
                             std::to_string(spec.sp.vocab_size), "--sp-max-sentences",
                             std::to_string(spec.sp.max_sentences)});
  }
  args.insert(args.end(), {"--threads", std::to_string(spec.threads), "--shard-tokens",
                           std::to_string(spec.shard_tokens), "--chunk-mb",
                           std::to_string(std::max<int64_t>(1, spec.chunk_bytes >> 20))});
  if (quiet) args.push_back("--quiet");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // posix_spawn (no code of ours runs between fork and exec in this multi-threaded process): its
  // stdout goes to our stderr, keeping our stdout for our own output, and MOMOE_DATA_CALLER=1
  // tells it to print no "train on it with" hint.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "MOMOE_DATA_CALLER=", 18) != 0) env_strings.emplace_back(*e);
  }
  env_strings.emplace_back("MOMOE_DATA_CALLER=1");
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, 2, 1);
  pid_t pid = -1;
  const int err = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) {
    return internal_error("cannot start ", args[0], ": ", std::strerror(err),
                          " (set MOMOE_DATA to momoe-data's path)");
  }
  int status = 0;
  bool stop_sent = false;
  while (true) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) {
      return internal_error("waiting for ", args[0], ": ", std::strerror(errno));
    }
    if (!stop_sent && spec.stop_requested && spec.stop_requested()) {
      ::kill(pid, SIGTERM);  // forwarded: it stops at its next batch
      stop_sent = true;
    }
    ::usleep(50 * 1000);
  }
  const std::string what = str_cat("`", args[0], " prepare --out ", spec.out_dir, " ...`");
  if (WIFEXITED(status)) {
    switch (WEXITSTATUS(status)) {
      case 0:
        return Status::OK();
      case 2:
        return invalid_argument_error(what, " refused its input (its message is above)");
      case 3:
        return aborted_error(what, " was stopped; run again to resume it");
      case 127:
        return internal_error(what, " could not be started (set MOMOE_DATA to momoe-data's path)");
      default:
        return internal_error(what, " failed with exit code ", WEXITSTATUS(status));
    }
  }
  if (stop_sent && WTERMSIG(status) == SIGTERM) {
    return aborted_error(what, " was stopped before it began; run again to resume it");
  }
  return internal_error(what, " was killed by signal ", WTERMSIG(status));
}

}  // namespace moe::data
