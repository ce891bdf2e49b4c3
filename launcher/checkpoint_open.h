// A checkpoint opened for inference by momoe-eval and momoe-generate: its manifest and config,
// the tokenizer it was trained with (checked against the manifest), and the device to run on.
// The weights come after (load_model), so a tokenizing child process can start before they fill
// memory.
#pragma once

#include <memory>
#include <string>

#include "core/base/checkpoint_manifest.h"
#include "core/base/context.h"
#include "core/base/run_config.h"
#include "core/data/tokenizer.h"
#include "core/model/transformer.h"
#include "launcher/flags.h"

namespace moe {

struct OpenedCheckpoint {
  std::string dir;
  CheckpointManifestInfo manifest;
  RunConfig cfg;  // the checkpoint's, with model.vocab_size the tokenizer's and train.device set
  std::shared_ptr<const data::Tokenizer> tokenizer;
  std::unique_ptr<Context> ctx;
  std::string device_description;  // "the CPU (2 thread(s) per rank)", "cuda:0 (NVIDIA ...)"
};

// Opens flags "checkpoint" with the device of flags "device" (cpu or cuda; default: the one it
// was trained on) and "threads" (default: its parallel.threads; 0: every core). `verb` finishes
// "pass --device cpu to ... it on the CPU" ("evaluate"). Errors: kInvalidArgument for a run
// directory (naming its newest checkpoint) or a bad flag; kDataLoss for a tokenizer that is not
// the manifest's; the manifest's, the config's and the device's errors.
StatusOr<OpenedCheckpoint> open_checkpoint(const FlagParser& flags, const std::string& verb);

// The model of `ckpt` on its context, with the checkpoint's weights.
StatusOr<std::unique_ptr<TransformerLM>> load_model(const OpenedCheckpoint& ckpt);

}  // namespace moe
