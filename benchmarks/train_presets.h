// The training presets of momoe-bench train and memory (the quick start, and an SMoE-medium-shaped
// model on the bundled corpus) and the private run directory each benchmark job trains in.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "comm/world.h"

namespace moe::bench {

struct TrainPreset {
  std::string name;
  std::vector<std::string> overrides;  // --set overrides of configs/quickstart.pbtxt
};

// "quickstart", "smoe-medium" or "all" (both); empty for any other name.
std::vector<TrainPreset> train_presets(const std::string& which);

// A private run directory for this job: rank 0 makes it (mkdtemp, so concurrent jobs and ranks
// never share a fixed path) and broadcasts its name; every rank uses it.
StatusOr<std::string> make_job_dir(const std::string& preset, comm::World* world);

// Removes the job directory once every rank is done with it (rank 0, after a barrier); a failure
// to remove is reported, never thrown.
Status remove_job_dir(const std::string& dir, comm::World* world);

}  // namespace moe::bench
