#include "core/checkpoint/checkpoint_io.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "core/checkpoint/file_util.h"
#include "proto/checkpoint_convert.h"

namespace moe::ckpt {
namespace fs = std::filesystem;
namespace {

// Steps of the ckpt-<digits> directories of run_dir, ascending.
std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& run_dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || name.size() != 13 || name.rfind("ckpt-", 0) != 0) continue;
    if (!std::all_of(name.begin() + 5, name.end(), ::isdigit)) continue;
    out.emplace_back(std::stoll(name.substr(5)), entry.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::string checkpoint_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "ckpt-%08lld", static_cast<long long>(step));
  return buf;
}

StatusOr<CheckpointManifestInfo> read_manifest(const std::string& dir) {
  const std::string path = dir + "/manifest.pb";
  StatusOr<std::string> bytes = read_file(path);
  if (!bytes.ok()) return not_found_error("no checkpoint in ", dir, " (manifest.pb missing)");
  return parse_manifest(*bytes, path);
}

Status write_manifest(const std::string& dir, const CheckpointManifestInfo& info) {
  return write_file_atomic(dir + "/manifest.pb", serialize_manifest(info));
}

Status verify_checkpoint_dir(const std::string& dir, const CheckpointManifestInfo& info) {
  for (const CheckpointFileInfo& f : info.files) {
    const std::string path = dir + "/" + f.path;
    std::error_code ec;
    const uintmax_t size = fs::file_size(path, ec);
    if (ec) return data_loss_error("checkpoint ", dir, ": file ", f.path, " listed in the manifest is missing");
    if (size != f.size_bytes) {
      return data_loss_error("checkpoint ", dir, ": file ", f.path, " is ", size,
                             " bytes, manifest says ", f.size_bytes, " (truncated?)");
    }
    MOE_ASSIGN_OR_RETURN(uint32_t crc, crc32_of_file(path));
    if (crc != f.crc32) return data_loss_error("checkpoint ", dir, ": checksum mismatch in ", f.path);
  }
  return Status::OK();
}

StatusOr<CheckpointFileInfo> describe_file(const std::string& dir, const std::string& relative_path,
                                           CheckpointFileKind kind, int ep_rank, int ep_size) {
  CheckpointFileInfo f;
  f.path = relative_path;
  f.kind = kind;
  f.ep_rank = ep_rank;
  f.ep_size = ep_size;
  const std::string path = dir + "/" + relative_path;
  std::error_code ec;
  f.size_bytes = fs::file_size(path, ec);
  if (ec) return not_found_error("checkpoint file ", path, " is missing");
  MOE_ASSIGN_OR_RETURN(f.crc32, crc32_of_file(path));
  return f;
}

StatusOr<std::string> find_latest_checkpoint(const std::string& run_dir) {
  auto all = list_checkpoints(run_dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (read_manifest(it->second).ok()) return it->second;
  }
  return not_found_error("no complete checkpoint in ", run_dir);
}

Status prune_checkpoints(const std::string& run_dir, int64_t keep) {
  auto all = list_checkpoints(run_dir);
  for (size_t i = 0; i + static_cast<size_t>(std::max<int64_t>(keep, 0)) < all.size(); ++i) {
    std::error_code ec;
    fs::remove_all(all[i].second, ec);
    if (ec) return internal_error("cannot remove old checkpoint ", all[i].second, ": ", ec.message());
  }
  return Status::OK();
}

}  // namespace moe::ckpt
