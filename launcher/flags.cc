#include "launcher/flags.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <utility>

#include "base/did_you_mean.h"
#include "launcher/exit_status.h"

namespace moe {

FlagParser::FlagParser(std::string synopsis, std::string notes)
    : synopsis_(std::move(synopsis)), notes_(std::move(notes)) {}

void FlagParser::value(const std::string& name, const std::string& help, bool repeatable) {
  specs_[name] = {help, true, repeatable};
  order_.push_back(name);
}

void FlagParser::switch_flag(const std::string& name, const std::string& help) {
  specs_[name] = {help, false, false};
  order_.push_back(name);
}

Status FlagParser::parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      help_requested_ = true;
      return Status::OK();
    }
    if (arg.rfind("--", 0) != 0 || arg == "--") {
      positional_.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2), value;
    bool inline_value = false;
    const size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    auto it = specs_.find(name);
    if (it == specs_.end()) {
      return invalid_argument_error("unknown flag --", name, did_you_mean(name, order_, "--"),
                                    "; see --help");
    }
    if (!it->second.takes_value) {
      if (inline_value) return invalid_argument_error("--", name, " takes no value");
      values_[name].push_back("1");
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= argc) return invalid_argument_error("--", name, " needs a value");
      value = argv[++i];
    }
    if (!it->second.repeatable && values_.count(name)) {
      return invalid_argument_error("--", name, " given more than once");
    }
    values_[name].push_back(value);
  }
  return Status::OK();
}

std::optional<int> FlagParser::parse_or_exit_code(int argc, char** argv) {
  const Status parsed = parse(argc, argv);
  if (help_requested_) {
    std::fputs(usage().c_str(), stdout);
    return 0;
  }
  if (!parsed.ok()) return exit_with_job_wide(parsed);
  return std::nullopt;
}

bool FlagParser::has(const std::string& name) const { return values_.count(name) > 0; }

std::string FlagParser::get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second.back();
}

std::vector<std::string> FlagParser::get_all(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

StatusOr<int64_t> FlagParser::get_int(const std::string& name, int64_t fallback) const {
  if (!has(name)) return fallback;
  const std::string v = get(name);
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno == ERANGE) {
    return invalid_argument_error("--", name, " = '", v, "' is not an integer");
  }
  return static_cast<int64_t>(x);
}

StatusOr<double> FlagParser::get_double(const std::string& name, double fallback) const {
  if (!has(name)) return fallback;
  const std::string v = get(name);
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !std::isfinite(x)) {
    return invalid_argument_error("--", name, " = '", v, "' is not a finite number");
  }
  return x;
}

Status FlagParser::check_output_file(const std::string& name) const {
  if (!has(name)) return Status::OK();
  const std::string path = get(name);
  if (path.empty()) return invalid_argument_error("--", name, " needs a file path");
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    return invalid_argument_error("--", name, " ", path, " is a folder: give a file path in it");
  }
  const fs::path parent = fs::path(path).parent_path();
  const std::string dir = parent.empty() ? "." : parent.string();
  if (!fs::exists(dir, ec)) {
    return invalid_argument_error("--", name, " ", path, ": the folder ", dir,
                                  " does not exist: create it first, or give a path in an "
                                  "existing folder");
  }
  if (!fs::is_directory(dir, ec)) {
    return invalid_argument_error("--", name, " ", path, ": ", dir,
                                  " is not a folder: give a path in an existing folder");
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return invalid_argument_error("--", name, " ", path, ": cannot create files in ", dir, " (",
                                  std::strerror(errno), "): give a path in a folder you can write");
  }
  return Status::OK();
}

std::string FlagParser::usage() const {
  std::ostringstream os;
  os << synopsis_;
  for (const std::string& name : order_) {
    const Spec& s = specs_.at(name);
    os << "  --" << name << (s.takes_value ? " VALUE" : "") << (s.repeatable ? " (repeatable)" : "")
       << "\n      " << s.help << "\n";
  }
  os << "  -h, --help\n      print this help\n" << notes_;
  return os.str();
}

}  // namespace moe
