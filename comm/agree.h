// One verdict for a collective decision: every rank passes its own status and all return the
// same one (OK only if every rank's is OK; else the failed ranks' messages, labelled by rank).
#pragma once

#include "comm/communicator.h"

namespace moe {

// world nullable (one process). Collective. The code is the first failed rank's on that rank
// and kAborted elsewhere.
Status agree(comm::Communicator* world, const Status& local);

}  // namespace moe
