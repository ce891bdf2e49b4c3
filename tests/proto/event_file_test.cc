// proto/event_file.h and types/step_stats_scalars.h: the Event bytes against the same events
// serialized by TensorBoard's own protobuf classes; an event file written and read back (its
// name, the file_version first, START, scalars to float32); a flipped byte stops the reader at
// that record, as it stops TensorBoard; and a record's scalars: tags, values and step.
#include "proto/event_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "base/device.h"
#include "io/file_util.h"
#include "io/tfrecord.h"

namespace moe {
namespace {
namespace fs = std::filesystem;

std::string to_hex(const std::string& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (const char c : bytes) {
    out.push_back(kDigits[(static_cast<unsigned char>(c) >> 4) & 0xf]);
    out.push_back(kDigits[static_cast<unsigned char>(c) & 0xf]);
  }
  return out;
}

// The hex strings are tensorboard.compat.proto.event_pb2.Event(...).SerializeToString()
// (tensorboard 2.21.0) of the same events.
TEST(EventBytesTest, AsTensorBoardSerializesThem) {
  EventInfo scalar;
  scalar.wall_time = 1.5;
  scalar.step = 7;
  scalar.scalars = {{"train/loss", 2.5}};
  EXPECT_EQ(to_hex(serialize_event(scalar)),
            "09000000000000f83f10072a130a110a0a747261696e2f6c6f73731500002040");
  // A zero is written (TensorFlow's simple_value is in a oneof): TensorBoard drops a value
  // without it.
  EventInfo zero = scalar;
  zero.scalars = {{"train/skipped", 0.0}};
  EXPECT_EQ(to_hex(serialize_event(zero)),
            "09000000000000f83f10072a160a140a0d747261696e2f736b69707065641500000000");
  EventInfo start;
  start.wall_time = 1.5;
  start.step = 7;
  start.session_start = true;
  EXPECT_EQ(to_hex(serialize_event(start)), "09000000000000f83f10073a020801");
  EventInfo version;
  version.wall_time = 1.5;
  version.file_version = kEventFileVersion;
  EXPECT_EQ(to_hex(serialize_event(version)), "09000000000000f83f1a0d627261696e2e4576656e743a32");
}

class EventFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() /
            ("momoe_events_" +
             std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
             std::to_string(::getpid())))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_F(EventFileTest, WrittenAndReadBack) {
  StatusOr<std::unique_ptr<EventFileWriter>> w = EventFileWriter::create(dir_);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  const std::string name = fs::path((*w)->path()).filename().string();
  EXPECT_TRUE(is_event_file_name(name));
  EXPECT_EQ(name.rfind("events.out.tfevents.", 0), 0u) << name;
  EXPECT_NE(name.find("." + host_name() + "." + std::to_string(::getpid())), std::string::npos);
  ASSERT_TRUE((*w)->write_start(5).ok());
  ASSERT_TRUE((*w)->write_scalars(5, {{"train/loss", 1.0 / 3.0}, {"eval/valid_ppl", 1e30}}).ok());
  // Nothing is buffered: the file holds every record while the writer is open.
  StatusOr<EventFileContents> got = read_event_file((*w)->path());
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got->damaged_at, -1);
  ASSERT_EQ(got->events.size(), 3u);
  EXPECT_EQ(got->events[0].file_version, "brain.Event:2");
  EXPECT_GT(got->events[0].wall_time, 1.7e9);
  EXPECT_TRUE(got->events[1].session_start);
  EXPECT_EQ(got->events[1].step, 5);
  const EventInfo& e = got->events[2];
  EXPECT_EQ(e.step, 5);
  ASSERT_EQ(e.scalars.size(), 2u);
  EXPECT_EQ(e.scalars[0].tag, "train/loss");
  EXPECT_EQ(e.scalars[0].value, static_cast<double>(1.0f / 3.0f));
  EXPECT_EQ(e.scalars[1].tag, "eval/valid_ppl");
  EXPECT_EQ(e.scalars[1].value, static_cast<double>(1e30f));
  // A second writer of this process in the same second gets a file of its own.
  StatusOr<std::unique_ptr<EventFileWriter>> w2 = EventFileWriter::create(dir_);
  ASSERT_TRUE(w2.ok()) << w2.status().to_string();
  EXPECT_NE((*w2)->path(), (*w)->path());
  EXPECT_TRUE(is_event_file_name(fs::path((*w2)->path()).filename().string()));
  EXPECT_FALSE(is_event_file_name("metrics.jsonl"));
  EXPECT_FALSE(is_event_file_name("old.events.out.tfevents.1"));
}

