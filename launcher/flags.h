// Command-line flags of the momoe executables: "--name value" or "--name=value", repeatable flags,
// and boolean switches. Unknown flags (the closest known ones suggested), missing values and bad
// numbers are errors that name the flag; nothing is silently ignored. Every parser answers -h and
// --help with its usage (the command's synopsis, its flags, its notes) on stdout and exit code 0,
// so no command can lack it.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace moe {

class FlagParser {
 public:
  // `synopsis` opens the usage ("usage: momoe-train --config FILE [flags]" and any lines about
  // the command); `notes` closes it (exit codes, examples), each ending in a newline.
  explicit FlagParser(std::string synopsis, std::string notes = "");

  // Declares a flag taking a value (repeatable: collected in order) or a switch.
  void value(const std::string& name, const std::string& help, bool repeatable = false);
  void switch_flag(const std::string& name, const std::string& help);

  // Parses argv[1..]; positional arguments are kept in order. -h or --help where a flag may
  // stand ends the parse: help_requested() turns true and the rest of the line is not read.
  Status parse(int argc, char** argv);

  // How every command starts: parse(), then for -h/--help the usage on stdout (exit code 0), for
  // a bad flag its error logged (by rank 0 of a job only: exit_with_job_wide; exit code 2). Returns
  // that exit code, or nullopt when the command goes on.
  std::optional<int> parse_or_exit_code(int argc, char** argv);

  bool help_requested() const { return help_requested_; }
  bool has(const std::string& name) const;
  std::string get(const std::string& name, const std::string& fallback = "") const;
  std::vector<std::string> get_all(const std::string& name) const;
  StatusOr<int64_t> get_int(const std::string& name, int64_t fallback) const;
  StatusOr<double> get_double(const std::string& name, double fallback) const;
  // For a flag naming a file the command writes at its end: when given, a file can be created
  // there (a path that is not a folder, in a folder that exists and this user may write into),
  // checked before the work. kInvalidArgument naming the flag, the path and what to do.
  Status check_output_file(const std::string& name) const;
  const std::vector<std::string>& positional() const { return positional_; }
  // The synopsis, every flag with its help (-h/--help last), and the notes.
  std::string usage() const;

 private:
  struct Spec {
    std::string help;
    bool takes_value = true;
    bool repeatable = false;
  };
  std::string synopsis_, notes_;
  bool help_requested_ = false;
  std::map<std::string, Spec> specs_;
  std::vector<std::string> order_;
  std::map<std::string, std::vector<std::string>> values_;
  std::vector<std::string> positional_;
};

}  // namespace moe
