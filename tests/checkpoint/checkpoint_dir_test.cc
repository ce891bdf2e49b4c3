// Checkpoint directories: CRC32 against published check values, crash-safe file and directory
// writes, choosing the checkpoint to resume from (never passing over a damaged one silently),
// pruning only this run's checkpoints, commit over an existing one, start-up recovery of every
// interrupted state, refusing truncated and corrupted files, every bit flip of the manifest
// detected, and the manifest's protobuf round trip (including hand-encoded bad manifests).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/checkpoint/checkpoint_io.h"
#include "io/file_util.h"
#include "proto/checkpoint_convert.h"

namespace moe::ckpt {
namespace {
namespace fs = std::filesystem;

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

class CheckpointDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = (fs::temp_directory_path() /
             ("momoe_ckpt_" +
              std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
              std::to_string(::getpid())))
                .string();
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  static void put(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  }
  static std::string get(const std::string& path) { return *io::read_file(path); }
  static std::vector<std::string> entries(const std::string& dir) {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  // A committed checkpoint of run `run_id` holding one data file, as the trainer writes it.
  std::string commit_checkpoint(int64_t step, const std::string& payload,
                                const std::string& run_id = "run-a", const std::string& branch = "",
                                const std::string& parent = "",
                                const std::vector<std::string>& lineage = {}) {
    StatusOr<io::AtomicDirectory> d =
        io::AtomicDirectory::begin(root_ + "/" + checkpoint_dir_name(step));
    EXPECT_TRUE(d.ok()) << d.status().to_string();
    put(d->path() + "/data.bin", payload);
    CheckpointManifestInfo m;
    m.step = step;
    m.run_id = run_id;
    m.branch = branch;
    m.parent = parent;
    m.lineage = lineage;
    StatusOr<CheckpointFileInfo> f =
        describe_file(d->path(), "data.bin", CheckpointFileKind::kDense, 0, 1);
    EXPECT_TRUE(f.ok()) << f.status().to_string();
    m.files.push_back(*f);
    EXPECT_TRUE(write_manifest(d->path(), m).ok());
    Status c = ckpt::commit_checkpoint(*d, run_id);
    EXPECT_TRUE(c.ok()) << c.to_string();
    return d->final_path();
  }

  std::string root_;
};

TEST_F(CheckpointDirTest, Crc32MatchesPublishedCheckValues) {
  // The CRC-32 (ISO-HDLC, zlib) check value of "123456789", and two more standard vectors.
  EXPECT_EQ(io::crc32_of("123456789"), 0xCBF43926u);
  EXPECT_EQ(io::crc32_of(""), 0u);
  EXPECT_EQ(io::crc32_of("The quick brown fox jumps over the lazy dog"), 0x414FA339u);
  EXPECT_EQ(io::crc32_update(io::crc32_of("12345"), "6789", 4), 0xCBF43926u);
  // Streaming over a file larger than the 1 MiB read block.
  std::string big;
  for (int i = 0; i < (3 << 19) + 7; ++i) big.push_back(static_cast<char>((i * 131) ^ (i >> 9)));
  put(root_ + "/big.bin", big);
  uint32_t piecewise = 0;
  for (size_t i = 0; i < big.size(); i += 1000) {
    piecewise = io::crc32_update(piecewise, big.data() + i, std::min<size_t>(1000, big.size() - i));
  }
  EXPECT_EQ(*io::crc32_of_file(root_ + "/big.bin"), piecewise);
  EXPECT_EQ(io::crc32_of(big), piecewise);
  put(root_ + "/check.txt", "123456789");
  EXPECT_EQ(*io::crc32_of_file(root_ + "/check.txt"), 0xCBF43926u);
  StatusOr<uint32_t> missing = io::crc32_of_file(root_ + "/nope");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(contains(missing.status().message(), root_ + "/nope"));
}

TEST_F(CheckpointDirTest, WriteFileAtomicReplacesAndLeavesNoTemporaries) {
  const std::string path = root_ + "/f.bin";
  ASSERT_TRUE(io::write_file_atomic(path, "first").ok());
  EXPECT_EQ(get(path), "first");
  const std::string binary("a\0b\xff", 4);
  ASSERT_TRUE(io::write_file_atomic(path, binary).ok());
  EXPECT_EQ(get(path), binary);
  ASSERT_TRUE(io::write_file_atomic(root_ + "/empty", "").ok());
  EXPECT_EQ(get(root_ + "/empty"), "");
  EXPECT_EQ(entries(root_), (std::vector<std::string>{"empty", "f.bin"}));
  Status s = io::write_file_atomic(root_ + "/no/such/dir/f.bin", "x");
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), root_ + "/no/such/dir/f.bin.tmp.")) << s.message();
  StatusOr<std::string> r = io::read_file(root_ + "/absent.bin");
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(contains(r.status().message(), root_ + "/absent.bin")) << r.status().message();
}

