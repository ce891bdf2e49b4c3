// Crash safety of checkpoint writes and pruning, proven by killing momoe-train (SIGKILL, through
// the crash points of io/crash_point.h) at every rename and unlink of a save in turn. After
// each kill: every directory named ckpt-<step> is a whole checkpoint, the newest checkpoint that
// existed before the save is still there or the new one is complete, and a plain rerun recovers
// and finishes with parameters bit-identical to a run that was never interrupted.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "core/checkpoint/checkpoint_io.h"
#include "io/file_util.h"

extern char** environ;

namespace moe {
namespace {
namespace fs = std::filesystem;

struct Exit {
  bool killed = false;  // by SIGKILL
  int code = -1;
  std::string log;
};

// Runs momoe-train with the tiny config and `extra` flags; env_extra is added to the environment.
Exit train(const std::string& run_dir, const std::vector<std::string>& extra,
           const std::vector<std::string>& env_extra) {
  std::vector<std::string> args = {MOMOE_TRAIN,
                                   "--config",
                                   TINY_CONFIG,
                                   "--run-dir",
                                   run_dir,
                                   "--set",
                                   "train.checkpoint_every=2",
                                   "--set",
                                   "train.keep_checkpoints=1",
                                   "--set",
                                   "train.eval_sequences=8",
                                   "--set",
                                   "train.final_eval=SUBSET",  // the whole splits: seconds a run
                                   "--set",
                                   "data.cache_dir=" + fs::temp_directory_path().string() +
                                       "/momoe_crash_cache_" + std::to_string(::getpid())};
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<std::string> env = {"OPENBLAS_NUM_THREADS=1"};
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::string(*e).rfind("MOMOE_CRASH", 0) != 0) env.push_back(*e);
  }
  env.insert(env.end(), env_extra.begin(), env_extra.end());
  const std::string log = run_dir + ".log";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<char*> argv, envp;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = 0;
  Exit out;
  if (posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data()) != 0) return out;
  posix_spawn_file_actions_destroy(&actions);
  int status = 0;
  waitpid(pid, &status, 0);
  out.killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  out.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  out.log = *io::read_file(log);
  fs::remove(log);
  return out;
}

int count_crash_points(const std::string& log) {
  const std::regex point("momoe crash point ([0-9]+):");
  int n = 0;
  for (std::sregex_iterator it(log.begin(), log.end(), point), end; it != end; ++it) {
    n = std::max(n, std::stoi((*it)[1]));
  }
  return n;
}

// Every ckpt-<digits> directory verifies (manifest checksum, file sizes and CRCs).
void expect_every_checkpoint_whole(const std::string& run_dir, const std::string& when) {
  for (const ckpt::CheckpointDir& c : ckpt::list_checkpoints(run_dir)) {
    Status s = ckpt::verify_checkpoint(c.path);
    EXPECT_TRUE(s.ok()) << when << ": " << c.path << " looks whole but is not: " << s.to_string();
  }
}

class CrashSafetyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = (fs::temp_directory_path() / ("momoe_crash_" + std::to_string(::getpid()))).string();
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override {
    fs::remove_all(root_);
    fs::remove_all(fs::temp_directory_path().string() + "/momoe_crash_cache_" +
                   std::to_string(::getpid()));
  }
  // Kills `steps_to`-step runs started from a copy of `base` at every crash point of that run,
  // checking the invariants after each kill and after the recovering rerun.
  void kill_at_every_point(const std::string& base, int steps_to, int64_t durable_step,
                           const std::string& reference_dense) {
    const std::string steps = "train.steps=" + std::to_string(steps_to);
    const std::string traced = root_ + "/traced";
    fs::copy(base, traced, fs::copy_options::recursive);
    Exit t = train(traced, {"--set", steps}, {"MOMOE_CRASH_TRACE=1"});
    ASSERT_EQ(t.code, 0) << t.log;
    const int points = count_crash_points(t.log);
    ASSERT_GE(points, 8) << t.log;
    std::printf("%s: %d crash points\n", base.c_str(), points);
    for (int n = 1; n <= points; ++n) {
      SCOPED_TRACE("killed at crash point " + std::to_string(n));
      const std::string run = root_ + "/kill" + std::to_string(n);
      fs::copy(base, run, fs::copy_options::recursive);
      Exit k = train(run, {"--set", steps}, {"MOMOE_CRASH_AT=" + std::to_string(n)});
      ASSERT_TRUE(k.killed) << k.log;
      expect_every_checkpoint_whole(run, "after the kill");
      // The checkpoint that was durable before the save, or the new one, survives (possibly
      // under a temporary name that recovery completes).
      bool survivor = false;
      for (const auto& e : fs::directory_iterator(run)) {
        const std::string name = e.path().filename().string();
        if (name.rfind("ckpt-", 0) == 0 && ckpt::verify_checkpoint(e.path().string()).ok()) {
          StatusOr<CheckpointManifestInfo> m = ckpt::read_manifest(e.path().string());
          survivor = survivor || (m.ok() && m->step >= durable_step);
        }
      }
      EXPECT_TRUE(survivor) << "no intact checkpoint at or after step " << durable_step;
      Exit r = train(run, {"--set", steps}, {});
      ASSERT_EQ(r.code, 0) << r.log;
      // It continued from a checkpoint (a fresh start would reach the same parameters, since
      // training is deterministic, but would have lost the work).
      EXPECT_NE(r.log.find("momoe: resumed from " + run + "/ckpt-"), std::string::npos) << r.log;
      expect_every_checkpoint_whole(run, "after recovery");
      std::vector<std::string> names;
      for (const auto& e : fs::directory_iterator(run))
        names.push_back(e.path().filename().string());
      for (const std::string& name : names) {
        EXPECT_EQ(name.find(".tmp"), std::string::npos) << name;
        EXPECT_EQ(name.find(".trash"), std::string::npos) << name;
        EXPECT_EQ(name.find(".old"), std::string::npos) << name;
      }
      const std::string last = run + "/" + ckpt::checkpoint_dir_name(steps_to);
      ASSERT_TRUE(ckpt::verify_checkpoint(last).ok()) << r.log;
      EXPECT_EQ(*io::read_file(last + "/dense.safetensors"), reference_dense)
          << "the recovered run's parameters differ from the uninterrupted run's";
      fs::remove_all(run);
    }
  }
  std::string root_;
};

TEST_F(CrashSafetyTest, KilledAtEveryRenameAndUnlinkOfASaveAndItsPruning) {
  const std::string base = root_ + "/base";  // a run with its step-2 checkpoint
  ASSERT_EQ(train(base, {"--set", "train.steps=2"}, {}).code, 0);
  const std::string reference = root_ + "/reference";
  fs::copy(base, reference, fs::copy_options::recursive);
  Exit ref = train(reference, {"--set", "train.steps=4"}, {});
  ASSERT_EQ(ref.code, 0) << ref.log;
  const std::string dense = *io::read_file(reference + "/ckpt-00000004/dense.safetensors");
  // The save of step 4: its files, the manifest, the commit, then pruning step 2.
  kill_at_every_point(base, 4, 2, dense);
}

TEST_F(CrashSafetyTest, KilledAtEveryRenameAndUnlinkOfAReSave) {
  // A finished run rerun as is re-saves its last step over the existing checkpoint.
  const std::string base = root_ + "/base";
  ASSERT_EQ(train(base, {"--set", "train.steps=2"}, {}).code, 0);
  const std::string dense = *io::read_file(base + "/ckpt-00000002/dense.safetensors");
  kill_at_every_point(base, 2, 2, dense);
}

}  // namespace
}  // namespace moe
