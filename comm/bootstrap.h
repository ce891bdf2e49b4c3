// Bootstrap: exchanging a device communicator's unique id (e.g. the 128 bytes of an ncclUniqueId)
// through a host communicator, kept apart from the collectives themselves (llm.c's init_method,
// TransformerEngine's exchange_unique_id). No NCCL types here: ids travel as opaque bytes.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "comm/communicator.h"

namespace moe::comm {

// Collective over `bootstrap`. `root` alone calls make_id(); every rank returns root's bytes.
// Errors reach every rank, so no rank is left waiting: make_id failing on root (kInternal on
// the other ranks, naming root and its error; root returns make_id's own status), an id whose
// size is not expected_size (kInternal), root out of range (kInvalidArgument), and the
// bootstrap communicator's own errors.
StatusOr<std::string> broadcast_unique_id(Communicator& bootstrap,
                                          const std::function<StatusOr<std::string>()>& make_id,
                                          size_t expected_size, int root = 0);

}  // namespace moe::comm
