// "Did you mean": the known names closest to a mistyped one (a config field, a flag), by edit
// distance, for error messages that point to the right spelling.
#pragma once

#include <string>
#include <vector>

namespace moe {

// The edit distance between a and b, case-insensitively: insertions, deletions, substitutions
// and swaps of two adjacent characters count 1 each ("step" -> "steps" 1, "setps" -> "steps" 1).
int edit_distance(const std::string& a, const std::string& b);

// The names of `known` nearest to `name` (all at the smallest distance, in the order given, at
// most 3), when that distance is small for the name's length (1 up to 4 characters, 2 up to 8,
// else 3); none otherwise.
std::vector<std::string> closest_names(const std::string& name,
                                       const std::vector<std::string>& known);

// " (did you mean steps?)", " (did you mean a or b?)" with `prefix` before each suggestion
// ("train." gives "did you mean train.steps?"), or "" when nothing is close.
std::string did_you_mean(const std::string& name, const std::vector<std::string>& known,
                         const std::string& prefix = "");

}  // namespace moe
