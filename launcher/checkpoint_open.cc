#include "launcher/checkpoint_open.h"

#include "core/base/logging.h"
#include "core/checkpoint/checkpoint_io.h"
#include "core/io/file_util.h"
#include "core/train/checkpoint.h"
#include "core/train/run_device.h"
#include "kernels/reference/blas_library.h"
#include "proto/run_convert.h"

namespace moe {

StatusOr<OpenedCheckpoint> open_checkpoint(const FlagParser& flags, const std::string& verb) {
  OpenedCheckpoint ckpt;
  const std::string dir = flags.get("checkpoint");
  ckpt.dir = dir;
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
  MOE_ASSIGN_OR_RETURN(ckpt.manifest, std::move(manifest));
  const CheckpointManifestInfo& m = ckpt.manifest;
  MOE_ASSIGN_OR_RETURN(ckpt.cfg, parse_run_config(m.config_text, dir + "/manifest.pb", {}, 1));
  RunConfig& cfg = ckpt.cfg;
  // The tokenizer the checkpoint was trained with (vocab.txt, or tokenizer.model), so the text is
  // tokenized exactly as training did; one that is not the manifest's is refused by name.
  MOE_ASSIGN_OR_RETURN(ckpt.tokenizer, data::Tokenizer::load(dir));
  const data::Tokenizer& tokenizer = *ckpt.tokenizer;
  if (tokenizer.fingerprint() != m.vocab_fingerprint) {
    return data_loss_error(
        "checkpoint ", dir, ": its ",
        tokenizer.kind() == data::Tokenizer::Kind::kWord ? "vocab.txt"
                                                         : data::kSentencePieceModelFile,
        " (", tokenizer.describe(), ", fingerprint ", io::hex64(tokenizer.fingerprint()),
        ") is not the tokenizer the manifest records (fingerprint ", io::hex64(m.vocab_fingerprint),
        "): it was replaced or damaged");
  }
  cfg.model.vocab_size = tokenizer.size();
  MOE_RETURN_IF_ERROR(cfg.model.validate(1));
  // The device: --device, else the one the checkpoint was trained on.
  if (flags.has("device")) {
    const std::string d = flags.get("device");
    if (d != "cpu" && d != "cuda") {
      return invalid_argument_error("--device ", d, " is not one of cpu, cuda");
    }
    cfg.train.device = d == "cuda" ? DeviceKind::kCuda : DeviceKind::kCpu;
  }
  ContextOptions context;  // --threads, else the checkpoint's parallel.threads, else every core
  MOE_ASSIGN_OR_RETURN(const int64_t threads, flags.get_int("threads", cfg.parallel.threads));
  if (threads < 0 || threads > 4096) {
    return invalid_argument_error("--threads ", threads, " must be in [0, 4096] (0: every core)");
  }
  context.threads = static_cast<int>(threads);
  StatusOr<RunDevice> device = make_run_device(cfg.train.device, context, 0);
  if (!device.ok() && cfg.train.device == DeviceKind::kCuda && !flags.has("device")) {
    return Status(device.status().code(),
                  str_cat("checkpoint ", dir, " was trained on a GPU: ", device.status().message(),
                          "; pass --device cpu to ", verb, " it on the CPU"));
  }
  MOE_RETURN_IF_ERROR(device.status());
  ckpt.ctx = std::move(device->ctx);
  ckpt.device_description = device->description;
  if (cfg.train.device == DeviceKind::kCpu) {
    if (const std::string& w = kernels::ref::blas_info().warning; !w.empty()) log_warning(w);
  }
  return ckpt;
}

StatusOr<std::unique_ptr<TransformerLM>> load_model(const OpenedCheckpoint& ckpt) {
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<TransformerLM> model,
                       TransformerLM::create(ckpt.cfg.model, ckpt.ctx.get(),
                                             activation_dtype(ckpt.cfg.train.precision), nullptr));
  MOE_RETURN_IF_ERROR(load_parameters(ckpt.dir, model.get(), nullptr));
  return model;
}

}  // namespace moe