TEST_F(CheckpointDirTest, AtomicDirectoryIsInvisibleUntilCommitAndReplacesOnCommit) {
  const std::string final_dir = root_ + "/ckpt-00000007";
  put(root_ + "/keep.txt", "other files of the run are untouched");
  // A stale temporary directory from a crash is cleared by begin().
  fs::create_directories(final_dir + ".tmp/sub");
  put(final_dir + ".tmp/stale.bin", "stale");
  StatusOr<io::AtomicDirectory> d = io::AtomicDirectory::begin(final_dir + "/");  // trailing slash
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->path(), final_dir + ".tmp");
  EXPECT_EQ(d->final_path(), final_dir);
  EXPECT_TRUE(entries(d->path()).empty());
  fs::create_directories(d->path() + "/shards");
  put(d->path() + "/a.bin", "A1");
  put(d->path() + "/shards/s0.bin", "S0");
  EXPECT_FALSE(fs::exists(final_dir));
  ASSERT_TRUE(d->commit().ok());
  EXPECT_FALSE(fs::exists(final_dir + ".tmp"));
  EXPECT_EQ(get(final_dir + "/a.bin"), "A1");
  EXPECT_EQ(get(final_dir + "/shards/s0.bin"), "S0");
  Status again = d->commit();
  EXPECT_EQ(again.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(again.message(), final_dir + ".tmp")) << again.message();

  // Committing over an existing name is refused: the caller decides what happens to the old one
  // (ckpt::commit_checkpoint, below).
  StatusOr<io::AtomicDirectory> d2 = io::AtomicDirectory::begin(final_dir);
  ASSERT_TRUE(d2.ok());
  put(d2->path() + "/b.bin", "B2");
  Status over = d2->commit();
  EXPECT_EQ(over.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(over.message(), final_dir + " exists")) << over.message();
  EXPECT_EQ(get(final_dir + "/a.bin"), "A1");

  // attach() names the directory another rank began, without clearing it.
  StatusOr<io::AtomicDirectory> d3 = io::AtomicDirectory::begin(root_ + "/ckpt-00000008");
  put(d3->path() + "/rank0.bin", "r0");
  io::AtomicDirectory other = io::AtomicDirectory::attach(root_ + "/ckpt-00000008");
  put(other.path() + "/rank1.bin", "r1");
  ASSERT_TRUE(other.commit().ok());
  EXPECT_EQ(entries(root_ + "/ckpt-00000008"),
            (std::vector<std::string>{"rank0.bin", "rank1.bin"}));
}

