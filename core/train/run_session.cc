#include "core/train/run_session.h"

#include <filesystem>

#include "base/hash.h"
#include "comm/agree.h"
#include "core/checkpoint/checkpoint_io.h"
#include "io/file_util.h"
#include "proto/run_convert.h"

namespace moe {
namespace {

// The manifest key of the training split's content fingerprint (corpus_fingerprints).
constexpr const char* kTrainContents = "data.train contents";

bool same_directory(const std::filesystem::path& a, const std::string& b) {
  std::error_code ec;
  return std::filesystem::equivalent(a, b, ec);
}

}  // namespace

std::map<std::string, std::string> corpus_fingerprints(const data::TokenizedCorpus& corpus) {
  std::map<std::string, std::string> out;
  for (const data::TokenSplit* s : {&corpus.train, &corpus.valid, &corpus.test}) {
    if (!s->present()) continue;
    out[str_cat("data.", s->name, " contents")] = str_cat(
        s->size(), " tokens, fingerprint ", io::hex64(data::contents_fingerprint(*s)).substr(2));
  }
  return out;
}

StatusOr<std::unique_ptr<RunSession>> RunSession::open(const SessionOptions& opts,
                                                       comm::Communicator* world) {
  std::unique_ptr<RunSession> s(new RunSession(opts, world));
  // Rank 0 first: on a file system the ranks share, the directory is rank 0's to remove.
  Status taken = Status::OK();
  if (s->leader()) {
    taken = s->create_run_directory();
    if (taken.ok()) taken = s->take_run_directory();
  }
  MOE_RETURN_IF_ERROR(agree(world, taken));
  if (!s->leader()) MOE_RETURN_IF_ERROR(s->create_run_directory());
  return s;
}

Status RunSession::create_run_directory() {
  std::error_code ec;
  for (std::filesystem::path p = std::filesystem::path(opts_.run_dir).lexically_normal();
       !p.empty() && !std::filesystem::exists(p, ec); p = p.parent_path()) {
    created_.push_back(p.string());
    if (p == p.parent_path()) break;
  }
  std::filesystem::create_directories(opts_.run_dir, ec);
  if (ec) return internal_error("cannot create run directory ", opts_.run_dir, ": ", ec.message());
  return Status::OK();
}

void RunSession::discard_created_directory() {
  if (created_.empty()) return;
  lock_.reset();  // released before its file goes
  std::error_code ec;
  std::filesystem::remove_all(created_[0], ec);
  // The parents it created, only while empty (another job may have put its run there).
  for (size_t i = 1; i < created_.size(); ++i) std::filesystem::remove(created_[i], ec);
  created_.clear();
}

void RunSession::say(const std::string& line) const {
  if (opts_.progress == nullptr || !leader()) return;
  std::fprintf(opts_.progress, "momoe: %s\n", line.c_str());
  std::fflush(opts_.progress);
}

Status RunSession::take_run_directory() {
  std::string note;
  MOE_ASSIGN_OR_RETURN(RunDirectoryLock lock, RunDirectoryLock::acquire(opts_.run_dir, &note));
  lock_.emplace(std::move(lock));
  if (!note.empty()) say(note);
  MOE_ASSIGN_OR_RETURN(std::vector<std::string> recovered,
                       ckpt::recover_checkpoints(opts_.run_dir));
  for (const std::string& line : recovered) say("recovery: " + line);
  if (!opts_.resume) {
    MOE_ASSIGN_OR_RETURN(std::string archived, archive_previous_run(opts_.run_dir));
    if (!archived.empty()) say("--fresh: " + archived);
  } else if (opts_.resume_from.empty()) {
    MOE_RETURN_IF_ERROR(start_over_without_checkpoint());
  }
  return Status::OK();
}

Status RunSession::start_over_without_checkpoint() {
  bool checkpoint = false, records = false;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(opts_.run_dir, ec)) {
    const std::string name = e.path().filename().string();
    checkpoint = checkpoint || name.rfind("ckpt-", 0) == 0;
    records = records || name == "stats.pb" || name == kMetricsFile;
  }
  if (ec) return internal_error("cannot list ", opts_.run_dir, ": ", ec.message());
  if (checkpoint || !records) return Status::OK();
  MOE_ASSIGN_OR_RETURN(std::string archived, archive_previous_run(opts_.run_dir));
  say(str_cat("no checkpoint in ", opts_.run_dir,
              " to resume from: the earlier run there stopped before its first save, so this "
              "run starts over from step 0 (checkpoints come every train.checkpoint_every "
              "steps and train.checkpoint_minutes minutes); ",
              archived, ", so that its records do not mix with this run's"));
  return Status::OK();
}

