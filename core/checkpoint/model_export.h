// momoe-export's core: a model's weights and architecture in a form PyTorch loads without momoe
// (docs/export_format.md; python/momoe_torch builds the model from it).
//
//   model.safetensors  every parameter under a standard name in torch.nn layout: matrices
//                      [out, in] like nn.Linear.weight, LayerNorm gamma/beta as weight/bias, the
//                      experts one module each (blocks.i.moe.experts.e.fc1.weight), F32
//   config.json        the architecture and every MoE layer's settings: its residual dynamics
//                      as the papers parameterise them ("dynamics", what the module derives its
//                      coefficients from) and momoe's coefficients ("residual", which the module
//                      only cross-checks), the batch size momoe evaluates with, and where the
//                      weights came from
//
// The weights are the model's fp32 masters, gathered from any EP layout (the model holds every
// expert); the files do not depend on the layout the checkpoint was saved in, byte for byte.
#pragma once

#include <string>

#include "core/model/transformer.h"

namespace moe {

struct ExportSource {
  std::string checkpoint;  // the checkpoint directory
  int64_t step = 0;
  std::string run_id, branch;
  std::string config_text;     // the run's resolved config (protobuf text), kept for reference
  int64_t eval_batch = 1;      // sequences per evaluation batch (the trainer's micro-batch)
  std::string tokenizer_kind;  // "word" or "sentencepiece"
  int64_t vocab_size = 0;
  uint64_t vocab_fingerprint = 0;
  std::vector<std::string> tokenizer_files;  // copied beside the weights by the caller
};

// The exported name of momoe parameter `name` (one not an expert tensor), and whether its matrix
// is transposed into nn.Linear layout. kInternal for a parameter export does not know (so a new
// parameter can never be left out silently).
struct ExportedName {
  std::string name;
  bool transpose = false;
};
StatusOr<ExportedName> exported_name(const std::string& name);

// Writes model.safetensors and config.json into `out_dir` (an existing folder). The model must
// hold every expert (built without an EP communicator). Reads the weights back once.
Status export_model(TransformerLM* model, const ExportSource& source, const std::string& out_dir);

// config.json's text for `model` (exposed for tests).
std::string export_config_json(const ModelConfig& model, const ExportSource& source);

}  // namespace moe
