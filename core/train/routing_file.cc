#include "core/train/routing_file.h"

#include <cstring>

#include "core/checkpoint/safetensors.h"

namespace moe {
namespace {

// The batches' tensors of one kind (member `field`) for layer l, stacked along rows on the host.
StatusOr<Tensor> stack_layer(Context& ctx, int layers, int l,
                             const std::vector<RoutingDecisions>& decisions,
                             Tensor RoutingDecisions::*field) {
  const int64_t batches = static_cast<int64_t>(decisions.size()) / layers;
  const Tensor& first = decisions[static_cast<size_t>(l)].*field;
  std::vector<int64_t> shape = first.shape().to_vector();
  const int64_t rows = first.dim(0);
  shape[0] = rows * batches;
  MOE_ASSIGN_OR_RETURN(Tensor out, Tensor::try_empty(Shape(shape), first.dtype()));
  char* dst = static_cast<char*>(out.raw());
  for (int64_t b = 0; b < batches; ++b) {
    const Tensor& part = decisions[static_cast<size_t>(b * layers + l)].*field;
    if (part.shape() != first.shape() || part.dtype() != first.dtype()) {
      return internal_error("routing decisions of batch ", b, " layer ", l, " are ",
                            part.view().to_string(), ", batch 0's ", first.view().to_string());
    }
    MOE_ASSIGN_OR_RETURN(Tensor host, ctx.read_back(part));
    std::memcpy(dst, host.raw(), host.nbytes());
    dst += host.nbytes();
  }
  return out;
}

}  // namespace

Status write_routing_file(const std::string& path, Context& ctx, int layers, int64_t batch,
                          int64_t seq_len, const std::vector<RoutingDecisions>& decisions) {
  if (layers < 1 || decisions.empty() || decisions.size() % static_cast<size_t>(layers) != 0) {
    return invalid_argument_error("routing decisions: ", decisions.size(), " entries for ", layers,
                                  " MoE layers (the model has no MoE layer, or nothing was "
                                  "evaluated)");
  }
  std::vector<Tensor> keep;  // the host tensors stay alive until written
  ckpt::SafetensorsWriter writer;
  for (int l = 0; l < layers; ++l) {
    const std::string prefix = str_cat("moe.", l, ".");
    MOE_ASSIGN_OR_RETURN(Tensor experts,
                         stack_layer(ctx, layers, l, decisions, &RoutingDecisions::experts));
    MOE_ASSIGN_OR_RETURN(Tensor slot,
                         stack_layer(ctx, layers, l, decisions, &RoutingDecisions::slot));
    writer.add(prefix + "experts", keep.emplace_back(std::move(experts)));
    writer.add(prefix + "slot", keep.emplace_back(std::move(slot)));
    if (decisions[static_cast<size_t>(l)].mask.numel() > 0) {
      MOE_ASSIGN_OR_RETURN(Tensor mask,
                           stack_layer(ctx, layers, l, decisions, &RoutingDecisions::mask));
      writer.add(prefix + "mask", keep.emplace_back(std::move(mask)));
    }
  }
  writer.set_metadata("format", kRoutingFileFormat);
  writer.set_metadata("format_version", "1");
  writer.set_metadata("layers", std::to_string(layers));
  writer.set_metadata("batch", std::to_string(batch));
  writer.set_metadata("seq_len", std::to_string(seq_len));
  writer.set_metadata("batches", std::to_string(decisions.size() / static_cast<size_t>(layers)));
  return writer.write(path);
}

}  // namespace moe
