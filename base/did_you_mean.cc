#include "base/did_you_mean.h"

#include <algorithm>
#include <cctype>
#include <vector>

namespace moe {

int edit_distance(const std::string& a, const std::string& b) {
  const auto same = [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) ==
           std::tolower(static_cast<unsigned char>(y));
  };
  const size_t n = a.size(), m = b.size();
  // d[i][j]: the distance between a[0, i) and b[0, j) (optimal string alignment).
  std::vector<std::vector<int>> d(n + 1, std::vector<int>(m + 1, 0));
  for (size_t i = 0; i <= n; ++i) d[i][0] = static_cast<int>(i);
  for (size_t j = 0; j <= m; ++j) d[0][j] = static_cast<int>(j);
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      const int cost = same(a[i - 1], b[j - 1]) ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && same(a[i - 1], b[j - 2]) && same(a[i - 2], b[j - 1])) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

std::vector<std::string> closest_names(const std::string& name,
                                       const std::vector<std::string>& known) {
  const int allowed = name.size() <= 4 ? 1 : name.size() <= 8 ? 2 : 3;
  int best = allowed + 1;
  std::vector<std::string> out;
  for (const std::string& k : known) {
    const int d = edit_distance(name, k);
    if (d == 0 || d > allowed || d > best) continue;  // an exact match is no typo
    if (d < best) {
      best = d;
      out.clear();
    }
    if (out.size() < 3 && std::find(out.begin(), out.end(), k) == out.end()) out.push_back(k);
  }
  return out;
}

std::string did_you_mean(const std::string& name, const std::vector<std::string>& known,
                         const std::string& prefix) {
  const std::vector<std::string> close = closest_names(name, known);
  if (close.empty()) return "";
  std::string out = " (did you mean ";
  for (size_t i = 0; i < close.size(); ++i) {
    if (i > 0) out += i + 1 == close.size() ? " or " : ", ";
    out += prefix + close[i];
  }
  return out + "?)";
}

}  // namespace moe
