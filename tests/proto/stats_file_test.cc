// RUN_DIR/stats.pb: checksummed records keep damage local. A flipped byte inside a record, or a
// garbled length, loses that record only (the reader resyncs at the next header); only a torn
// tail is ever cut, and what is cut is kept beside the file; a format-1 file (no checksums) is
// still read and converted when a run appends to it; a file that is not a stats file is refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "io/file_util.h"
#include "proto/stats.pb.h"
#include "proto/stats_convert.h"

namespace moe {
namespace {
namespace fs = std::filesystem;

class StatsFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() /
            ("momoe_stats_" +
             std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
             std::to_string(::getpid())))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = dir_ + "/stats.pb";
  }
  void TearDown() override { fs::remove_all(dir_); }

  static StepStatsInfo record(int64_t step) {
    StepStatsInfo s;
    s.step = step;
    s.loss = 7.0 - 0.01 * static_cast<double>(step);
    s.tokens = 128;
    RouterStatsInfo l;
    l.block = 1;
    l.expert_load = {step, 2 * step, 3, 4};
    s.layers.push_back(l);
    return s;
  }
  // Writes `n` records through the writer; returns each record's offset (and the end).
  std::vector<int64_t> write(int n) {
    StatsFileWriter w;
    std::string note;
    EXPECT_TRUE(w.open(path_, &note).ok());
    std::vector<int64_t> offsets;
    for (int i = 0; i < n; ++i) {
      offsets.push_back(static_cast<int64_t>(fs::file_size(path_)));
      EXPECT_TRUE(w.append(record(i)).ok());
    }
    offsets.push_back(static_cast<int64_t>(fs::file_size(path_)));
    return offsets;
  }
  std::string bytes() const { return *io::read_file(path_); }
  void put(const std::string& b) const {
    std::ofstream(path_, std::ios::binary | std::ios::trunc) << b;
  }
  static std::vector<int64_t> steps_of(const StatsFileContents& c) {
    std::vector<int64_t> out;
    for (const StepStatsInfo& s : c.steps) out.push_back(s.step);
    return out;
  }
  static std::vector<int64_t> all_but(int n, int64_t missing) {
    std::vector<int64_t> out;
    for (int i = 0; i < n; ++i) {
      if (i != missing) out.push_back(i);
    }
    return out;
  }

  std::string dir_, path_;
};

// The router statistics' losses survive the file: balance, z and the sequence-wise loss, as sums
// and as derived means.
TEST_F(StatsFileTest, ARecordKeepsItsRouterLosses) {
  StepStatsInfo s = record(3);
  RouterStatsInfo& l = s.layers[0];
  l.balance_loss_sum = 2.5;
  l.z_loss_sum = 1.5;
  l.seq_balance_loss_sum = 3.25;
  l.balance_loss = 0.25;
  l.z_loss = 0.125;
  l.seq_balance_loss = 0.375;
  StatsFileWriter w;
  std::string note;
  ASSERT_TRUE(w.open(path_, &note).ok());
  ASSERT_TRUE(w.append(s).ok());
  w.close();
  StatusOr<StatsFileContents> c = read_stats_file(path_);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  ASSERT_EQ(c->steps.size(), 1u);
  ASSERT_EQ(c->steps[0].layers.size(), 1u);
  const RouterStatsInfo& got = c->steps[0].layers[0];
  EXPECT_EQ(got.balance_loss_sum, 2.5);
  EXPECT_EQ(got.z_loss_sum, 1.5);
  EXPECT_EQ(got.seq_balance_loss_sum, 3.25);
  EXPECT_EQ(got.balance_loss, 0.25);
  EXPECT_EQ(got.z_loss, 0.125);
  EXPECT_EQ(got.seq_balance_loss, 0.375);
}

// The deduplicating dispatch's exchange counters survive the file, and so does their derived
// saved share.
TEST_F(StatsFileTest, ARecordKeepsItsDispatchExchange) {
  StepStatsInfo s = record(2);
  RouterStatsInfo& l = s.layers[0];
  l.dispatch_rows_sent = 3000000001;  // past 32 bits
  l.dispatch_rows_undeduplicated = 4000000002;
  l.dispatch_row_bytes = 8192;
  l.dispatch_saved_fraction = 0.25;
  StatusOr<StepStatsInfo> got = parse_step_stats(serialize_step_stats(s));
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  ASSERT_EQ(got->layers.size(), 1u);
  EXPECT_EQ(got->layers[0].dispatch_rows_sent, 3000000001);
  EXPECT_EQ(got->layers[0].dispatch_rows_undeduplicated, 4000000002);
  EXPECT_EQ(got->layers[0].dispatch_row_bytes, 8192);
  EXPECT_EQ(got->layers[0].dispatch_saved_fraction, 0.25);
}

