#include "core/train/placement.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>

#include "base/device.h"
#include "core/train/memory_estimate.h"

namespace moe {
namespace {

// The integer `text` holds whole, or nullopt.
std::optional<int64_t> parse_int(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (*end != '\0') return std::nullopt;
  return v;
}

}  // namespace

std::string RankPlace::to_text() const {
  return str_cat(host, "\t", node_local_rank, "\t", device, "\t", available_bytes, "\t", memory_key,
                 "\t", memory_name);
}

StatusOr<RankPlace> RankPlace::from_text(const std::string& text) {
  std::vector<std::string> fields;
  std::istringstream in(text);
  for (std::string field; std::getline(in, field, '\t');) fields.push_back(field);
  const std::optional<int64_t> local = fields.size() == 6 ? parse_int(fields[1]) : std::nullopt;
  const std::optional<int64_t> available = local ? parse_int(fields[3]) : std::nullopt;
  if (!available) {
    return invalid_argument_error("a rank's place '", text,
                                  "' is not host, node-local rank, device, available bytes, "
                                  "memory key and memory name separated by tabs (do all ranks "
                                  "run the same momoe-train?)");
  }
  RankPlace p;
  p.host = fields[0];
  p.node_local_rank = static_cast<int>(*local);
  p.device = fields[2];
  p.available_bytes = *available;
  p.memory_key = fields[4];
  p.memory_name = fields[5];
  return p;
}

RankPlace this_rank_place(const RunDevice& device) {
  RankPlace p;
  p.host = host_name();
  p.node_local_rank = node_local_rank();
  // The description's head: "the CPU (2 thread(s) per rank)" -> "the CPU".
  p.device = device.description.substr(0, device.description.find(" ("));
  p.available_bytes = device.available_bytes;
  p.memory_key = device.memory_key;
  p.memory_name = device.memory_name;
  return p;
}

std::vector<MemoryPool> memory_pools(const std::vector<RankPlace>& places) {
  std::vector<MemoryPool> pools;
  std::map<std::string, size_t> index;  // memory key -> pools[i]
  for (size_t r = 0; r < places.size(); ++r) {
    const RankPlace& place = places[r];
    auto [it, added] = index.emplace(place.memory_key, pools.size());
    if (added) {
      pools.push_back(MemoryPool{place.memory_name, place.available_bytes, {}});
    }
    MemoryPool& pool = pools[it->second];
    if (pool.available >= 0) {
      pool.available =
          place.available_bytes < 0 ? -1 : std::min(pool.available, place.available_bytes);
    }
    pool.ranks.push_back(static_cast<int>(r));
  }
  return pools;
}

std::string placement_line(const std::vector<RankPlace>& places) {
  std::vector<std::string> hosts;
  std::map<std::string, std::string> ranks_on;  // host -> "rank 0 (...), rank 1 (...)"
  for (size_t r = 0; r < places.size(); ++r) {
    const RankPlace& p = places[r];
    std::string& ranks = ranks_on[p.host];
    if (ranks.empty()) hosts.push_back(p.host);
    ranks += str_cat(ranks.empty() ? "" : ", ", "rank ", r, " (node-local ",
                     p.node_local_rank >= 0 ? std::to_string(p.node_local_rank) : "?", ", ",
                     p.device, ")");
  }
  std::string line = "momoe: placement: ";
  for (size_t h = 0; h < hosts.size(); ++h) {
    line += str_cat(h == 0 ? "" : "; ", "host ", hosts[h], ": ", ranks_on[hosts[h]]);
  }
  return line;
}

std::string memory_check_line(const std::vector<MemoryPool>& pools, int64_t per_rank_bytes) {
  std::string line = "momoe: memory check: ";
  for (size_t i = 0; i < pools.size(); ++i) {
    const MemoryPool& p = pools[i];
    std::string ranks;
    for (int r : p.ranks) ranks += str_cat(ranks.empty() ? "" : ", ", r);
    line += str_cat(i == 0 ? "" : "; ", p.name, " (rank", p.ranks.size() > 1 ? "s " : " ", ranks,
                    "): ", p.ranks.size(), " x ", gib_text(per_rank_bytes), " GiB of ",
                    p.available >= 0 ? str_cat(gib_text(p.available), " GiB available")
                                     : std::string("an unknown amount available"));
  }
  return line;
}

}  // namespace moe
