#include "core/checkpoint/checkpoint_io.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "base/logging.h"
#include "io/file_util.h"
#include "proto/checkpoint_convert.h"

namespace moe::ckpt {
namespace fs = std::filesystem;
namespace {

// The step of a directory named "ckpt-<at least 8 digits>", or -1 for any other name
// (including "ckpt-00000120.tmp" and "ckpt-00000120.old").
int64_t checkpoint_step(const std::string& name) {
  constexpr size_t kPrefix = 5;  // "ckpt-"
  if (name.rfind("ckpt-", 0) != 0 || name.size() < kPrefix + 8 || name.size() > kPrefix + 18)
    return -1;
  int64_t step = 0;
  for (size_t i = kPrefix; i < name.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    if (!std::isdigit(c)) return -1;
    step = step * 10 + (c - '0');
  }
  return step;
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

Status verify_checkpoint_dir(const std::string& dir, const CheckpointManifestInfo& info,
                             bool checksums) {
  for (const CheckpointFileInfo& f : info.files) {
    if (!is_safe_relative_path(f.path)) {
      return data_loss_error("checkpoint ", dir, ": the manifest lists '", f.path,
                             "', which is not a path inside the checkpoint directory");
    }
    const std::string path = dir + "/" + f.path;
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) {
      return data_loss_error("checkpoint ", dir, ": file ", f.path,
                             " listed in the manifest is missing");
    }
    const uintmax_t size = fs::file_size(path, ec);
    if (ec)
      return data_loss_error("checkpoint ", dir, ": cannot stat ", f.path, ": ", ec.message());
    if (size != f.size_bytes) {
      return data_loss_error("checkpoint ", dir, ": file ", f.path, " is ", size,
                             " bytes, manifest says ", f.size_bytes,
                             size < f.size_bytes ? " (truncated?)" : "");
    }
    if (!checksums) continue;
    StatusOr<uint32_t> crc = io::crc32_of_file(path);
    if (!crc.ok()) return data_loss_error("checkpoint ", dir, ": ", crc.status().message());
    if (*crc != f.crc32) {
      return data_loss_error("checkpoint ", dir, ": checksum mismatch in ", f.path, " (crc32 ",
                             *crc, ", manifest says ", f.crc32, ")");
    }
  }
  return Status::OK();
}

Status verify_checkpoint(const std::string& dir) {
  MOE_ASSIGN_OR_RETURN(CheckpointManifestInfo m, read_manifest(dir));
  return verify_checkpoint_dir(dir, m, true);
}

StatusOr<CheckpointFileInfo> describe_file(const std::string& dir, const std::string& relative_path,
                                           CheckpointFileKind kind, int ep_rank, int ep_size) {
  if (!is_safe_relative_path(relative_path)) {
    return invalid_argument_error("describe_file: '", relative_path, "' is not a path inside ",
                                  dir);
  }
  CheckpointFileInfo f;
  f.path = relative_path;
  f.kind = kind;
  f.ep_rank = ep_rank;
  f.ep_size = ep_size;
  const std::string path = dir + "/" + relative_path;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    return not_found_error("checkpoint file ", path, " is missing");
  f.size_bytes = fs::file_size(path, ec);
  if (ec) return not_found_error("checkpoint file ", path, " is missing: ", ec.message());
  MOE_ASSIGN_OR_RETURN(f.crc32, io::crc32_of_file(path));
  return f;
}

std::vector<CheckpointDir> list_checkpoints(const std::string& run_dir) {
  std::vector<CheckpointDir> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run_dir, ec)) {
    const int64_t step = checkpoint_step(entry.path().filename().string());
    std::error_code type_ec;
    if (step >= 0 && entry.is_directory(type_ec)) out.push_back({step, entry.path().string()});
  }
  std::sort(out.begin(), out.end(),
            [](const CheckpointDir& a, const CheckpointDir& b) { return a.step < b.step; });
  return out;
}

Status damaged_checkpoint_error(const std::string& run_dir, const std::string& dir,
                                const Status& why) {
  std::vector<CheckpointDir> all = list_checkpoints(run_dir);
  int64_t damaged_step = -1;
  for (const CheckpointDir& c : all) {
    if (fs::path(c.path).filename() == fs::path(dir).filename()) damaged_step = c.step;
  }
  std::string older;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (damaged_step >= 0 && it->step >= damaged_step) continue;
    if (verify_checkpoint(it->path).ok()) {
      older = it->path;
      break;
    }
  }
  const std::string advice =
      older.empty() ? std::string(
                          " No older intact checkpoint exists: start a new run with --fresh (the "
                          "damaged checkpoint is kept).")
                    : str_cat(" The newest intact checkpoint is ", older,
                              ": resume from it with "
                              "--resume-from ",
                              older, ", or start a new run with --fresh. Nothing was deleted.");
  return Status(StatusCode::kDataLoss,
                str_cat("cannot resume from ", dir, ": ", why.message(), ".", advice));
}

StatusOr<std::string> find_resume_checkpoint(const std::string& run_dir) {
  std::vector<CheckpointDir> all = list_checkpoints(run_dir);
  if (all.empty()) return not_found_error("no checkpoint in ", run_dir);
  const std::string& newest = all.back().path;
  StatusOr<CheckpointManifestInfo> m = read_manifest(newest);
  Status ok = m.ok() ? verify_checkpoint_dir(newest, *m, /*checksums=*/false) : m.status();
  if (!ok.ok()) return damaged_checkpoint_error(run_dir, newest, ok);
  return newest;
}