// A training step's memory peaks survive the record (past 32 bits); a record without them (an
// evaluation, an older file's step) reads back without them.
TEST_F(StatsFileTest, ARecordKeepsItsMemoryPeaks) {
  StepStatsInfo s = record(5);
  s.peak_tensor_bytes = int64_t{5} << 32;
  s.peak_rss_bytes = (int64_t{6} << 32) + 4096;
  StatusOr<StepStatsInfo> got = parse_step_stats(serialize_step_stats(s));
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got->peak_tensor_bytes, std::optional<int64_t>(int64_t{5} << 32));
  EXPECT_EQ(got->peak_rss_bytes, std::optional<int64_t>((int64_t{6} << 32) + 4096));
  StatusOr<StepStatsInfo> none = parse_step_stats(serialize_step_stats(record(6)));
  ASSERT_TRUE(none.ok()) << none.status().to_string();
  EXPECT_FALSE(none->peak_tensor_bytes.has_value());
  EXPECT_FALSE(none->peak_rss_bytes.has_value());
  // A peak of zero bytes is a measurement, not an absence.
  s.peak_tensor_bytes = 0;
  EXPECT_EQ(parse_step_stats(serialize_step_stats(s))->peak_tensor_bytes,
            std::optional<int64_t>(0));
}

TEST_F(StatsFileTest, AFlippedByteInARecordLosesThatRecordOnly) {
  const std::vector<int64_t> at = write(41);
  std::string b = bytes();
  b[static_cast<size_t>((at[20] + at[21]) / 2)] ^= 0x10;  // inside record 20's body
  put(b);
  StatusOr<StatsFileContents> c = read_stats_file(path_);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(steps_of(*c), all_but(41, 20));
  ASSERT_EQ(c->damaged.size(), 1u);
  EXPECT_EQ(c->damaged[0], std::make_pair(at[20], at[21] - at[20]));
  EXPECT_FALSE(c->truncated_tail);
  // A run resuming on it appends after it, cutting nothing.
  StatsFileWriter w;
  std::string note;
  ASSERT_TRUE(w.open(path_, &note).ok());
  EXPECT_EQ(note, "");
  ASSERT_TRUE(w.append(record(41)).ok());
  w.close();
  c = read_stats_file(path_);
  EXPECT_EQ(c->steps.size(), 41u);
  EXPECT_EQ(c->steps.back().step, 41);
}

TEST_F(StatsFileTest, AGarbledLengthIsSkippedByResynchronising) {
  const std::vector<int64_t> at = write(12);
  std::string b = bytes();
  b[static_cast<size_t>(at[3] + 5)] ^= 0x7f;  // record 3's length field
  b[static_cast<size_t>(at[8] + 1)] = 'X';    // record 8's magic
  put(b);
  StatusOr<StatsFileContents> c = read_stats_file(path_);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(steps_of(*c), (std::vector<int64_t>{0, 1, 2, 4, 5, 6, 7, 9, 10, 11}));
  ASSERT_EQ(c->damaged.size(), 2u);
  EXPECT_EQ(c->damaged[0], std::make_pair(at[3], at[4] - at[3]));
  EXPECT_EQ(c->damaged[1], std::make_pair(at[8], at[9] - at[8]));
  // Reading on from an offset (momoe-stats --follow) sees the same.
  c = read_stats_file(path_, at[6]);
  EXPECT_EQ(steps_of(*c), (std::vector<int64_t>{6, 7, 9, 10, 11}));
}

TEST_F(StatsFileTest, OnlyATornTailIsCutAndItIsKeptAside) {
  const std::vector<int64_t> at = write(5);
  const std::string whole = bytes();
  put(whole.substr(0, static_cast<size_t>(at[5] - 7)));
  StatusOr<StatsFileContents> c = read_stats_file(path_);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->truncated_tail);
  EXPECT_EQ(c->steps.size(), 4u);
  EXPECT_EQ(c->bytes_read, at[4]);
  StatsFileWriter w;
  std::string note;
  ASSERT_TRUE(w.open(path_, &note).ok());
  EXPECT_NE(note.find("removed a torn last record"), std::string::npos) << note;
  EXPECT_EQ(static_cast<int64_t>(fs::file_size(path_)), at[4]);
  int kept = 0;
  for (const auto& e : fs::directory_iterator(dir_)) {
    if (e.path().filename().string().rfind("stats.pb.torn-", 0) == 0) {
      ++kept;
      EXPECT_EQ(*io::read_file(e.path().string()),
                whole.substr(static_cast<size_t>(at[4]), static_cast<size_t>(at[5] - 7 - at[4])));
    }
  }
  EXPECT_EQ(kept, 1);
  // A tail shorter than a header that starts like one is torn too.
  ASSERT_TRUE(w.append(record(4)).ok());
  w.close();
  put(bytes() + std::string("\x89MS", 3));
  c = read_stats_file(path_);
  EXPECT_TRUE(c->truncated_tail);
  EXPECT_TRUE(c->damaged.empty());
  EXPECT_EQ(c->steps.size(), 5u);
}

