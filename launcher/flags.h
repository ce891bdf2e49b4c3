// Command-line flags of the momoe executables: "--name value" or "--name=value", repeatable flags,
// and boolean switches. Unknown flags, missing values and bad numbers are errors that name the
// flag; nothing is silently ignored.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/status.h"

namespace moe {

class FlagParser {
 public:
  // Declares a flag taking a value (repeatable: collected in order) or a switch.
  void value(const std::string& name, const std::string& help, bool repeatable = false);
  void switch_flag(const std::string& name, const std::string& help);

  // Parses argv[1..]; positional arguments are kept in order.
  Status parse(int argc, char** argv);

  bool has(const std::string& name) const;
  std::string get(const std::string& name, const std::string& fallback = "") const;
  std::vector<std::string> get_all(const std::string& name) const;
  StatusOr<int64_t> get_int(const std::string& name, int64_t fallback) const;
  StatusOr<double> get_double(const std::string& name, double fallback) const;
  const std::vector<std::string>& positional() const { return positional_; }
  std::string usage() const;

 private:
  struct Spec {
    std::string help;
    bool takes_value = true;
    bool repeatable = false;
  };
  std::map<std::string, Spec> specs_;
  std::vector<std::string> order_;
  std::map<std::string, std::vector<std::string>> values_;
  std::vector<std::string> positional_;
};

}  // namespace moe
