#include "comm/agree.h"

namespace moe {

Status agree(comm::Communicator* world, const Status& local) {
  if (world == nullptr || world->world_size() == 1) return local;
  MOE_ASSIGN_OR_RETURN(std::vector<std::string> all,
                       world->gather_bytes(local.ok() ? std::string() : local.to_string(), 0));
  std::string verdict;
  for (size_t r = 0; r < all.size(); ++r) {
    if (!all[r].empty())
      verdict += (verdict.empty() ? "" : "; ") + str_cat("rank ", r, ": ", all[r]);
  }
  MOE_ASSIGN_OR_RETURN(verdict, world->broadcast_bytes(verdict, 0));
  if (verdict.empty()) return Status::OK();
  return Status(local.ok() ? StatusCode::kAborted : local.code(), verdict);
}

}  // namespace moe