TEST_F(CheckpointDirTest, ResumePicksTheNewestAndNeverPassesOverADamagedOneSilently) {
  EXPECT_EQ(find_resume_checkpoint(root_).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(find_resume_checkpoint(root_ + "/missing").status().code(), StatusCode::kNotFound);
  commit_checkpoint(5, "five");
  commit_checkpoint(40, "forty");
  commit_checkpoint(9, "nine");  // written later, but an older step
  // An uncommitted checkpoint (crash before commit): a ".tmp" directory, even with a manifest.
  StatusOr<io::AtomicDirectory> crashed =
      io::AtomicDirectory::begin(root_ + "/" + checkpoint_dir_name(50));
  ASSERT_TRUE(write_manifest(crashed->path(), CheckpointManifestInfo{}).ok());
  fs::create_directories(root_ + "/ckpt-123");  // too few digits
  fs::create_directories(root_ + "/ckpt-0000008x");
  fs::create_directories(root_ + "/xckpt-00000090");
  put(root_ + "/ckpt-00000080", "a file, not a directory");
  StatusOr<std::string> latest = find_resume_checkpoint(root_);
  ASSERT_TRUE(latest.ok()) << latest.status().to_string();
  EXPECT_EQ(*latest, root_ + "/ckpt-00000040");
  EXPECT_EQ(read_manifest(*latest)->step, 40);
  EXPECT_EQ(list_checkpoints(root_).size(), 3u);

  // Steps order numerically, including past 8 digits.
  const std::string big = commit_checkpoint(123456789, "big");
  EXPECT_EQ(fs::path(big).filename(), "ckpt-123456789");
  EXPECT_EQ(*find_resume_checkpoint(root_), big);
  // A damaged newest checkpoint is an error that names it, why, and the newest intact older one
  // with the flag to use it; 40 is damaged too (a file changed), so 9 is named.
  put(big + "/manifest.pb", "\xff\xff not a manifest");
  put(root_ + "/ckpt-00000040/data.bin", "fortY");
  StatusOr<std::string> refused = find_resume_checkpoint(root_);
  ASSERT_EQ(refused.status().code(), StatusCode::kDataLoss) << refused.status().to_string();
  const std::string msg = refused.status().message();
  EXPECT_TRUE(contains(msg, "cannot resume from " + big)) << msg;
  EXPECT_TRUE(contains(msg, "manifest.pb is corrupted")) << msg;
  EXPECT_TRUE(contains(msg, "--resume-from " + root_ + "/ckpt-00000009")) << msg;
  EXPECT_TRUE(contains(msg, "Nothing was deleted")) << msg;
  // A missing file of the newest is caught by the cheap check too.
  fs::remove_all(big);
  fs::remove(root_ + "/ckpt-00000040/data.bin");
  refused = find_resume_checkpoint(root_);
  EXPECT_TRUE(contains(refused.status().message(), "data.bin listed in the manifest is missing"))
      << refused.status().to_string();
}

TEST_F(CheckpointDirTest, PruningRemovesOnlyThisRunsCompleteCheckpoints) {
  commit_checkpoint(5, "five");
  commit_checkpoint(9, "nine");
  commit_checkpoint(12, "other run", "run-b");
  commit_checkpoint(40, "forty");
  const std::string damaged = commit_checkpoint(60, "sixty");
  put(damaged + "/manifest.pb", "\xff damaged");
  fs::create_directories(root_ + "/ckpt-00000070");  // no manifest
  ASSERT_TRUE(prune_checkpoints(root_, 2, "run-a", {"run-a"}).ok());
  EXPECT_FALSE(fs::exists(root_ + "/ckpt-00000005"));
  for (const char* kept :
       {"ckpt-00000009", "ckpt-00000012", "ckpt-00000040", "ckpt-00000060", "ckpt-00000070"}) {
    EXPECT_TRUE(fs::exists(root_ + "/" + kept)) << kept;
  }
  ASSERT_TRUE(prune_checkpoints(root_, 1, "run-a", {"run-a"}).ok());
  EXPECT_FALSE(fs::exists(root_ + "/ckpt-00000009"));
  EXPECT_TRUE(fs::exists(root_ + "/ckpt-00000012"));        // another run's: never ours to delete
  ASSERT_TRUE(prune_checkpoints(root_, 0, "", {""}).ok());  // no run id: removes nothing
  EXPECT_TRUE(fs::exists(root_ + "/ckpt-00000040"));
  for (const std::string& e : entries(root_)) EXPECT_FALSE(contains(e, ".trash")) << e;
}

// A run rolled back to step 10 trains branch "b" (parent ckpt-00000010, lineage {"run-a"});
// another branch "c" of the same run is not its lineage. Pruning keeps the newest of the live
// lineage (b and its ancestor run-a) and never touches c's.
TEST_F(CheckpointDirTest, PruningFollowsTheLiveLineage) {
  commit_checkpoint(5, "five");
  commit_checkpoint(10, "ten");
  commit_checkpoint(30, "thirty", "run-a", "c", "ckpt-00000020", {"run-a"});
  ASSERT_TRUE(prune_checkpoints(root_, 2, "run-a", {"run-a", "b"}).ok());
  EXPECT_TRUE(fs::exists(root_ + "/ckpt-00000005"));  // two of the lineage: both kept
  commit_checkpoint(15, "fifteen", "run-a", "b", "ckpt-00000010", {"run-a"});
  ASSERT_TRUE(prune_checkpoints(root_, 1, "run-a", {"run-a", "b"}).ok());
  // The branch has a newer durable checkpoint than the one it resumed from: only then does
  // the resume source go.
  EXPECT_EQ(entries(root_), (std::vector<std::string>{"ckpt-00000015", "ckpt-00000030"}));
  EXPECT_EQ(newest_checkpoint_branched_from(root_, "ckpt-00000010"), root_ + "/ckpt-00000015");
  EXPECT_EQ(newest_checkpoint_branched_from(root_, "ckpt-00000015"), "");
  StatusOr<CheckpointManifestInfo> m = read_manifest(root_ + "/ckpt-00000015");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->branch, "b");
  EXPECT_EQ(m->parent, "ckpt-00000010");
  EXPECT_EQ(m->lineage, std::vector<std::string>{"run-a"});
  // A manifest written before branches existed reads as its run's branch.
  EXPECT_EQ(read_manifest(root_ + "/ckpt-00000030")->branch, "c");
}

