#include "core/checkpoint/checkpoint_io.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "core/io/file_util.h"
#include "proto/checkpoint_convert.h"

namespace moe::ckpt {
namespace fs = std::filesystem;
namespace {

// The step of a directory named "ckpt-<at least 8 digits>", or -1 for any other name
// (including "ckpt-00000120.tmp" and "ckpt-00000120.old").
int64_t checkpoint_step(const std::string& name) {
  constexpr size_t kPrefix = 5;  // "ckpt-"
  if (name.rfind("ckpt-", 0) != 0 || name.size() < kPrefix + 8 || name.size() > kPrefix + 18) return -1;
  int64_t step = 0;
  for (size_t i = kPrefix; i < name.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    if (!std::isdigit(c)) return -1;
    step = step * 10 + (c - '0');
  }
  return step;
}

// Steps and paths of the ckpt-<digits> directories of run_dir, ascending.
std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& run_dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run_dir, ec)) {
    const int64_t step = checkpoint_step(entry.path().filename().string());
    std::error_code type_ec;
    if (step >= 0 && entry.is_directory(type_ec)) out.emplace_back(step, entry.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A manifest path must stay inside the checkpoint directory.
bool is_safe_relative_path(const std::string& p) {
  if (p.empty() || p.front() == '/') return false;
  for (const fs::path& part : fs::path(p)) {
    if (part == ".." || part == ".") return false;
  }
  return true;
}

}  // namespace

std::string checkpoint_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "ckpt-%08lld", static_cast<long long>(step));
  return buf;
}

StatusOr<CheckpointManifestInfo> read_manifest(const std::string& dir) {
  const std::string path = dir + "/manifest.pb";
  StatusOr<std::string> bytes = io::read_file(path);
  if (!bytes.ok()) return not_found_error("no checkpoint in ", dir, " (manifest.pb missing)");
  return parse_manifest(*bytes, path);
}

Status write_manifest(const std::string& dir, const CheckpointManifestInfo& info) {
  return io::write_file_atomic(dir + "/manifest.pb", serialize_manifest(info));
}

Status verify_checkpoint_dir(const std::string& dir, const CheckpointManifestInfo& info) {
  for (const CheckpointFileInfo& f : info.files) {
    if (!is_safe_relative_path(f.path)) {
      return data_loss_error("checkpoint ", dir, ": the manifest lists '", f.path,
                             "', which is not a path inside the checkpoint directory");
    }
    const std::string path = dir + "/" + f.path;
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) {
      return data_loss_error("checkpoint ", dir, ": file ", f.path, " listed in the manifest is missing");
    }
    const uintmax_t size = fs::file_size(path, ec);
    if (ec) return data_loss_error("checkpoint ", dir, ": cannot stat ", f.path, ": ", ec.message());
    if (size != f.size_bytes) {
      return data_loss_error("checkpoint ", dir, ": file ", f.path, " is ", size, " bytes, manifest says ",
                             f.size_bytes, size < f.size_bytes ? " (truncated?)" : "");
    }
    StatusOr<uint32_t> crc = io::crc32_of_file(path);
    if (!crc.ok()) return data_loss_error("checkpoint ", dir, ": ", crc.status().message());
    if (*crc != f.crc32) {
      return data_loss_error("checkpoint ", dir, ": checksum mismatch in ", f.path, " (crc32 ", *crc,
                             ", manifest says ", f.crc32, ")");
    }
  }
  return Status::OK();
}

StatusOr<CheckpointFileInfo> describe_file(const std::string& dir, const std::string& relative_path,
                                           CheckpointFileKind kind, int ep_rank, int ep_size) {
  if (!is_safe_relative_path(relative_path)) {
    return invalid_argument_error("describe_file: '", relative_path, "' is not a path inside ", dir);
  }
  CheckpointFileInfo f;
  f.path = relative_path;
  f.kind = kind;
  f.ep_rank = ep_rank;
  f.ep_size = ep_size;
  const std::string path = dir + "/" + relative_path;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return not_found_error("checkpoint file ", path, " is missing");
  f.size_bytes = fs::file_size(path, ec);
  if (ec) return not_found_error("checkpoint file ", path, " is missing: ", ec.message());
  MOE_ASSIGN_OR_RETURN(f.crc32, io::crc32_of_file(path));
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
  int64_t complete = 0;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (!read_manifest(it->second).ok()) continue;  // not ours to judge: left alone
    if (++complete <= keep) continue;
    std::error_code ec;
    fs::remove_all(it->second, ec);
    if (ec) return internal_error("cannot remove old checkpoint ", it->second, ": ", ec.message());
  }
  return Status::OK();
}

}  // namespace moe::ckpt
