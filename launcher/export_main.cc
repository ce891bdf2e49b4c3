// momoe-export: a checkpoint (any EP layout) as a folder PyTorch loads without momoe
// (docs/export_format.md): model.safetensors in torch.nn layout, config.json, and the tokenizer
// files. python/momoe_torch builds the model from it.
//
//   momoe-export --checkpoint runs/quickstart/ckpt-00000300 --out exported/quickstart
#include <cstdio>
#include <filesystem>

#include "core/checkpoint/hf_export.h"
#include "core/checkpoint/model_export.h"
#include "core/inference/checkpoint_model.h"
#include "io/file_util.h"
#include "launcher/exit_status.h"
#include "launcher/flags.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

// The tokenizer files a checkpoint holds (vocab.txt, or tokenizer.model and tokenizer.json).
std::vector<std::string> tokenizer_files(const std::string& dir) {
  std::vector<std::string> files;
  for (const char* name : {"vocab.txt", data::kSentencePieceModelFile, "tokenizer.json"}) {
    std::error_code ec;
    if (fs::is_regular_file(fs::path(dir) / name, ec)) files.push_back(name);
  }
  return files;
}

StatusOr<std::string> run_export(const FlagParser& flags) {
  const std::string out = flags.get("out");
  std::error_code ec;
  if (fs::exists(out, ec)) {
    return failed_precondition_error(
        "--out ", out,
        " exists: momoe-export writes a new folder (remove it, or choose "
        "another --out)");
  }
  if (fs::exists(out + io::kTmpSuffix, ec)) {
    return failed_precondition_error(out, io::kTmpSuffix,
                                     " exists (an interrupted export, or a folder of yours): "
                                     "momoe-export writes there first; remove it or choose "
                                     "another --out");
  }
  MOE_ASSIGN_OR_RETURN(CheckpointModel c, open_checkpoint(flags.get("checkpoint")));
  // On the CPU whatever the checkpoint was trained on: export only reads the weights.
  MOE_RETURN_IF_ERROR(open_device(&c, DeviceKind::kCpu, 1));
  MOE_RETURN_IF_ERROR(load_model(&c));

  ExportSource source;
  source.checkpoint = c.dir;
  source.step = c.manifest.step;
  source.run_id = c.manifest.run_id;
  source.branch = c.manifest.branch;
  source.config_text = c.manifest.config_text;
  source.eval_batch = c.eval_batch();
  source.tokenizer_kind =
      c.tokenizer->kind() == data::Tokenizer::Kind::kWord ? "word" : "sentencepiece";
  source.vocab_size = c.tokenizer->size();
  source.vocab_fingerprint = c.tokenizer->fingerprint();
  source.tokenizer_files = tokenizer_files(c.dir);

  const TransformersLayout hf = transformers_layout(c.model->config());
  // Written under OUT.tmp and renamed when whole: a folder named OUT is always complete.
  MOE_ASSIGN_OR_RETURN(io::AtomicDirectory folder, io::AtomicDirectory::begin(out));
  const Status written = [&]() -> Status {
    MOE_RETURN_IF_ERROR(export_model(c.model.get(), source, folder.path()));
    if (!hf.architecture.empty()) {
      // A published architecture's shape: transformers' own layout too, in a subfolder.
      std::error_code ec;
      std::filesystem::create_directory(folder.path() + "/transformers", ec);
      if (ec) {
        return unavailable_error("cannot create ", folder.path(), "/transformers: ", ec.message());
      }
      MOE_RETURN_IF_ERROR(export_transformers(c.model.get(), folder.path() + "/transformers"));
    }
    for (const std::string& name : source.tokenizer_files) {
      MOE_ASSIGN_OR_RETURN(std::string bytes, io::read_file(c.dir + "/" + name));
      MOE_RETURN_IF_ERROR(io::write_file_atomic(folder.path() + "/" + name, bytes));
    }
    return folder.commit();
  }();
  if (!written.ok()) {
    io::remove_tree(folder.path()).ignore_error();  // nothing half-written is left behind
    return written;
  }
  int64_t tensors = 0;
  for (const auto& p : c.model->params().all()) {
    tensors += p->kind == ParamKind::kExpert ? p->shape[0] : 1;
  }
  return str_cat(
      "momoe-export: ", out, ": ", tensors, " tensors (", c.model->params().numel(),
      " parameters) from ", c.dir, " (step ", c.manifest.step, ", EP ", c.manifest.ep_size,
      " layout), config.json, ", source.tokenizer_files.size(), " tokenizer file(s); ",
      hf.architecture.empty()
          ? str_cat("no transformers layout (", hf.why_not, ")")
          : str_cat("transformers' ", hf.architecture, " layout in ", out, "/transformers"));
}

int run(int argc, char** argv) {
  FlagParser flags(
      "usage: momoe-export --checkpoint DIR --out DIR\n"
      "Writes model.safetensors (torch.nn names and layout), config.json and the tokenizer\n"
      "files; python/momoe_torch loads the folder (docs/export_format.md). A model with\n"
      "exactly Mixtral's, Qwen2-MoE's or Qwen3-MoE's shape also gets transformers' layout\n"
      "in OUT/transformers.\n",
      "example: momoe-export --checkpoint runs/quickstart/ckpt-00000300 --out "
      "exported/quickstart\n");
  flags.value("checkpoint", "a checkpoint directory (RUN_DIR/ckpt-<step>), any EP layout");
  flags.value("out", "the folder to write (must not exist)");
  if (std::optional<int> code = flags.parse_or_exit_code(argc, argv)) return *code;
  if (!flags.has("checkpoint") || !flags.has("out")) {
    return exit_with(invalid_argument_error("--checkpoint DIR and --out DIR are required"));
  }
  const StatusOr<std::string> done = run_export(flags);
  if (!done.ok()) return exit_with(done.status());
  std::printf("%s\n", done->c_str());
  return 0;
}

}  // namespace
}  // namespace moe

int main(int argc, char** argv) { return moe::run(argc, argv); }
