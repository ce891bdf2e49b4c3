#include "launcher/device_flags.h"

#include <optional>

namespace moe {

void declare_device_flags(FlagParser* flags) {
  flags->value("device", "cpu or cuda (default: the device the checkpoint was trained on)");
  flags->value("threads",
               "CPU threads (default: the checkpoint's parallel.threads; 0 = every core)");
}

Status open_device_from_flags(CheckpointModel* c, const FlagParser& flags) {
  const std::string name = flags.get("device");
  std::optional<DeviceKind> device;
  if (name == "cpu") {
    device = DeviceKind::kCpu;
  } else if (name == "cuda") {
    device = DeviceKind::kCuda;
  } else if (!name.empty()) {
    return invalid_argument_error("--device ", name, " is not one of cpu, cuda");
  }
  MOE_ASSIGN_OR_RETURN(const int64_t threads, flags.get_int("threads", c->cfg.parallel.threads));
  if (threads < 0 || threads > 4096) {
    return invalid_argument_error("--threads ", threads, " must be in [0, 4096] (0: every core)");
  }
  Status opened = open_device(c, device, static_cast<int>(threads));
  if (!opened.ok() && !device && c->cfg.train.device == DeviceKind::kCuda) {
    return Status(opened.code(),
                  str_cat(opened.message(), "; pass --device cpu to use it on the CPU"));
  }
  return opened;
}

}  // namespace moe
