// Opening a checkpoint for inference (momoe-eval, momoe-export, momoe-generate): its manifest,
// resolved config and tokenizer (checked against the manifest's fingerprint), the device it runs
// on, and its model with every expert (any EP layout loads).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "base/context.h"
#include "core/data/tokenizer.h"
#include "core/model/transformer.h"
#include "types/checkpoint_manifest.h"
#include "types/run_config.h"

namespace moe {

struct CheckpointModel {
  std::string dir;
  CheckpointManifestInfo manifest;
  RunConfig cfg;  // cfg.model.vocab_size filled from the tokenizer
  std::shared_ptr<const data::Tokenizer> tokenizer;
  std::unique_ptr<Context> ctx;          // after open_device
  std::string device_description;        // "the CPU (2 thread(s) per rank)", "cuda:0 (...)"
  std::unique_ptr<TransformerLM> model;  // after load_model

  // The trainer's per-rank micro-batch, batch_size / grad_accum: the batch it evaluates with.
  int64_t eval_batch() const;
};

// Reads `dir`'s manifest, config and tokenizer. A run directory instead of a checkpoint is refused
// naming its newest checkpoint; a tokenizer that is not the manifest's is kDataLoss naming both.
StatusOr<CheckpointModel> open_checkpoint(const std::string& dir);

// The device: `device`, or the one the checkpoint was trained on (nullopt). threads: CPU threads
// in [0, 4096] (0: every core).
Status open_device(CheckpointModel* c, std::optional<DeviceKind> device, int threads);

// Builds the model (no EP group: it holds every expert) and loads the weights.
Status load_model(CheckpointModel* c);

}  // namespace moe
