#include "core/inference/checkpoint_model.h"

#include <algorithm>

#include "base/logging.h"
#include "core/checkpoint/checkpoint_io.h"
#include "core/checkpoint/training_checkpoint.h"
#include "core/train/run_device.h"
#include "io/file_util.h"
#include "kernels/cpu/blas_library.h"
#include "proto/run_convert.h"

namespace moe {

int64_t CheckpointModel::eval_batch() const {
  return std::max<int64_t>(1, cfg.train.micro_batch());
}

StatusOr<CheckpointModel> open_checkpoint(const std::string& dir) {
  CheckpointModel c;
  c.dir = dir;
  StatusOr<CheckpointManifestInfo> manifest = ckpt::read_manifest(dir);
  if (manifest.status().code() == StatusCode::kNotFound) {
    // A run directory instead of one of its checkpoints: name the newest.
    const std::vector<ckpt::CheckpointDir> inside = ckpt::list_checkpoints(dir);
    if (!inside.empty()) {
      return invalid_argument_error(dir, " is a run directory, not a checkpoint: its newest is ",
                                    inside.back().path, " (pass --checkpoint ", inside.back().path,
                                    ")");
    }
  }
  MOE_ASSIGN_OR_RETURN(c.manifest, std::move(manifest));
  MOE_ASSIGN_OR_RETURN(c.cfg,
                       parse_run_config(c.manifest.config_text, dir + "/manifest.pb", {}, 1));
  // The tokenizer the checkpoint was trained with (vocab.txt, or tokenizer.model), so text is
  // tokenized exactly as training did; one that is not the manifest's is refused by name.
  MOE_ASSIGN_OR_RETURN(c.tokenizer, data::Tokenizer::load(dir));
  if (c.tokenizer->fingerprint() != c.manifest.vocab_fingerprint) {
    return data_loss_error(
        "checkpoint ", dir, ": its ",
        c.tokenizer->kind() == data::Tokenizer::Kind::kWord ? "vocab.txt"
                                                            : data::kSentencePieceModelFile,
        " (", c.tokenizer->describe(), ", fingerprint ", io::hex64(c.tokenizer->fingerprint()),
        ") is not the tokenizer the manifest records (fingerprint ",
        io::hex64(c.manifest.vocab_fingerprint), "): it was replaced or damaged");
  }
  c.cfg.model.vocab_size = c.tokenizer->size();
  MOE_RETURN_IF_ERROR(c.cfg.model.validate(1));
  return c;
}

Status open_device(CheckpointModel* c, std::optional<DeviceKind> device, int threads) {
  if (device) c->cfg.train.device = *device;
  if (threads < 0 || threads > 4096) {
    return invalid_argument_error("threads = ", threads, " must be in [0, 4096] (0: every core)");
  }
  ContextOptions context;
  context.threads = threads;
  StatusOr<RunDevice> run_device = make_run_device(c->cfg.train.device, context, 0);
  if (!run_device.ok() && c->cfg.train.device == DeviceKind::kCuda && !device) {
    return Status(
        run_device.status().code(),
        str_cat("checkpoint ", c->dir, " was trained on a GPU: ", run_device.status().message()));
  }
  MOE_RETURN_IF_ERROR(run_device.status());
  c->ctx = std::move(run_device->ctx);
  c->device_description = run_device->description;
  if (c->cfg.train.device == DeviceKind::kCpu) {
    kernels::ref::print_blas_warning(0);
  }
  return Status::OK();
}

Status load_model(CheckpointModel* c) {
  MOE_ASSIGN_OR_RETURN(c->model,
                       TransformerLM::create(c->cfg.model, c->ctx.get(),
                                             activation_dtype(c->cfg.train.precision), nullptr));
  return load_parameters(c->dir, c->model.get(), nullptr);
}

}  // namespace moe