// A rollback to step 10 moves every newer checkpoint, whichever run or branch wrote it, into
// abandoned/: kept, and out of sight of resuming and pruning.
TEST_F(CheckpointDirTest, ARollbackArchivesTheNewerCheckpoints) {
  commit_checkpoint(10, "ten");
  commit_checkpoint(20, "twenty");
  commit_checkpoint(40, "forty", "run-b");
  StatusOr<std::string> archive = archive_checkpoints_after(root_, 10);
  ASSERT_TRUE(archive.ok()) << archive.status().to_string();
  EXPECT_TRUE(contains(*archive, root_ + "/abandoned/")) << *archive;
  EXPECT_TRUE(contains(*archive, "-after-ckpt-00000010")) << *archive;
  EXPECT_EQ(entries(*archive), (std::vector<std::string>{"ckpt-00000020", "ckpt-00000040"}));
  EXPECT_EQ(get(*archive + "/ckpt-00000040/data.bin"), "forty");
  EXPECT_EQ(list_checkpoints(root_).size(), 1u);
  EXPECT_EQ(*find_resume_checkpoint(root_), root_ + "/ckpt-00000010");
  EXPECT_EQ(*archive_checkpoints_after(root_, 10), "");  // nothing newer: nothing moved
}

// Re-saving a step whose checkpoint of this run is damaged keeps the damaged one aside (the error
// that reported it promised nothing was deleted) instead of replacing it silently.
TEST_F(CheckpointDirTest, ReSavingOverADamagedCheckpointKeepsItAside) {
  const std::string dir = commit_checkpoint(40, "forty");
  put(dir + "/data.bin", "fortY");  // same size, one byte flipped: only the checksum tells
  commit_checkpoint(40, "forty again");
  EXPECT_EQ(get(dir + "/data.bin"), "forty again");
  std::vector<std::string> names = entries(root_);
  ASSERT_EQ(names.size(), 2u);
  EXPECT_TRUE(contains(names[1], "ckpt-00000040.aside-")) << names[1];
  EXPECT_EQ(get(root_ + "/" + names[1] + "/data.bin"), "fortY");
}

