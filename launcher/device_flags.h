// The --device and --threads flags of the commands that run a checkpoint (momoe-eval,
// momoe-generate): --device cpu or cuda, else the device the checkpoint was trained on;
// --threads, else the checkpoint's parallel.threads (0: every core).
#pragma once

#include "core/inference/checkpoint_model.h"
#include "launcher/flags.h"

namespace moe {

void declare_device_flags(FlagParser* flags);

// open_device (core/inference/checkpoint_model.h) with the flags' values; errors name the flag.
Status open_device_from_flags(CheckpointModel* c, const FlagParser& flags);

}  // namespace moe
