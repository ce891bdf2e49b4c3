// The lines rank 0 prints before the first step: the layout and backend, precision and device,
// tokenizer, training sequences, blocks and parameters; each text with its <unk> share (a
// user's corpus must not be evaluated on other text unseen); on the CPU, the CPU and BLAS kernel;
// the model's size (all parameters, active ones per token) and training FLOPs per token
// (model_size.h); the memory a rank is estimated to need, the scratch it counts and, with
// dropless routing, its worst case (memory_estimate.h).
#pragma once

#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/model/transformer.h"
#include "core/train/memory_estimate.h"
#include "core/train/run_data.h"
#include "core/train/run_device.h"
#include "types/run_config.h"

namespace moe {

// cfg: resolved (its vocabulary known); world: nullable for one process; memory: the per-rank
// estimate the memory check used. Each line starts with "momoe: ".
std::vector<std::string> startup_banner(const RunConfig& cfg, const comm::Communicator* world,
                                        const RunDevice& device, const RunData& data,
                                        const TransformerLM& model, const MemoryEstimate& memory);

}  // namespace moe