TEST_F(CheckpointDirTest, CommitReplacesThisRunsCheckpointAndKeepsAnyOther) {
  const std::string dir = commit_checkpoint(7, "first");
  commit_checkpoint(7, "second");  // the same run re-saves step 7: replaced
  EXPECT_EQ(get(dir + "/data.bin"), "second");
  EXPECT_EQ(entries(root_), std::vector<std::string>{"ckpt-00000007"});
  commit_checkpoint(7, "third", "run-b");  // another run's step 7 is moved aside, not deleted
  EXPECT_EQ(get(dir + "/data.bin"), "third");
  std::vector<std::string> names = entries(root_);
  ASSERT_EQ(names.size(), 2u);
  EXPECT_TRUE(contains(names[1], "ckpt-00000007.aside-")) << names[1];
  EXPECT_EQ(get(root_ + "/" + names[1] + "/data.bin"), "second");
  put(dir + "/manifest.pb", "damaged");  // a damaged one is kept aside as well
  commit_checkpoint(7, "fourth", "run-b");
  EXPECT_EQ(entries(root_).size(), 3u);
}

TEST_F(CheckpointDirTest, RecoveryFinishesOrUndoesWhatACrashInterrupted) {
  // Step 4 committed; step 8 written completely but not renamed (crash inside the commit),
  // with the old step-8 checkpoint already renamed to .trash; step 12 half written; a pruned
  // checkpoint half deleted; an ".old" of an earlier version next to its replacement.
  commit_checkpoint(4, "four");
  const std::string eight = commit_checkpoint(8, "eight");
  fs::rename(eight, eight + ".trash");
  StatusOr<io::AtomicDirectory> d = io::AtomicDirectory::begin(root_ + "/ckpt-00000008");
  put(d->path() + "/data.bin", "eight again");
  CheckpointManifestInfo m;
  m.step = 8;
  m.run_id = "run-a";
  m.files.push_back(*describe_file(d->path(), "data.bin", CheckpointFileKind::kDense, 0, 1));
  ASSERT_TRUE(write_manifest(d->path(), m).ok());
  StatusOr<io::AtomicDirectory> twelve = io::AtomicDirectory::begin(root_ + "/ckpt-00000012");
  put(twelve->path() + "/data.bin", "half");  // no manifest yet
  fs::create_directories(root_ + "/ckpt-00000002.trash/sub");
  fs::copy(root_ + "/ckpt-00000004", root_ + "/ckpt-00000004.old", fs::copy_options::recursive);
  fs::copy(root_ + "/ckpt-00000004", root_ + "/ckpt-00000016.old", fs::copy_options::recursive);
  StatusOr<std::vector<std::string>> notes = recover_checkpoints(root_);
  ASSERT_TRUE(notes.ok()) << notes.status().to_string();
  EXPECT_EQ(notes->size(), 6u);
  EXPECT_EQ(entries(root_),
            (std::vector<std::string>{"ckpt-00000004", "ckpt-00000008", "ckpt-00000016"}));
  EXPECT_EQ(get(root_ + "/ckpt-00000008/data.bin"), "eight again");
  EXPECT_EQ(get(root_ + "/ckpt-00000016/data.bin"), "four");  // restored from its complete .old
  for (const char* c : {"/ckpt-00000004", "/ckpt-00000008", "/ckpt-00000016"}) {
    EXPECT_TRUE(verify_checkpoint(root_ + c).ok()) << c;
  }
  EXPECT_TRUE(recover_checkpoints(root_)->empty());  // nothing left to do
}

