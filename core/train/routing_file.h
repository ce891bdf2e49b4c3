// The routing decisions of an evaluation as a file (momoe-eval --routing-out): what a second
// computation path of the same model (python/momoe_torch's replay, a GPU run) compares with its
// own decisions, and then takes instead, so that the values of the two paths compare on equal
// decisions (tests/testing/cross_path.h states the rule).
//
// A safetensors file (core/checkpoint/safetensors.h). Per MoE layer l (0 = the first MoE layer):
//   moe.<l>.experts  i32 [N, K]  the chosen experts, top-1 first
//   moe.<l>.slot     i32 [N, K]  each choice's capacity slot, -1 when dropped (dropless: >= 0)
//   moe.<l>.mask     u8  [N, E]  SparseMixer's masked-softmax set (SparseMixer layers only)
// N = batches x batch x seq_len rows in evaluation order, padding rows of the last batch
// included (an AC metric and an evaluation capacity see them). Metadata: format
// "momoe-routing", format_version "1", layers, batch, seq_len, batches.
#pragma once

#include <string>
#include <vector>

#include "base/context.h"
#include "core/model/transformer.h"

namespace moe {

inline constexpr const char* kRoutingFileFormat = "momoe-routing";

// `decisions`: for each batch in order, `layers` entries (evaluate_perplexity's `routing`).
// Reads the tensors back from `ctx` (one wait each: a diagnostic output, after the evaluation)
// and writes `path` crash-safely.
Status write_routing_file(const std::string& path, Context& ctx, int layers, int64_t batch,
                          int64_t seq_len, const std::vector<RoutingDecisions>& decisions);

}  // namespace moe
