#include "launcher/momoe_data_process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "base/check.h"
#include "io/child_process.h"
#include "io/file_util.h"

namespace moe::data {

void use_momoe_data_for_sentencepiece() { register_prepare_elsewhere(&run_prepare_process); }

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
  // Its stdout goes to our stderr, keeping our stdout for our own output, and
  // MOMOE_DATA_CALLER=1 tells it to print no "train on it with" hint.
  io::SpawnOptions options;
  options.env = {"MOMOE_DATA_CALLER=1"};
  options.stdout_to_stderr = true;
  StatusOr<std::unique_ptr<io::ChildProcess>> child = io::ChildProcess::spawn(args, options);
  if (!child.ok()) {
    return Status(child.status().code(),
                  str_cat(child.status().message(), " (set MOMOE_DATA to momoe-data's path)"));
  }
  int status = 0;
  bool stop_sent = false;
  while (true) {
    MOE_ASSIGN_OR_RETURN(const std::optional<int> done, (*child)->try_wait());
    if (done.has_value()) {
      status = *done;
      break;
    }
    if (!stop_sent && spec.stop_requested && spec.stop_requested()) {
      (*child)->kill(SIGTERM);  // forwarded: it stops at its next batch
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

std::string escape_line(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

StatusOr<std::string> unescape_line(std::string_view line) {
  std::string out;
  out.reserve(line.size());
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] != '\\') {
      out += line[i];
      continue;
    }
    const char next = i + 1 < line.size() ? line[i + 1] : '\0';
    if (next != '\\' && next != 'n') {
      return invalid_argument_error("bad escape at byte ", i, " of \"", line, "\"");
    }
    out += next == 'n' ? '\n' : '\\';
    ++i;
  }
  return out;
}

StatusOr<std::unique_ptr<TokenizeProcess>> TokenizeProcess::start(const std::string& model_path,
                                                                  Mode mode, uint64_t fingerprint) {
  io::SpawnOptions options;
  options.pipes = true;
  StatusOr<std::unique_ptr<io::ChildProcess>> child = io::ChildProcess::spawn(
      {momoe_data_path(), "tokenize", "--model", model_path,
       mode == Mode::kEncode ? "--encode" : "--decode", "--fingerprint", io::hex64(fingerprint)},
      options);
  if (!child.ok()) {
    return Status(child.status().code(),
                  str_cat(child.status().message(), " (set MOMOE_DATA to momoe-data's path)"));
  }
  return std::unique_ptr<TokenizeProcess>(new TokenizeProcess(std::move(*child)));
}

Status TokenizeProcess::ended() {
  child_->close_stdin();
  MOE_ASSIGN_OR_RETURN(const int status, child_->wait());
  const std::string what = child_->command_line();
  if (WIFEXITED(status) && WEXITSTATUS(status) == 2) {
    return invalid_argument_error(what, " refused its input (its message is above)");
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
    return internal_error(what, " could not be started (set MOMOE_DATA to momoe-data's path)");
  }
  return internal_error(
      what, " ended before answering: it ", io::describe_wait_status(status),
      WIFEXITED(status) && WEXITSTATUS(status) != 0 ? " (its message is above)" : "");
}

StatusOr<std::string> TokenizeProcess::ask(std::string_view request) {
  if (Status s = child_->write_line(request); !s.ok()) {
    if (s.code() == StatusCode::kUnavailable) return ended();
    return s;
  }
  MOE_ASSIGN_OR_RETURN(std::optional<std::string> answer, child_->read_line());
  if (!answer.has_value()) return ended();
  return std::move(*answer);
}

StatusOr<std::vector<int32_t>> TokenizeProcess::encode_line(std::string_view line) {
  MOE_CHECK(line.find('\n') == std::string_view::npos, "encode_line: a newline in the line");
  MOE_ASSIGN_OR_RETURN(const std::string answer, ask(line));
  std::vector<int32_t> ids;
  const char* p = answer.c_str();
  while (*p != '\0') {
    char* end = nullptr;
    errno = 0;
    const long id = std::strtol(p, &end, 10);
    if (end == p || errno != 0 || id < 0 || id > INT32_MAX || (*end != ' ' && *end != '\0')) {
      return internal_error(child_->command_line(), " answered \"", answer,
                            "\", which is not a list of ids");
    }
    ids.push_back(static_cast<int32_t>(id));
    p = *end == ' ' ? end + 1 : end;
  }
  return ids;
}

StatusOr<std::string> TokenizeProcess::decode(const std::vector<int32_t>& ids) {
  std::string request;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) request += ' ';
    request += std::to_string(ids[i]);
  }
  MOE_ASSIGN_OR_RETURN(const std::string answer, ask(request));
  StatusOr<std::string> text = unescape_line(answer);
  if (!text.ok()) {
    return internal_error(child_->command_line(), " answered with ", text.status().message());
  }
  return text;
}

Status TokenizeProcess::finish() {
  child_->close_stdin();
  MOE_ASSIGN_OR_RETURN(const int status, child_->wait());
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status::OK();
  return internal_error(child_->command_line(), " ", io::describe_wait_status(status));
}

}  // namespace moe::data
