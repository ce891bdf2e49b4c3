// Saving and restoring the whole training state as a sharded checkpoint directory
// (docs/checkpoint_format.md):
//   dense.safetensors                    every replicated parameter (rank 0)
//   experts-ep<r>-of-<R>.safetensors     the expert shards of EP rank r (the first DP group)
//   optimizer-dense.safetensors, optimizer-experts-ep<r>-of-<R>.safetensors
//   vocab.txt                            the word vocabulary (for evaluating the checkpoint later),
//   or tokenizer.model + tokenizer.json  a SentencePiece run's model (data/tokenizer.h)
//   manifest.pb                          sizes, CRC32s, step, update count, data cursor, layout,
//                                        the resolved config and the run id (checksummed)
// Written under ckpt-<step>.tmp and renamed when every rank's files are complete
// (core/checkpoint/checkpoint_io.h says how every instant of that is crash-safe). A checkpoint
// saved at one EP size restores at another: each rank copies the experts it owns now out of
// whichever shards hold them. Resuming on the same layout is bit-exact.
#pragma once

#include <map>
#include <string>

#include "comm/process_groups.h"
#include "core/data/batch_scheduler.h"
#include "core/data/tokenizer.h"
#include "core/model/transformer.h"
#include "core/optim/optimizer.h"
#include "types/run_config.h"

namespace moe {

struct TrainingState {
  const RunConfig* cfg = nullptr;
  TransformerLM* model = nullptr;
  Optimizer* optimizer = nullptr;
  data::BatchScheduler* scheduler = nullptr;
  int64_t* updates = nullptr;
  const data::Tokenizer* tokenizer =
      nullptr;  // saved into the checkpoint (vocab.txt / tokenizer.model)
  std::string vocab_source;
  std::string run_id;  // written into manifests; pruning removes only this run's checkpoints
  // The lineage being trained (proto/checkpoint.proto): written into manifests; pruning keeps
  // only checkpoints of `branch` and its ancestors `lineage`.
  std::string branch;
  std::string parent;
  std::vector<std::string> lineage;
  std::map<std::string, std::string> extra;  // into the manifest's extra map (data fingerprints)
};

// world, groups: null/absent for one process. Collective. Returns the checkpoint directory.
// Keeps the `keep` newest checkpoints of state.run_id on the live lineage (branch + lineage).
StatusOr<std::string> save_checkpoint(const std::string& run_dir, const TrainingState& state,
                                      comm::Communicator* world, const comm::ProcessGroups* groups,
                                      int64_t keep);

// Restores from `dir` (a ckpt-* directory). Collective. Errors: kDataLoss for a truncated or
// corrupted file, kFailedPrecondition naming both fingerprints when the vocabulary differs,
// kInvalidArgument naming the tensor when a shape or name does not match the model.
Status restore_checkpoint(const std::string& dir, const TrainingState& state,
                          comm::Communicator* world, const comm::ProcessGroups* groups);

// Loads only the parameters (any layout) into `model`: for evaluating a checkpoint.
Status load_parameters(const std::string& dir, TransformerLM* model,
                       const comm::ProcessGroups* groups);

}  // namespace moe
