// One verdict for a collective decision: every rank passes its own status and all return the
// same one (OK only if every rank's is OK; else the failed ranks' messages, each labelled with
// the ranks that reported it).
#pragma once

#include "comm/communicator.h"

namespace moe {

// world nullable (one process). Collective. Every rank gets the same status: the first failed
// rank's code, the message "rank 1: ..." ("ranks 0-2, 5: ...", "every rank: ..." for the same
// report from several; another rank's code is named before its message), marked job_wide() so
// that it is printed once for the job.
Status agree(comm::Communicator* world, const Status& local);

}  // namespace moe
