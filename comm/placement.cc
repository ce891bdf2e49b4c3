#include "comm/placement.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "base/check.h"

namespace moe::comm {
namespace {

// The hosts in the order of their first world rank, each with its world ranks in world order.
struct HostRanks {
  std::vector<std::string> names;       // [H]
  std::vector<std::vector<int>> ranks;  // [H][ranks on that host]
};

HostRanks group_by_host(const std::vector<std::string>& hosts) {
  HostRanks h;
  std::map<std::string, size_t> index;
  for (int w = 0; w < static_cast<int>(hosts.size()); ++w) {
    auto [it, added] = index.emplace(hosts[w], h.names.size());
    if (added) {
      h.names.push_back(hosts[w]);
      h.ranks.emplace_back();
    }
    h.ranks[it->second].push_back(w);
  }
  return h;
}

// "a: 4, b: 2" (the first 8 hosts, then how many more).
std::string host_counts(const HostRanks& h) {
  std::string out;
  const size_t shown = std::min<size_t>(h.names.size(), 8);
  for (size_t i = 0; i < shown; ++i) {
    out += str_cat(i ? ", " : "", h.names[i], ": ", h.ranks[i].size());
  }
  if (shown < h.names.size()) out += str_cat(" and ", h.names.size() - shown, " more");
  return out;
}

// "1, 2, 4": the values of [1, limit] for which keep(v) holds.
template <typename Keep>
std::string values_where(int limit, Keep keep) {
  std::string out;
  for (int v = 1; v <= limit; ++v) {
    if (keep(v)) out += str_cat(out.empty() ? "" : ", ", v);
  }
  return out;
}

Status refuse_hosts(int n, int ep, const HostRanks& h) {
  const int first = static_cast<int>(h.ranks[0].size());
  int gcd = 0;
  bool equal = true;
  for (const std::vector<int>& r : h.ranks) {
    gcd = std::gcd(gcd, static_cast<int>(r.size()));
    equal = equal && static_cast<int>(r.size()) == first;
  }
  const std::string inside = values_where(gcd, [&](int v) { return gcd % v == 0; });
  if (!equal) {
    return invalid_argument_error(
        "parallel.placement = HOSTS: the ", h.names.size(), " hosts run unequal numbers of ranks (",
        host_counts(h), ") and --ep ", ep, " does not divide each; set --ep to one of ", inside,
        " (EP inside each host), give every host the same number of ranks, or set "
        "parallel.placement = RANK_ORDER");
  }
  const std::string across =
      values_where(n, [&](int v) { return v > first && v % first == 0 && n % v == 0; });
  return invalid_argument_error(
      "parallel.placement = HOSTS: --ep ", ep, " neither divides the ", first,
      " ranks of each host nor is a multiple of them (", n, " ranks on ", h.names.size(),
      " hosts: ", host_counts(h), "); set --ep to one of ", inside, " (EP inside each host)",
      across.empty() ? "" : str_cat(" or ", across, " (EP over whole hosts)"),
      ", or set parallel.placement = RANK_ORDER");
}

// Appends EP group `dp` made of `members` (in EP-rank order) to the layout.
void add_group(const std::vector<int>& members, int dp, RankLayout* layout) {
  for (size_t e = 0; e < members.size(); ++e) {
    layout->ep_rank[members[e]] = static_cast<int>(e);
    layout->dp_rank[members[e]] = dp;
  }
}

StatusOr<RankLayout> place_on_hosts(int n, int ep, const std::vector<std::string>& hosts,
                                    RankLayout layout) {
  if (static_cast<int>(hosts.size()) != n) {
    return invalid_argument_error("parallel.placement = HOSTS: ", hosts.size(),
                                  " host names for a world of ", n, " ranks");
  }
  const HostRanks h = group_by_host(hosts);
  const bool inside = std::all_of(h.ranks.begin(), h.ranks.end(), [&](const std::vector<int>& r) {
    return r.size() % static_cast<size_t>(ep) == 0;
  });
  const auto per_host = static_cast<int>(h.ranks[0].size());
  const bool whole = ep % per_host == 0 &&
                     std::all_of(h.ranks.begin(), h.ranks.end(), [&](const std::vector<int>& r) {
                       return static_cast<int>(r.size()) == per_host;
                     });
  if (!inside && !whole) return refuse_hosts(n, ep, h);
  int dp = 0;
  if (inside) {
    for (const std::vector<int>& r : h.ranks) {
      for (size_t begin = 0; begin < r.size(); begin += static_cast<size_t>(ep)) {
        add_group(std::vector<int>(r.begin() + static_cast<std::ptrdiff_t>(begin),
                                   r.begin() + static_cast<std::ptrdiff_t>(begin) + ep),
                  dp++, &layout);
      }
    }
    return layout;
  }
  const size_t hosts_per_group = static_cast<size_t>(ep / per_host);
  for (size_t first = 0; first < h.ranks.size(); first += hosts_per_group) {
    std::vector<int> members;
    for (size_t i = first; i < first + hosts_per_group; ++i) {
      members.insert(members.end(), h.ranks[i].begin(), h.ranks[i].end());
    }
    add_group(members, dp++, &layout);
  }
  return layout;
}

}  // namespace

bool RankLayout::is_rank_order() const {
  for (int w = 0; w < world_size(); ++w) {
    if (position(w) != w) return false;
  }
  return true;
}

std::vector<int> RankLayout::ep_group(int dp) const {
  return std::vector<int>(world_rank_at.begin() + dp * ep_size,
                          world_rank_at.begin() + (dp + 1) * ep_size);
}

StatusOr<RankLayout> place_ranks(int world_size, int ep_size, Placement placement,
                                 const std::vector<std::string>& hosts) {
  const int n = world_size;
  if (ep_size < 1) return invalid_argument_error("--ep ", ep_size, " must be >= 1");
  if (ep_size > n) {
    return invalid_argument_error("--ep ", ep_size, " is larger than the world size ", n);
  }
  if (n % ep_size != 0) {
    return invalid_argument_error("world size ", n, " is not divisible by --ep ", ep_size);
  }
  RankLayout layout;
  layout.ep_size = ep_size;
  layout.dp_size = n / ep_size;
  layout.ep_rank.assign(n, 0);
  layout.dp_rank.assign(n, 0);
  if (placement == Placement::kHosts) {
    MOE_ASSIGN_OR_RETURN(layout, place_on_hosts(n, ep_size, hosts, std::move(layout)));
  } else {
    for (int w = 0; w < n; ++w) {
      layout.ep_rank[w] = w % ep_size;
      layout.dp_rank[w] = w / ep_size;
    }
  }
  layout.world_rank_at.assign(n, 0);
  for (int w = 0; w < n; ++w) layout.world_rank_at[layout.position(w)] = w;
  return layout;
}

StatusOr<std::vector<int>> hierarchical_hosts(const RankLayout& layout,
                                              const std::vector<std::string>& hosts, int dp) {
  if (static_cast<int>(hosts.size()) != layout.world_size()) {
    return invalid_argument_error("parallel.hierarchical_all_to_all: ", hosts.size(),
                                  " host names for a world of ", layout.world_size(), " ranks");
  }
  std::vector<int> mine;
  for (int d = 0; d < layout.dp_size; ++d) {
    const std::vector<int> group = layout.ep_group(d);
    std::vector<std::string> names;
    for (int w : group) names.push_back(hosts[w]);
    const HostRanks h = group_by_host(names);
    const size_t per_host = h.ranks[0].size();
    const bool even = std::all_of(h.ranks.begin(), h.ranks.end(),
                                  [&](const std::vector<int>& r) { return r.size() == per_host; });
    if (h.names.size() < 2 || !even) {
      return invalid_argument_error(
          "parallel.hierarchical_all_to_all needs every EP group to span several hosts with the "
          "same number of its ranks on each, but the EP group of world rank ",
          group[0], " has ", host_counts(h), "; set --ep to a multiple of the ranks per host",
          h.names.size() < 2 ? " (with parallel.placement = HOSTS)" : "",
          ", or leave parallel.hierarchical_all_to_all off");
    }
    if (d != dp) continue;
    mine.assign(group.size(), 0);
    for (size_t i = 0; i < h.ranks.size(); ++i) {
      for (int e : h.ranks[i]) mine[e] = static_cast<int>(i);
    }
  }
  return mine;
}

std::string describe_layout(const RankLayout& layout, Placement placement,
                            const std::vector<std::string>& hosts, bool hierarchical) {
  std::string out = str_cat("placement ", placement_name(placement), ": EP ", layout.ep_size,
                            " x DP ", layout.dp_size);
  const HostRanks all = group_by_host(hosts);
  if (!hosts.empty()) out += str_cat(" on ", all.names.size(), " host(s) (", host_counts(all), ")");
  out += "; EP groups (world ranks)";
  size_t most_hosts = 1;
  for (int d = 0; d < layout.dp_size; ++d) {
    const std::vector<int> group = layout.ep_group(d);
    if (d < 8) {
      out += " [";
      for (size_t e = 0; e < group.size(); ++e) out += str_cat(e ? " " : "", group[e]);
      out += "]";
    }
    std::vector<std::string> names;
    for (int w : group) {
      if (!hosts.empty()) names.push_back(hosts[w]);
    }
    most_hosts = std::max(most_hosts, group_by_host(names).names.size());
  }
  if (layout.dp_size > 8) out += str_cat(" and ", layout.dp_size - 8, " more");
  if (!hosts.empty()) {
    out += most_hosts == 1 ? ", each inside one host" : str_cat(", over ", most_hosts, " hosts");
  }
  return out + "; all-to-all " +
         (hierarchical ? "hierarchical (staged through each host)" : "flat");
}

}  // namespace moe::comm