TEST_F(CheckpointDirTest, VerifyRefusesMissingTruncatedCorruptedAndEscapingFiles) {
  const std::string dir = commit_checkpoint(3, "payload-03");
  StatusOr<CheckpointManifestInfo> m = read_manifest(dir);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_EQ(m->files.size(), 1u);
  EXPECT_EQ(m->files[0].size_bytes, 10u);
  EXPECT_EQ(m->files[0].crc32, io::crc32_of("payload-03"));
  EXPECT_TRUE(verify_checkpoint_dir(dir, *m).ok());

  put(dir + "/data.bin", "payload-04");  // same size, one byte different
  Status s = verify_checkpoint_dir(dir, *m);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(s.message(), "checksum mismatch in data.bin")) << s.message();
  EXPECT_TRUE(contains(s.message(), dir)) << s.message();

  put(dir + "/data.bin", "pay");
  s = verify_checkpoint_dir(dir, *m);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(s.message(), "file data.bin is 3 bytes, manifest says 10")) << s.message();

  put(dir + "/data.bin", "payload-03 and more");
  EXPECT_TRUE(contains(verify_checkpoint_dir(dir, *m).message(), "is 19 bytes, manifest says 10"));

  fs::remove(dir + "/data.bin");
  s = verify_checkpoint_dir(dir, *m);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(s.message(), "data.bin listed in the manifest is missing")) << s.message();
  fs::create_directories(dir + "/data.bin");  // a directory where the file should be
  EXPECT_EQ(verify_checkpoint_dir(dir, *m).code(), StatusCode::kDataLoss);

  put(root_ + "/outside.bin", "payload-03");
  for (const char* bad : {"../outside.bin", "/etc/hostname", "a/../../outside.bin", ""}) {
    CheckpointManifestInfo escaping = *m;
    escaping.files[0].path = bad;
    s = verify_checkpoint_dir(dir, escaping);
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << bad;
    EXPECT_TRUE(contains(s.message(), "not a path inside")) << s.message();
  }
  EXPECT_EQ(describe_file(dir, "../outside.bin", CheckpointFileKind::kOther, 0, 1).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(describe_file(dir, "absent.bin", CheckpointFileKind::kOther, 0, 1).status().code(),
            StatusCode::kNotFound);
}

TEST_F(CheckpointDirTest, ReadManifestErrorsNameTheDirectory) {
  StatusOr<CheckpointManifestInfo> m = read_manifest(root_);
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(m.status().message(), "no checkpoint in " + root_ + " (manifest.pb missing)");
  put(root_ + "/manifest.pb", "\xff\xff garbage");
  m = read_manifest(root_);
  EXPECT_EQ(m.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(m.status().message(), root_ + "/manifest.pb")) << m.status().message();
}

CheckpointManifestInfo full_manifest() {
  CheckpointManifestInfo m;
  m.step = 1234;
  m.updates = 1200;
  m.created_unix_time = 1700000000;
  m.config_text = "model { d_model: 64 }\ntrain { steps: 10 }\n";
  const CheckpointFileKind kinds[] = {CheckpointFileKind::kDense, CheckpointFileKind::kExpertShard,
                                      CheckpointFileKind::kOptimizerDense,
                                      CheckpointFileKind::kOptimizerExpert,
                                      CheckpointFileKind::kOther};
  for (int i = 0; i < 5; ++i) {
    CheckpointFileInfo f;
    f.path = "file" + std::to_string(i) + ".safetensors";
    f.size_bytes = (1ull << 33) + static_cast<uint64_t>(i);
    f.crc32 = 0xFFFFFFF0u + static_cast<uint32_t>(i);
    f.kind = kinds[i];
    f.ep_rank = i;
    f.ep_size = 8;
    m.files.push_back(f);
  }
  m.seed = 0xDEADBEEFCAFEF00Dull;
  m.data_epoch = 3;
  m.data_position = 98765;
  m.world_size = 16;
  m.ep_size = 8;
  m.dp_size = 2;
  m.vocab_fingerprint = 0x8000000000000001ull;
  m.dtype = "f32";
  m.extra = {{"git", "abc123"}, {"note", "ünïcode"}};
  m.run_id = "0123456789abcdef";
  return m;
}

void expect_same(const CheckpointManifestInfo& a, const CheckpointManifestInfo& b) {
  EXPECT_EQ(a.format_version, b.format_version);
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.updates, b.updates);
  EXPECT_EQ(a.created_unix_time, b.created_unix_time);
  EXPECT_EQ(a.config_text, b.config_text);
  ASSERT_EQ(a.files.size(), b.files.size());
  for (size_t i = 0; i < a.files.size(); ++i) {
    EXPECT_EQ(a.files[i].path, b.files[i].path);
    EXPECT_EQ(a.files[i].size_bytes, b.files[i].size_bytes);
    EXPECT_EQ(a.files[i].crc32, b.files[i].crc32);
    EXPECT_EQ(a.files[i].kind, b.files[i].kind);
    EXPECT_EQ(a.files[i].ep_rank, b.files[i].ep_rank);
    EXPECT_EQ(a.files[i].ep_size, b.files[i].ep_size);
  }
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.data_epoch, b.data_epoch);
  EXPECT_EQ(a.data_position, b.data_position);
  EXPECT_EQ(a.world_size, b.world_size);
  EXPECT_EQ(a.ep_size, b.ep_size);
  EXPECT_EQ(a.dp_size, b.dp_size);
  EXPECT_EQ(a.vocab_fingerprint, b.vocab_fingerprint);
  EXPECT_EQ(a.dtype, b.dtype);
  EXPECT_EQ(a.extra, b.extra);
  EXPECT_EQ(a.run_id, b.run_id);
}

