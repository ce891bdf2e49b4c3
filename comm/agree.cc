#include "comm/agree.h"

#include <utility>
#include <vector>

namespace moe {
namespace {

// "rank 3", "ranks 0-2, 5", or "every rank" when `ranks` (ascending) is the whole world.
std::string rank_list(const std::vector<int>& ranks, int world_size) {
  if (static_cast<int>(ranks.size()) == world_size) return "every rank";
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    out += str_cat(i == 0 ? "" : ", ", ranks[i]);
    if (j > i) out += str_cat(j == i + 1 ? ", " : "-", ranks[j]);
    i = j + 1;
  }
  return out;
}

// Rank 0's verdict from every rank's report (empty: OK; else one byte of code and the message):
// the first failed rank's code byte, then each distinct report with the ranks that sent it, its
// code named where it is not the verdict's.
std::string compose(const std::vector<std::string>& reports) {
  std::vector<std::pair<std::string, std::vector<int>>> texts;  // in order of first report
  char code = 0;
  for (size_t r = 0; r < reports.size(); ++r) {
    if (reports[r].empty()) continue;
    if (code == 0) code = reports[r][0];
    size_t t = 0;
    while (t < texts.size() && texts[t].first != reports[r]) ++t;
    if (t == texts.size()) texts.emplace_back(reports[r], std::vector<int>());
    texts[t].second.push_back(static_cast<int>(r));
  }
  if (code == 0) return std::string();
  std::string verdict(1, code);
  for (size_t t = 0; t < texts.size(); ++t) {
    const std::string& report = texts[t].first;
    const std::string named =
        report[0] == code
            ? report.substr(1)
            : Status(static_cast<StatusCode>(report[0]), report.substr(1)).to_string();
    verdict += str_cat(t == 0 ? "" : "; ",
                       rank_list(texts[t].second, static_cast<int>(reports.size())), ": ", named);
  }
  return verdict;
}

}  // namespace

Status agree(comm::Communicator* world, const Status& local) {
  if (world == nullptr || world->world_size() == 1) return local.as_job_wide();
  const std::string report =
      local.ok() ? std::string()
                 : std::string(1, static_cast<char>(local.code())) + local.message();
  MOE_ASSIGN_OR_RETURN(std::vector<std::string> all, world->gather_bytes(report, 0));
  std::string verdict = world->rank() == 0 ? compose(all) : std::string();
  MOE_ASSIGN_OR_RETURN(verdict, world->broadcast_bytes(verdict, 0));
  if (verdict.empty()) return Status::OK();
  return Status(static_cast<StatusCode>(verdict[0]), verdict.substr(1)).as_job_wide();
}

}  // namespace moe
