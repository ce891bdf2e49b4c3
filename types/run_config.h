// Plain configuration of a training run (the structs behind proto/train.proto, parallel.proto and
// model.proto), filled and validated by proto/run_convert.cc.
#pragma once

#include <cstdint>
#include <string>

#include "base/dtype.h"
#include "types/model_config.h"

namespace moe {

// `relative` inside the bundled data directory: $MOMOE_DATA_DIR when set, else the source tree's
// data/ folder (compiled in), else ./data.
std::string bundled_data_path(const std::string& relative);

enum class OptimizerKind { kAdamW, kSgd };
enum class LrScheduleKind { kConstant, kCosine };
enum class CommBackend { kAuto, kMpi, kNccl };
// parallel.placement: which world ranks form an EP group. kRankOrder: `ep` consecutive ranks.
// kHosts: ranks of one host (from the host names the ranks report), so that EP stays on a host's
// fast links whatever order the launcher gave the ranks; DP then spans hosts.
enum class Placement { kRankOrder, kHosts };
const char* placement_name(Placement p);  // "RANK_ORDER" | "HOSTS"
// train.precision: FP32 (fp32 everything), or BF16 (bf16 working weights, activations and GEMM
// inputs with fp32 accumulation; fp32 masters, gradients, optimizer state, router, losses,
// momentum state and layer-norm statistics).
enum class Precision { kFp32, kBf16 };
enum class DeviceKind { kCpu, kCuda };
enum class FinalEval { kBoth, kSubset, kWhole, kNone };  // proto/train.proto TrainConfig.FinalEval
// train.recompute (proto/train.proto Recompute.Mode): what a training forward keeps for backward.
// kNone: everything each layer's backward reads. kSelective: not the F-wide hidden rows (h_pre,
// h) of the experts, the shared experts and the dense FFNs; their backward recomputes them from
// the kept input rows (the exchange is not repeated). kFull: each block's input and the MoE state
// entering it only; backward re-runs one block's forward at a time (its exchanges too) to rebuild
// what its backward reads. The same losses, gradients and weights, bit for bit.
enum class Recompute { kNone, kSelective, kFull };
const char* recompute_name(Recompute r);  // "NONE" | "SELECTIVE" | "FULL"
const char* precision_name(Precision p);  // "FP32" | "BF16"
// The activation dtype of a precision: f32 or bf16.
DType activation_dtype(Precision p);

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kAdamW;
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  double momentum = 0.0;  // SGD
};

// Relative paths are relative to the working directory, except the defaults: the bundled Brown
// corpus, found in $MOMOE_DATA_DIR or else the source tree's data/ (see bundled_data_path).
struct DataConfig {
  std::string train = bundled_data_path("brown/train.txt.gz");
  std::string valid = bundled_data_path("brown/valid.txt.gz");
  std::string test = bundled_data_path("brown/test.txt.gz");
  int64_t vocab_max_size = 0;
  int64_t vocab_min_count = 1;
  std::string cache_dir;  // empty: RUN_DIR/cache
  std::string
      dataset;  // a prepared dataset folder (core/data/dataset.h); then train/valid/test are ""
  // The tokenizer (proto/train.proto TokenizerConfig).
  bool sentencepiece = false;  // false: the word vocabulary
  std::string sp_model;        // an existing model; "" = train one on the training split
  std::string sp_model_type = "bpe";
  int64_t sp_vocab_size = 8000;
  int64_t sp_max_sentences = 1000000;
};

struct ParallelConfig {
  int ep = 1;
  CommBackend backend = CommBackend::kAuto;
  Placement placement = Placement::kRankOrder;
  // The token exchange staged through each host (comm/hierarchical_communicator.h) where an EP
  // group spans hosts; refused where it does not span them evenly.
  bool hierarchical_all_to_all = false;
  double timeout_seconds = 30;         // collectives of the training loop
  double setup_timeout_seconds = 600;  // start-up and checkpoint writes
  int threads = 0;                     // CPU threads per rank; 0 = the rank's share of the cores
};

struct TrainConfig {
  int64_t steps = 200;
  int64_t batch_size = 16;
  int64_t grad_accum = 1;
  OptimizerConfig optimizer;
  LrScheduleKind schedule = LrScheduleKind::kConstant;
  int64_t warmup_steps = 0;
  double min_lr_ratio = 0.1;
  double grad_clip = 1.0;
  uint64_t seed = 1;
  int64_t eval_every = 0;
  int64_t eval_sequences = 0;
  int64_t checkpoint_every = 500;  // steps between checkpoints; 0 = none by step
  double checkpoint_minutes = 10;  // minutes between checkpoints; 0 = none by time
  int64_t keep_checkpoints = 2;
  int64_t log_every = 1;
  double attack_rate = 0.025;
  uint64_t attack_seed = 1;
  int64_t probe_every = 1;
  int64_t probe_sequences = 4;
  double collapse_threshold = 4.0;
  Precision precision = Precision::kFp32;
  DeviceKind device = DeviceKind::kCpu;
  int64_t max_skipped_steps = 10;  // consecutive non-finite steps before the run stops; 0 = never
  FinalEval final_eval = FinalEval::kBoth;
  bool tensorboard = true;  // TensorBoard event files in the run directory
  Recompute recompute = Recompute::kNone;
  // ZeRO stage 1: the optimizer state sharded over each parameter's data-parallel replicas
  // (core/optim/state_sharding.h); the same weights, bit for bit, as the replicated optimizer.
  bool distributed_optimizer = false;
  // The loss's rows per chunk (0: the whole micro-batch at once; core/model/transformer.h).
  int64_t loss_chunk_tokens = 0;
  // On a GPU, the step's device work replayed as a CUDA graph where it applies (one rank on a
  // CUDA device, capacity routing: core/train/step_graph.h); the same bits as without. On by
  // default: the CPU says nothing of it; a GPU run it does not apply to says why in one line.
  bool cuda_graphs = true;

  Status validate() const;
  // A step's batch_size sequences are grad_accum micro-batches, each cut into equal contiguous
  // slices, one per world rank. The error names what does not divide.
  Status check_batch_split(int world_size) const;
  // Sequences in one micro-batch over all ranks, and in one rank's slice of it.
  int64_t micro_batch() const { return batch_size / grad_accum; }
  int64_t micro_batch_per_rank(int world_size) const { return micro_batch() / world_size; }
  // Learning rate at optimiser step `step` (0-based): linear warmup from 0, then constant or
  // cosine decay to min_lr_ratio * lr at the last step.
  double learning_rate(int64_t step) const;
};

struct RunConfig {
  ModelConfig model;
  TrainConfig train;
  DataConfig data;
  ParallelConfig parallel;
  // The resolved configuration (every field explicit) in protobuf text format: what checkpoints
  // store and ranks compare. Kept in step with the fields above by proto/run_convert.cc.
  std::string text;
};

}  // namespace moe