TEST_F(CheckpointDirTest, ManifestRoundTripsEveryField) {
  const CheckpointManifestInfo m = full_manifest();
  StatusOr<CheckpointManifestInfo> back = parse_manifest(serialize_manifest(m), "mem");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  expect_same(m, *back);
  EXPECT_EQ(serialize_manifest(m), serialize_manifest(m));

  ASSERT_TRUE(write_manifest(root_, m).ok());
  EXPECT_EQ(entries(root_), std::vector<std::string>{"manifest.pb"});
  back = read_manifest(root_);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  expect_same(m, *back);

  back = parse_manifest(serialize_manifest(CheckpointManifestInfo{}), "mem");
  ASSERT_TRUE(back.ok());
  expect_same(CheckpointManifestInfo{}, *back);
}

TEST_F(CheckpointDirTest, HandEncodedBadManifestsAreRefused) {
  // Protobuf wire bytes written by hand: field 1 (format_version) varint, field 6 (files)
  // length-delimited holding field 1 (path) "x" and field 4 (kind) varint.
  auto manifest = [](uint8_t version, uint8_t kind) {
    return std::string{0x08, static_cast<char>(version), 0x32, 0x05, 0x0a, 0x01, 'x',
                       0x20, static_cast<char>(kind)};
  };
  StatusOr<CheckpointManifestInfo> ok = parse_manifest(manifest(1, 2), "m.pb");
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  ASSERT_EQ(ok->files.size(), 1u);
  EXPECT_EQ(ok->files[0].path, "x");
  EXPECT_EQ(ok->files[0].kind, CheckpointFileKind::kExpertShard);

  // A bare manifest is format 1; any other version in one means damage (or an unknown format).
  StatusOr<CheckpointManifestInfo> bad = parse_manifest(manifest(2, 2), "m.pb");
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(bad.status().message(),
                       "m.pb is corrupted or of an unknown format (format version 2"))
      << bad.status().message();
  bad = parse_manifest(manifest(1, 9), "m.pb");
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(bad.status().message(), "file x has unknown kind 9"))
      << bad.status().message();
  bad = parse_manifest(manifest(1, 0), "m.pb");
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(bad.status().message(), "file x has no kind")) << bad.status().message();
  bad = parse_manifest(manifest(1, 2).substr(0, 6), "m.pb");  // cut inside the files entry
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(bad.status().message(), "m.pb is corrupted (it does not parse)"))
      << bad.status().message();
}

TEST_F(CheckpointDirTest, EveryBitFlipOfTheManifestIsDetected) {
  const std::string dir = commit_checkpoint(3, "payload");
  CheckpointManifestInfo m = full_manifest();
  m.files = read_manifest(dir)->files;
  ASSERT_TRUE(write_manifest(dir, m).ok());
  const std::string good = get(dir + "/manifest.pb");
  ASSERT_TRUE(read_manifest(dir).ok());
  int detected = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      StatusOr<CheckpointManifestInfo> r = parse_manifest(bad, "manifest.pb");
      if (!r.ok()) {
        EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().to_string();
        ++detected;
      } else {
        ADD_FAILURE() << "a flip of bit " << bit << " of byte " << i << " was not detected";
      }
    }
  }
  EXPECT_EQ(detected, static_cast<int>(good.size()) * 8);
  // Truncation anywhere is detected too.
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_FALSE(parse_manifest(good.substr(0, n), "manifest.pb").ok()) << n;
  }
}

}  // namespace
}  // namespace moe::ckpt