TEST_F(StatsFileTest, AFormat1FileIsReadAndConvertedWhenARunAppends) {
  // Format 1: varint length, message.
  std::string old;
  for (int i = 0; i < 3; ++i) {
    const std::string body = serialize_step_stats(record(i));
    ASSERT_LT(body.size(), 128u);
    old += static_cast<char>(body.size());
    old += body;
  }
  put(old);
  StatusOr<StatsFileContents> c = read_stats_file(path_);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->format, 1);
  EXPECT_EQ(steps_of(*c), (std::vector<int64_t>{0, 1, 2}));
  StatsFileWriter w;
  std::string note;
  ASSERT_TRUE(w.open(path_, &note).ok());
  EXPECT_NE(note.find("converted 3 records"), std::string::npos) << note;
  ASSERT_TRUE(w.append(record(3)).ok());
  w.close();
  c = read_stats_file(path_);
  EXPECT_EQ(c->format, 2);
  EXPECT_EQ(steps_of(*c), (std::vector<int64_t>{0, 1, 2, 3}));
  bool kept = false;
  for (const auto& e : fs::directory_iterator(dir_)) {
    if (e.path().filename().string().rfind("stats.pb.format1-", 0) == 0) {
      kept = *io::read_file(e.path().string()) == old;
    }
  }
  EXPECT_TRUE(kept) << "the format-1 original is not kept";
}

// A rollback marker drops what the abandoned branch recorded: every record of a step after the
// one rolled back to (each record's step counts steps done, evaluations' and training steps'
// alike).
TEST_F(StatsFileTest, RollbackMarkersLeaveTheLiveBranch) {
  std::vector<StepStatsInfo> records;
  for (int i = 1; i <= 6; ++i) records.push_back(record(i));
  StepStatsInfo eval4, eval6, marker;
  eval4.step = 4;
  eval4.valid_ppl = 100;
  eval6.step = 6;
  eval6.valid_ppl = 90;
  records.insert(records.begin() + 4, eval4);
  records.push_back(eval6);
  marker.step = 4;
  marker.rollback_to = 4;
  marker.interrupted = true;
  records.push_back(marker);
  records.push_back(record(5));
  // Through the file, as the coordinator writes it.
  StatsFileWriter w;
  std::string note;
  ASSERT_TRUE(w.open(path_, &note).ok());
  for (const StepStatsInfo& r : records) ASSERT_TRUE(w.append(r).ok());
  w.close();
  StatusOr<StatsFileContents> c = read_stats_file(path_);
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->steps.size(), records.size());
  EXPECT_TRUE(c->steps[8].interrupted);  // the marker's kind survives the file
  const std::vector<StepStatsInfo> live = live_records(c->steps);
  std::vector<std::string> seen;
  for (const StepStatsInfo& s : live) {
    seen.push_back((s.valid_ppl ? "eval " : "step ") + std::to_string(s.step));
  }
  EXPECT_EQ(seen,
            (std::vector<std::string>{"step 1", "step 2", "step 3", "step 4", "eval 4", "step 5"}));
  // A writer opened on the file knows the newest live step (what a resume compares against).
  ASSERT_TRUE(w.open(path_, &note).ok());
  EXPECT_EQ(w.last_step(), 5);
}

// Files written before the steps-done numbering held a training step's 0-based index: read, it
// counts steps done like every other record; evaluations and markers were steps done already.
TEST_F(StatsFileTest, AnOlderFilesTrainingStepsAreNumberedByStepsDone) {
  momoe::StepStats old_step, old_eval;
  ASSERT_TRUE(old_step.ParseFromString(serialize_step_stats(record(7))));
  old_step.clear_steps_done_numbering();
  old_eval.set_step(8);
  old_eval.set_valid_ppl(50);
  StatusOr<StepStatsInfo> step = parse_step_stats(old_step.SerializeAsString());
  StatusOr<StepStatsInfo> eval = parse_step_stats(old_eval.SerializeAsString());
  ASSERT_TRUE(step.ok() && eval.ok());
  EXPECT_EQ(step->step, 8);
  EXPECT_EQ(eval->step, 8);
  StatusOr<StepStatsInfo> now = parse_step_stats(serialize_step_stats(record(7)));
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(now->step, 7);
}

TEST_F(StatsFileTest, AFileThatIsNotAStatsFileIsRefused) {
  put("this is a text file, not statistics\n");
  StatusOr<StatsFileContents> c = read_stats_file(path_);
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << c.status().to_string();
  EXPECT_NE(c.status().message().find("is not a momoe statistics file"), std::string::npos);
  put("");
  c = read_stats_file(path_);
  ASSERT_TRUE(c.ok());  // empty: a run that has not written yet
  EXPECT_TRUE(c->steps.empty());
}

}  // namespace
}  // namespace moe
