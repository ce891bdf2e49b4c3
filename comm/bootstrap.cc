#include "comm/bootstrap.h"

#include "base/check.h"

namespace moe::comm {
namespace {
// Root's message: one tag byte, then the id ('I') or the error text ('E').
constexpr char kIdTag = 'I';
constexpr char kErrorTag = 'E';
}  // namespace

StatusOr<std::string> broadcast_unique_id(Communicator& bootstrap,
                                          const std::function<StatusOr<std::string>()>& make_id,
                                          size_t expected_size, int root) {
  if (root < 0 || root >= bootstrap.world_size()) {
    return invalid_argument_error("bootstrap: root ", root, " is not a rank of a world of ",
                                  bootstrap.world_size());
  }
  std::string message;
  Status root_status;
  if (bootstrap.rank() == root) {
    StatusOr<std::string> id = make_id();
    if (id.ok() && id->size() != expected_size) {
      id = internal_error("bootstrap: the id has ", id->size(), " bytes, expected ", expected_size);
    }
    root_status = id.status();
    message = id.ok() ? kIdTag + *id : kErrorTag + id.status().to_string();
  }
  StatusOr<std::string> received_or = bootstrap.broadcast_bytes(message, root);
  if (!received_or.ok()) return received_or.status();
  const std::string& received = *received_or;
  if (!root_status.ok()) return root_status;
  if (received.empty() || received[0] != kIdTag) {
    return internal_error("bootstrap: rank ", root, " failed to create an id: ",
                          received.empty() ? std::string("(empty message)") : received.substr(1));
  }
  if (received.size() != expected_size + 1) {
    return internal_error("bootstrap: received an id of ", received.size() - 1, " bytes, expected ",
                          expected_size);
  }
  return received.substr(1);
}

}  // namespace moe::comm