StatusOr<std::string> RunSession::choose_resume(
    const RunConfig& cfg, const std::map<std::string, std::string>& fingerprints) {
  if (!opts_.resume) return std::string();
  std::string resume;
  Status chosen = Status::OK();
  if (leader()) {
    StatusOr<std::string> c = pick_checkpoint(cfg, fingerprints);
    if (c.ok()) resume = *c;
    chosen = c.status();
  }
  MOE_RETURN_IF_ERROR(agree(world_, chosen));
  if (world_ != nullptr && world_->world_size() > 1) {
    MOE_ASSIGN_OR_RETURN(resume, world_->broadcast_bytes(resume, 0));
  }
  return resume;
}

StatusOr<std::string> RunSession::pick_checkpoint(
    const RunConfig& cfg, const std::map<std::string, std::string>& fingerprints) {
  std::string path = opts_.resume_from;
  if (!path.empty()) {
    // Rerunning a rollback's command continues the branch it started (its checkpoint may even
    // be pruned by now, the branch having newer ones) instead of rolling back again.
    const std::filesystem::path named(path);
    if (same_directory(named.parent_path(), opts_.run_dir)) {
      const std::string branch =
          ckpt::newest_checkpoint_branched_from(opts_.run_dir, named.filename().string());
      if (!branch.empty()) {
        say(str_cat("a branch started from ", path, " already reached ", branch,
                    ": continuing it (to roll back to ", named.filename().string(),
                    " again, move that branch's checkpoints out of ", opts_.run_dir, ")"));
        path = branch;
      }
    }
  }
  if (path.empty()) {
    StatusOr<std::string> found = ckpt::find_resume_checkpoint(opts_.run_dir);
    if (found.status().code() == StatusCode::kNotFound) return std::string();
    MOE_RETURN_IF_ERROR(found.status());
    path = *found;
  }
  MOE_RETURN_IF_ERROR(check_config_change(path, cfg, fingerprints));
  return path;
}