Status commit_checkpoint(io::AtomicDirectory& dir, const std::string& run_id) {
  const std::string& final_dir = dir.final_path();
  std::error_code ec;
  std::string trash;
  if (fs::exists(fs::symlink_status(final_dir, ec))) {
    StatusOr<CheckpointManifestInfo> old = read_manifest(final_dir);
    // A checkpoint of this run is replaced only when it is intact: a damaged one is evidence
    // (and the error that reported it promised nothing was deleted).
    const Status intact = old.ok() ? verify_checkpoint_dir(final_dir, *old) : old.status();
    if (intact.ok() && !run_id.empty() && old->run_id == run_id) {
      trash = final_dir + io::kTrashSuffix;
      MOE_RETURN_IF_ERROR(io::remove_tree(trash));
      MOE_RETURN_IF_ERROR(io::rename_durable(final_dir, trash));
    } else {
      const std::string aside =
          io::unused_path(str_cat(final_dir, ".aside-", io::unix_time_seconds()));
      MOE_RETURN_IF_ERROR(io::rename_durable(final_dir, aside));
      log_warning("checkpoint ", final_dir,
                  !intact.ok() ? str_cat(" is damaged (", intact.message(), ")")
                               : str_cat(" was not written by this run (run ",
                                         old->run_id.empty() ? "unknown" : old->run_id, ")"),
                  ": kept as ", aside);
    }
  }
  MOE_RETURN_IF_ERROR(dir.commit());
  if (!trash.empty()) MOE_RETURN_IF_ERROR(io::remove_tree(trash));
  return Status::OK();
}

Status prune_checkpoints(const std::string& run_dir, int64_t keep, const std::string& run_id,
                         const std::vector<std::string>& live_branches) {
  std::vector<CheckpointDir> all = list_checkpoints(run_dir);
  int64_t kept = 0;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    StatusOr<CheckpointManifestInfo> m = read_manifest(it->path);
    if (!m.ok() || run_id.empty() || m->run_id != run_id) continue;  // not ours to judge
    if (std::find(live_branches.begin(), live_branches.end(), m->branch) == live_branches.end()) {
      continue;  // another branch's: not the lineage being trained
    }
    if (++kept <= keep) continue;
    MOE_RETURN_IF_ERROR(io::discard_tree(it->path));
  }
  return Status::OK();
}

StatusOr<std::string> archive_checkpoints_after(const std::string& run_dir, int64_t step) {
  std::vector<CheckpointDir> newer;
  for (const CheckpointDir& c : list_checkpoints(run_dir)) {
    if (c.step > step) newer.push_back(c);
  }
  if (newer.empty()) return std::string();
  const std::string archive = io::unused_path(str_cat(
      run_dir, "/abandoned/", io::unix_time_seconds(), "-after-", checkpoint_dir_name(step)));
  std::error_code ec;
  fs::create_directories(archive, ec);
  if (ec) return internal_error("cannot create ", archive, ": ", ec.message());
  for (const CheckpointDir& c : newer) {
    MOE_RETURN_IF_ERROR(
        io::rename_durable(c.path, archive + "/" + fs::path(c.path).filename().string()));
  }
  return archive;
}

std::string newest_checkpoint_branched_from(const std::string& run_dir, const std::string& parent) {
  std::vector<CheckpointDir> all = list_checkpoints(run_dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    StatusOr<CheckpointManifestInfo> m = read_manifest(it->path);
    if (m.ok() && !m->parent.empty() && m->parent == parent) return it->path;
  }
  return "";
}

StatusOr<std::vector<std::string>> recover_checkpoints(const std::string& run_dir) {
  std::vector<std::string> notes;
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run_dir, ec)) {
    names.push_back(entry.path().filename().string());
  }
  if (ec) return internal_error("cannot list ", run_dir, ": ", ec.message());
  std::sort(names.begin(), names.end());
  auto ends_with = [](const std::string& s, const std::string& suffix) {
    return s.size() > suffix.size() &&
           s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  for (const std::string& name : names) {
    const std::string path = run_dir + "/" + name;
    if (ends_with(name, io::kTrashSuffix)) {
      MOE_RETURN_IF_ERROR(io::remove_tree(path));
      notes.push_back(str_cat("removed ", path, " (a removal a crash interrupted)"));
      continue;
    }
    for (const std::string& suffix : {std::string(io::kTmpSuffix), std::string(".old")}) {
      if (!ends_with(name, suffix)) continue;
      const std::string base = name.substr(0, name.size() - suffix.size());
      if (checkpoint_step(base) < 0) continue;
      const std::string final_dir = run_dir + "/" + base;
      if (!fs::exists(fs::symlink_status(final_dir, ec)) && verify_checkpoint(path).ok()) {
        MOE_RETURN_IF_ERROR(io::rename_durable(path, final_dir));
        notes.push_back(str_cat("completed ", final_dir, " from ", path,
                                " (a checkpoint commit a crash interrupted)"));
      } else {
        MOE_RETURN_IF_ERROR(io::discard_tree(path));
        notes.push_back(str_cat(
            "removed ", path, " (",
            suffix == io::kTmpSuffix ? "an unfinished checkpoint" : "a replaced checkpoint", ")"));
      }
    }
  }
  return notes;
}

}  // namespace moe::ckpt