TEST_F(EventFileTest, AFlippedByteStopsTheReaderAtThatRecord) {
  StatusOr<std::unique_ptr<EventFileWriter>> w = EventFileWriter::create(dir_);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  for (int step = 1; step <= 3; ++step) {
    ASSERT_TRUE((*w)->write_scalars(step, {{"train/loss", static_cast<double>(step)}}).ok());
  }
  const std::string path = (*w)->path();
  StatusOr<std::string> bytes = io::read_file(path);
  ASSERT_TRUE(bytes.ok());
  // The records' offsets: file_version, then steps 1, 2, 3.
  std::vector<size_t> offsets;
  for (size_t at = 0; at < bytes->size();) {
    offsets.push_back(at);
    ASSERT_TRUE(io::read_tfrecord(*bytes, &at).ok());
  }
  ASSERT_EQ(offsets.size(), 4u);
  std::string damaged = *bytes;
  const size_t flip = offsets[2] + io::kTfRecordOverhead;  // inside step 2's event
  damaged[flip] = static_cast<char>(damaged[flip] ^ 0x10);
  ASSERT_TRUE(io::write_file_atomic(path, damaged).ok());
  StatusOr<EventFileContents> got = read_event_file(path);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got->damaged_at, static_cast<int64_t>(offsets[2]));
  ASSERT_EQ(got->events.size(), 2u);
  EXPECT_EQ(got->events[1].step, 1);
  EXPECT_EQ(got->events[1].scalars.at(0).value, 1.0);
}

TEST(StepStatsScalarsTest, ATrainingRecord) {
  StepStatsInfo s;
  s.step = 10;  // after the 10th step
  s.loss = 2.0;
  s.aux_loss = 0.01;
  s.learning_rate = 1e-3;
  s.grad_norm = 0.5;
  s.tokens = 64;
  s.step_seconds = 0.25;
  s.tokens_per_second = 256;
  PhaseSecondsArray phases{};
  phases[static_cast<int>(Phase::kBackward)] = 0.125;
  s.phases = phases;
  s.peak_tensor_bytes = int64_t{3} << 29;  // 1.5 GiB
  RouterStatsInfo l;
  l.block = 3;
  l.expert_load = {1, 3, 0, 4};
  l.balance_loss = 1.25;
  l.z_loss = 0.5;
  l.seq_balance_loss = 0.75;
  l.dropped_fraction = 0.125;
  l.max_load = 2.0;
  s.layers = {l};
  EXPECT_EQ(scalar_step(s), 10);
  std::map<std::string, double> got;
  for (const NamedScalar& v : step_stats_scalars(s)) {
    EXPECT_TRUE(got.emplace(v.tag, v.value).second) << "tag twice: " << v.tag;
  }
  EXPECT_EQ(got.at("train/loss"), 2.0);
  EXPECT_DOUBLE_EQ(got.at("train/perplexity"), std::exp(2.0));
  EXPECT_EQ(got.at("train/learning_rate"), 1e-3);
  EXPECT_EQ(got.at("train/tokens_per_second"), 256);
  EXPECT_EQ(got.at("train/skipped"), 0);
  EXPECT_EQ(got.at("time/backward"), 0.125);
  EXPECT_EQ(got.at("time/forward"), 0);
  EXPECT_EQ(got.at("memory/peak_tensor_gib"), 1.5);
  EXPECT_EQ(got.count("memory/peak_rss_gib"), 0u);  // not measured: no scalar
  EXPECT_EQ(got.at("block3/balance_loss"), 1.25);
  EXPECT_EQ(got.at("block3/z_loss"), 0.5);
  EXPECT_EQ(got.at("block3/seq_balance_loss"), 0.75);
  EXPECT_EQ(got.at("block3/drop_rate"), 0.125);
  EXPECT_EQ(got.at("block3/max_load"), 2.0);
  EXPECT_EQ(got.at("block3/expert_load/0"), 0.125);
  EXPECT_EQ(got.at("block3/expert_load/1"), 0.375);
  EXPECT_EQ(got.at("block3/expert_load/2"), 0.0);
  EXPECT_EQ(got.at("block3/expert_load/3"), 0.5);
  EXPECT_EQ(got.count("block3/expert_load/4"), 0u);
  EXPECT_EQ(got.count("eval/valid_ppl"), 0u);
}

TEST(StepStatsScalarsTest, EvaluationsAndMarkers) {
  StepStatsInfo whole;
  whole.step = 10;  // steps done
  whole.eval_sequences = 0;
  whole.valid_ppl = 120;
  whole.test_bits_per_byte = 1.5;
  EXPECT_EQ(scalar_step(whole), 10);
  const std::vector<NamedScalar> w = step_stats_scalars(whole);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].tag, "eval/valid_ppl");
  EXPECT_EQ(w[0].value, 120);
  EXPECT_EQ(w[1].tag, "eval/test_bits_per_byte");
  StepStatsInfo subset = whole;
  subset.eval_sequences = 8;
  subset.eval_seconds = 2;
  const std::vector<NamedScalar> s = step_stats_scalars(subset);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].tag, "eval_subset/valid_ppl");
  EXPECT_EQ(s[2].tag, "eval_subset/seconds");
  StepStatsInfo marker;
  marker.step = 4;
  marker.rollback_to = 4;
  EXPECT_TRUE(step_stats_scalars(marker).empty());
}

}  // namespace
}  // namespace moe