Status RunSession::check_config_change(const std::string& checkpoint, const RunConfig& cfg,
                                       const std::map<std::string, std::string>& fingerprints) {
  MOE_ASSIGN_OR_RETURN(CheckpointManifestInfo m, ckpt::read_manifest(checkpoint));
  // Resolve the stored config with this build: a format-1 checkpoint stored it as written, and a
  // later one by an older build lacks the fields added since (data.dataset, data.tokenizer, ...),
  // which read as their defaults, not as changes.
  std::string before = m.config_text;
  StatusOr<RunConfig> old = parse_run_config(before, checkpoint + "/manifest.pb");
  if (!old.ok()) {
    return Status(old.status().code(), str_cat("the config of checkpoint ", checkpoint,
                                               " does not parse: ", old.status().message()));
  }
  if (old->model.vocab_size == 0) old->model.vocab_size = cfg.model.vocab_size;
  before = resolved_config_text(*old);
  if (m.format_version < 2) {
    say(str_cat(checkpoint,
                " is a format-1 checkpoint: its manifest has no checksum and its "
                "config was resolved with this build's defaults"));
  }
  MOE_ASSIGN_OR_RETURN(std::vector<ConfigChange> changes, diff_configs(before, cfg.text));
  // The corpus behind the same paths: a split whose contents changed (lines shuffled, text
  // appended) is a change too; the training split's changes what training computes.
  for (const auto& [key, value] : fingerprints) {
    auto was = m.extra.find(key);
    if (was != m.extra.end() && was->second != value) changes.push_back({key, was->second, value});
  }
  if (changes.empty()) return Status::OK();
  // The same training tokens (their fingerprint recorded and equal): where they come from (a
  // text corpus or its prepared dataset, another path or tokenizer file) changes nothing
  // training computes (docs/data_format.md).
  const auto recorded = m.extra.find(kTrainContents);
  const auto now = fingerprints.find(kTrainContents);
  const bool same_tokens =
      recorded != m.extra.end() && now != fingerprints.end() && recorded->second == now->second;
  std::string refused;
  say(str_cat("the config differs from ", checkpoint, "'s in ", changes.size(), " field(s):"));
  for (const ConfigChange& c : changes) {
    // A cosine schedule decays over train.steps: a longer or shorter run changes the learning
    // rate of the steps already planned (and of the next step, at once).
    const bool reschedules =
        c.path == "train.steps" && cfg.train.schedule == LrScheduleKind::kCosine;
    // A split's contents: only the training split's change training.
    const bool contents = fingerprints.count(c.path) > 0;
    const bool data_source =
        same_tokens && c.path.compare(0, 5, "data.") == 0 && changes_training(c);
    const bool training = contents      ? c.path == kTrainContents
                          : data_source ? false
                                        : changes_training(c) || reschedules;
    say(str_cat("  ", c.path, ": ", c.before, " -> ", c.after,
                reschedules   ? "  (changes the COSINE learning-rate schedule of the steps already "
                                "planned: it decays over train.steps)"
                : training    ? "  (changes what training computes)"
                : data_source ? "  (the same training tokens: their fingerprint is unchanged)"
                              : ""));
    if (training)
      refused += str_cat(refused.empty() ? "" : ", ", c.path, ": ", c.before, " -> ", c.after);
  }
  if (!refused.empty() && !opts_.allow_config_change) {
    return failed_precondition_error(
        "resuming from ", checkpoint, " with this config would change what training computes (",
        refused, "); pass --allow-config-change to resume anyway, or --fresh to start a new run");
  }
  return Status::OK();
}

Status RunSession::start_lineage(const std::string& resume, Coordinator* coordinator) {
  Status status = Status::OK();
  if (leader()) {
    // The run continues the checkpoint's run when it is one of this directory's; anything else
    // (a fresh start, another directory's checkpoint, a format-1 checkpoint) starts a new run.
    if (!resume.empty() &&
        same_directory(std::filesystem::path(resume).parent_path(), opts_.run_dir)) {
      StatusOr<CheckpointManifestInfo> m = ckpt::read_manifest(resume);
      if (m.ok()) {
        lineage_.run_id = m->run_id;
        status = follow_lineage(resume, *m, coordinator);
      }
    }
    if (lineage_.run_id.empty()) {
      lineage_ = Lineage{};
      lineage_.run_id = new_run_id();
      lineage_.branch = lineage_.run_id;
    }
  }
  return agree(world_, status);
}

Status RunSession::follow_lineage(const std::string& resume, const CheckpointManifestInfo& m,
                                  Coordinator* coordinator) {
  const std::string name = std::filesystem::path(resume).filename().string();
  MOE_ASSIGN_OR_RETURN(std::string archive, ckpt::archive_checkpoints_after(opts_.run_dir, m.step));
  if (archive.empty()) {
    // The newest checkpoint: its branch goes on.
    lineage_.branch = m.branch;
    lineage_.parent = m.parent;
    lineage_.ancestors = m.lineage;
    return Status::OK();
  }
  // A rollback: newer checkpoints belonged to a branch that this run abandons. They are kept
  // (moved out of the way, so that neither a plain resume nor pruning sees them), and this run
  // trains a new branch from `resume`.
  lineage_.branch = new_run_id();
  lineage_.parent = name;
  lineage_.ancestors = m.lineage;
  lineage_.ancestors.push_back(m.branch);
  say(str_cat("rolled back to ", name,
              ": the checkpoints after it are another branch, now kept in ", archive,
              " (nothing was deleted); this run trains a new branch from ", name));
  coordinator->report_rollback(m.step);  // readers drop the abandoned branch's statistics
  return Status::OK();
}

}  // namespace moe
