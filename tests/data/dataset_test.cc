// The prepared-dataset path: text streamed in chunks (text_stream.h), `momoe-data prepare`
// (prepare.h) into checksummed shards, and the shards read back (dataset.h), against tokenizing
// the same text directly.
#include "core/data/dataset.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#if MOMOE_HAVE_ZSTD
#include <zstd.h>
#endif

#include <algorithm>
#include <filesystem>
#include <map>

#include "base/hash.h"
#include "base/tensor.h"
#include "core/data/prepare.h"
#include "core/data/sequences.h"
#include "core/data/text_stream.h"
#include "io/file_util.h"
#include "tests/data/data_test_util.h"

namespace moe::data {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::TempDir;

// A text with what the reader must get right across chunk boundaries: long and short lines,
// blank and whitespace-only lines, CRLF, tabs, multi-byte UTF-8, and no final newline.
std::string sample_text(int lines, int seed) {
  const char* words[] = {"the",
                         "cat",
                         "sat",
                         "on",
                         "a",
                         "mat",
                         "caf\xC3\xA9",
                         "\xE2\x82\xAC"
                         "5",
                         "na\xC3\xAFve",
                         "<unk>",
                         "AAA",
                         "word",
                         "\xF0\x9F\x98\x80",
                         "x"};
  std::string t;
  uint64_t r = static_cast<uint64_t>(seed) * 2654435761u + 1;
  for (int l = 0; l < lines; ++l) {
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    const int n = static_cast<int>((r >> 33) % 23);
    for (int w = 0; w < n; ++w) {
      r = r * 6364136223846793005ull + 1442695040888963407ull;
      t += words[(r >> 33) % 14];
      t += (r >> 40) % 5 == 0 ? "\t" : " ";
    }
    t += (l % 17 == 3) ? "\r\n" : (l % 11 == 5 ? "   \n" : "\n");
  }
  t += "last line without newline";
  return t;
}

void write_zstd(const std::string& path, const std::string& text) {
#if MOMOE_HAVE_ZSTD
  std::string out(ZSTD_compressBound(text.size()), '\0');
  const size_t n = ZSTD_compress(out.data(), out.size(), text.data(), text.size(), 3);
  ASSERT_FALSE(ZSTD_isError(n));
  out.resize(n);
  testing::write_file(path, out);
#else
  (void)path;
  (void)text;
#endif
}

std::vector<std::string> chunks_of(const std::string& path, int64_t chunk_bytes) {
  StatusOr<std::unique_ptr<TextChunkReader>> r = TextChunkReader::open(path, chunk_bytes);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  std::vector<std::string> out;
  TextChunk c;
  int64_t offset = 0, line = 1;
  while (true) {
    StatusOr<bool> more = (*r)->next(&c);
    EXPECT_TRUE(more.ok()) << more.status().to_string();
    if (!more.ok() || !*more) break;
    EXPECT_EQ(c.offset, offset);
    EXPECT_EQ(c.line, line);
    offset += static_cast<int64_t>(c.text.size());
    line += std::count(c.text.begin(), c.text.end(), '\n');
    out.push_back(c.text);
  }
  return out;
}

TEST(TextStreamTest, ChunksAreWholeLinesAndConcatenateToTheText) {
  TempDir dir;
  const std::string text = sample_text(300, 1);
  testing::write_file(dir.file("a.txt"), text);
  testing::write_gzip(dir.file("a.txt.gz"), text);
  std::vector<std::string> files = {dir.file("a.txt"), dir.file("a.txt.gz")};
  if (zstd_supported()) {
    write_zstd(dir.file("a.txt.zst"), text);
    files.push_back(dir.file("a.txt.zst"));
  }
  for (const std::string& f : files) {
    for (int64_t chunk : {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{1} << 20}) {
      const std::vector<std::string> chunks = chunks_of(f, chunk);
      std::string joined;
      for (size_t i = 0; i < chunks.size(); ++i) {
        joined += chunks[i];
        if (i + 1 < chunks.size()) {
          EXPECT_EQ(chunks[i].back(), '\n') << f << " chunk " << i;
          EXPECT_GE(static_cast<int64_t>(chunks[i].size()), std::min<int64_t>(chunk, 1));
        }
      }
      EXPECT_EQ(joined, text) << f << " chunk_bytes " << chunk;
    }
    StatusOr<std::string> whole = read_decompressed(f);
    ASSERT_TRUE(whole.ok()) << whole.status().to_string();
    EXPECT_EQ(*whole, text);
  }
}

TEST(TextStreamTest, SkipToResumesAtAChunkBoundary) {
  TempDir dir;
  const std::string text = sample_text(200, 2);
  testing::write_gzip(dir.file("a.gz"), text);
  const std::vector<std::string> chunks = chunks_of(dir.file("a.gz"), 100);
  ASSERT_GT(chunks.size(), 4u);
  int64_t offset = 0, line = 1;
  for (size_t i = 0; i < 3; ++i) {
    offset += static_cast<int64_t>(chunks[i].size());
    line += std::count(chunks[i].begin(), chunks[i].end(), '\n');
  }
  StatusOr<std::unique_ptr<TextChunkReader>> r = TextChunkReader::open(dir.file("a.gz"), 100);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE((*r)->skip_to(offset, line).ok());
  TextChunk c;
  ASSERT_TRUE(*(*r)->next(&c));
  EXPECT_EQ(c.offset, offset);
  EXPECT_EQ(c.line, line);
  EXPECT_EQ(c.text, chunks[3]);
  // Past the end: the file changed since.
  StatusOr<std::unique_ptr<TextChunkReader>> r2 = TextChunkReader::open(dir.file("a.gz"), 100);
  const Status past = (*r2)->skip_to(static_cast<int64_t>(text.size()) + 10, 1);
  EXPECT_EQ(past.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(past.message(), "resume point")) << past.message();
}

TEST(TextStreamTest, DamagedCompressedFilesAreDataLoss) {
  TempDir dir;
  const std::string text = sample_text(400, 3);
  testing::write_file(dir.file("plain.zst"), text);
  StatusOr<std::unique_ptr<TextChunkReader>> r = TextChunkReader::open(dir.file("plain.zst"), 64);
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(r.status().message(), "named .zst")) << r.status().message();
  if (!zstd_supported()) return;  // the rest reads zstd data
  write_zstd(dir.file("a.zst"), text);
  const std::string bytes = testing::read_file(dir.file("a.zst"));
  testing::write_file(dir.file("cut.zst"), bytes.substr(0, bytes.size() * 2 / 3));
  StatusOr<std::string> cut = read_decompressed(dir.file("cut.zst"));
  EXPECT_EQ(cut.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(cut.status().message(), "truncated zstd")) << cut.status().message();
  std::string flipped = bytes;
  flipped[bytes.size() / 2] = static_cast<char>(flipped[bytes.size() / 2] ^ 0x5A);
  testing::write_file(dir.file("bad.zst"), flipped);
  EXPECT_EQ(read_decompressed(dir.file("bad.zst")).status().code(), StatusCode::kDataLoss);
}

TEST(TextStreamTest, ZstdWithASkippableFrameFirst) {
  if (!zstd_supported()) GTEST_SKIP() << "this build reads no zstd (the .zst-name check ran above)";
  TempDir dir;
  const std::string text = sample_text(50, 4);
  write_zstd(dir.file("plain.zst"), text);
  // pzstd writes a skippable frame (magic 0x184D2A50, 4-byte size, payload) before the data.
  std::string skippable(
      "\x50\x2A\x4D\x18\x04\x00\x00\x00"
      "abcd",
      12);
  testing::write_file(dir.file("skip.zst"), skippable + testing::read_file(dir.file("plain.zst")));
  StatusOr<std::string> got = read_decompressed(dir.file("skip.zst"));
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(*got, text);
}

// Every file of a folder, name -> bytes.
std::map<std::string, std::string> folder_files(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    out[e.path().filename().string()] = testing::read_file(e.path().string());
  }
  return out;
}

class PrepareTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(dir_.file("train"));
    texts_ = {sample_text(150, 10), sample_text(90, 11), "\xEF\xBB\xBF" + sample_text(60, 12)};
    testing::write_file(dir_.file("train/a.txt"), texts_[0]);
    testing::write_gzip(dir_.file("train/b.txt.gz"), texts_[1]);
    if (zstd_supported()) {
      write_zstd(dir_.file("train/c.txt.zst"), texts_[2]);
    } else {
      testing::write_file(dir_.file("train/c.txt"), texts_[2]);
    }
    testing::write_file(dir_.file("train/.hidden"), "skipped\n");
    testing::write_file(dir_.file("valid.txt"), sample_text(40, 13));
    testing::write_gzip(dir_.file("test.txt.gz"), sample_text(45, 14));
    spec_.out_dir = dir_.file("ds");
    spec_.train = {dir_.file("train")};
    spec_.valid = {dir_.file("valid.txt")};
    spec_.test = {dir_.file("test.txt.gz")};
    spec_.vocab.max_size = 12;  // some words become <unk>
    spec_.threads = 3;
    spec_.chunk_bytes = 97;
    spec_.piece_bytes = 31;  // chunks are tokenized in pieces: the ids must not change
    spec_.shard_tokens = 150;
  }

  TempDir dir_;
  std::vector<std::string> texts_;
  PrepareSpec spec_;
};

TEST_F(PrepareTest, ShardsHoldTheIdsOfTokenizingTheTextDirectly) {
  StatusOr<DatasetIndex> index = prepare_dataset(spec_);
  ASSERT_TRUE(index.ok()) << index.status().to_string();
  EXPECT_EQ(index->splits.at("train").sources.size(), 3u);  // the hidden file is skipped
  EXPECT_GT(index->splits.at("train").shards.size(), 3u);
  StatusOr<TokenizedCorpus> c = open_dataset(spec_.out_dir, /*verify_payload=*/true);
  ASSERT_TRUE(c.ok()) << c.status().to_string();

  // The vocabulary of the three files' counts, and each file tokenized on its own.
  TokenCounter counter;
  std::vector<int32_t> expected;
  TextStats stats;
  for (const std::string& name : index->splits.at("train").sources) {
    StatusOr<std::string> text = read_text_file(name);
    ASSERT_TRUE(text.ok()) << text.status().to_string();
    for_each_token(*text, [&](std::string_view t) { counter.add(t); });
  }
  StatusOr<Vocabulary> vocab = Vocabulary::build(counter, spec_.vocab);
  ASSERT_TRUE(vocab.ok());
  EXPECT_EQ(c->vocab.fingerprint(), vocab->fingerprint());
  for (const std::string& name : index->splits.at("train").sources) {
    StatusOr<TokenSplit> s = tokenize_split("train", name, *vocab);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    expected.insert(expected.end(), s->ids.begin(), s->ids.end());
    stats += s->stats;
  }
  StatusOr<std::vector<int32_t>> got = materialize(c->train);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(*got, expected);
  EXPECT_EQ(c->train.stats.words, stats.words);
  EXPECT_EQ(c->train.stats.bytes, stats.bytes);
  EXPECT_EQ(c->train.stats.unknown, stats.unknown);
  EXPECT_GT(stats.unknown, 0);
  TokenSplit in_memory;
  in_memory.ids = expected;
  EXPECT_EQ(contents_fingerprint(c->train), contents_fingerprint(in_memory));
  for (auto [name, split] :
       {std::pair{"valid.txt", &c->valid}, std::pair{"test.txt.gz", &c->test}}) {
    StatusOr<TokenSplit> s = tokenize_split("x", dir_.file(name), *vocab);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(*materialize(*split), s->ids) << name;
    EXPECT_EQ(split->stats.bytes, s->stats.bytes) << name;
  }
  StatusOr<std::string> verified = verify_dataset(spec_.out_dir);
  EXPECT_TRUE(verified.ok()) << verified.status().to_string();
}

TEST_F(PrepareTest, SequencesDoNotDependOnTheShardCount) {
  PrepareSpec one = spec_;
  one.out_dir = dir_.file("one");
  one.shard_tokens = int64_t{1} << 40;
  one.chunk_bytes = int64_t{1} << 20;
  one.threads = 1;
  ASSERT_TRUE(prepare_dataset(one).ok());
  ASSERT_TRUE(prepare_dataset(spec_).ok());
  StatusOr<TokenizedCorpus> a = open_dataset(one.out_dir, true);
  StatusOr<TokenizedCorpus> b = open_dataset(spec_.out_dir, true);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->train.shards->num_shards(), 1);
  EXPECT_GT(b->train.shards->num_shards(), 5);
  TokenSplit in_memory = a->train;
  in_memory.shards = nullptr;
  in_memory.ids = *materialize(a->train);
  // The tokens of the first sequences, read across shard boundaries.
  {
    StatusOr<SequenceSet> sb = SequenceSet::create(b->train, 64);
    ASSERT_TRUE(sb.ok());
    StatusOr<std::vector<int32_t>> first = sb->leading_tokens(3);
    ASSERT_TRUE(first.ok()) << first.status().to_string();
    EXPECT_EQ(*first, std::vector<int32_t>(in_memory.ids.begin(), in_memory.ids.begin() + 193));
  }
  for (int64_t seq_len : {1, 5, 64}) {
    StatusOr<SequenceSet> sa = SequenceSet::create(a->train, seq_len);
    StatusOr<SequenceSet> sb = SequenceSet::create(b->train, seq_len);
    StatusOr<SequenceSet> sm = SequenceSet::create(in_memory, seq_len);
    ASSERT_TRUE(sa.ok() && sb.ok() && sm.ok());
    ASSERT_EQ(sa->size(), sm->size());
    ASSERT_EQ(sb->size(), sm->size());
    std::vector<int64_t> ids(static_cast<size_t>(sm->size()));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(ids.size() - 1 - i);
    const Shape shape{sm->size(), seq_len};
    Tensor in[3] = {Tensor::zeros(shape, DType::kI32), Tensor::zeros(shape, DType::kI32),
                    Tensor::zeros(shape, DType::kI32)};
    Tensor tg[3] = {Tensor::zeros(shape, DType::kI32), Tensor::zeros(shape, DType::kI32),
                    Tensor::zeros(shape, DType::kI32)};
    ASSERT_TRUE(sa->fill(ids, in[0].view(), tg[0].view()).ok());
    ASSERT_TRUE(sb->fill(ids, in[1].view(), tg[1].view()).ok());
    ASSERT_TRUE(sm->fill(ids, in[2].view(), tg[2].view()).ok());
    for (int k = 0; k < 2; ++k) {
      EXPECT_EQ(0, std::memcmp(in[k].data<int32_t>(), in[2].data<int32_t>(), in[2].nbytes()))
          << seq_len;
      EXPECT_EQ(0, std::memcmp(tg[k].data<int32_t>(), tg[2].data<int32_t>(), tg[2].nbytes()))
          << seq_len;
    }
    EXPECT_EQ(sb->tokens_per_word(), 1.0);  // the word tokenizer: a token is a word
    EXPECT_GT(sb->tokens_per_byte(), 0.0);
  }
}

TEST_F(PrepareTest, AnInterruptedPreparationResumesToTheSameFiles) {
  PrepareSpec whole = spec_;
  whole.out_dir = dir_.file("whole");
  ASSERT_TRUE(prepare_dataset(whole).ok());

  // Stop in the train split after two progress reports, then in the test split.
  for (const std::string& phase : {std::string("train"), std::string("test")}) {
    int calls = 0;
    const auto stop = [&](const PrepareProgress& p) { return !(p.phase == phase && ++calls >= 2); };
    StatusOr<DatasetIndex> cut = prepare_dataset(spec_, stop);
    ASSERT_EQ(cut.status().code(), StatusCode::kAborted) << cut.status().to_string();
    // It says what is kept and how to continue.
    EXPECT_TRUE(contains(cut.status().message(), "written and kept; rerun the same command"))
        << cut.status().message();
    EXPECT_FALSE(fs::exists(spec_.out_dir + "/index.json"));
    // The only temporary file kept is the open shard of the resume point.
    int open_shards = 0;
    for (const auto& e : fs::directory_iterator(spec_.out_dir)) {
      const std::string name = e.path().filename().string();
      if (name.find(".tmp") == std::string::npos) continue;
      EXPECT_TRUE(name.size() > 8 && name.compare(name.size() - 8, 8, ".tok.tmp") == 0)
          << "a temporary file was left: " << e.path();
      ++open_shards;
    }
    EXPECT_LE(open_shards, 1);
  }
  StatusOr<DatasetIndex> resumed = prepare_dataset(spec_);
  ASSERT_TRUE(resumed.ok()) << resumed.status().to_string();
  EXPECT_EQ(folder_files(spec_.out_dir), folder_files(whole.out_dir));
  // Once complete, the same command does nothing and says so by returning the index.
  const auto before = fs::last_write_time(spec_.out_dir + "/index.json");
  ASSERT_TRUE(prepare_dataset(spec_).ok());
  EXPECT_EQ(fs::last_write_time(spec_.out_dir + "/index.json"), before);
}

TEST_F(PrepareTest, TemporaryFilesACrashLeavesDoNotBlockOrSurviveAResume) {
  PrepareSpec whole = spec_;
  whole.out_dir = dir_.file("whole");
  ASSERT_TRUE(prepare_dataset(whole).ok());
  // A crash during the very first record: only a temporary file there. As good as empty.
  fs::create_directories(spec_.out_dir);
  testing::write_file(spec_.out_dir + "/prepare.json.tmp.4242.1", "{\"half");
  int calls = 0;
  const auto stop = [&](const PrepareProgress& p) { return !(p.phase == "train" && ++calls >= 2); };
  ASSERT_EQ(prepare_dataset(spec_, stop).status().code(), StatusCode::kAborted);
  // A crash later: a half-written record and shard beside the complete ones.
  testing::write_file(spec_.out_dir + "/vocab.txt.tmp.4242.7", "half");
  testing::write_file(spec_.out_dir + "/train-00009.tok.tmp", "half");
  ASSERT_TRUE(prepare_dataset(spec_).ok());
  EXPECT_EQ(folder_files(spec_.out_dir), folder_files(whole.out_dir));
}

TEST_F(PrepareTest, FoldersFollowLinksAndNamesMustBeUtf8) {
  fs::create_directories(dir_.file("elsewhere"));
  testing::write_file(dir_.file("elsewhere/d.txt"), "linked text\n");
  fs::create_directory_symlink(dir_.file("elsewhere"), dir_.file("train/part2"));
  StatusOr<std::vector<std::string>> files = expand_inputs({dir_.file("train")});
  ASSERT_TRUE(files.ok());
  EXPECT_EQ(files->size(), 4u);
  EXPECT_EQ(files->back(), dir_.file("train/part2/d.txt"));
  testing::write_file(dir_.file("caf\xE9.txt"), "latin-1 name\n");
  PrepareSpec bad = spec_;
  bad.train = {dir_.file("caf\xE9.txt")};
  const Status s = prepare_dataset(bad).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s.message(), "is not valid UTF-8")) << s.message();
  // An empty evaluation file is refused before the training split is written.
  testing::write_file(dir_.file("empty-valid.txt"), "");
  bad = spec_;
  bad.valid = {dir_.file("empty-valid.txt")};
  EXPECT_TRUE(contains(prepare_dataset(bad).status().message(), "empty-valid.txt is empty"));
  EXPECT_FALSE(fs::exists(spec_.out_dir + "/train-00000.tok"));
}

TEST_F(PrepareTest, AnotherPlanInTheSameFolderIsRefused) {
  ASSERT_TRUE(prepare_dataset(spec_).ok());
  PrepareSpec other = spec_;
  other.vocab.max_size = 20;
  StatusOr<DatasetIndex> r = prepare_dataset(other);
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(r.status().message(), "other inputs or options")) << r.status().message();
  // A changed input file is another plan too.
  testing::write_file(dir_.file("valid.txt"), sample_text(41, 13));
  EXPECT_EQ(prepare_dataset(spec_).status().code(), StatusCode::kFailedPrecondition);
  // A preparation running elsewhere (its lock held): refused, nothing touched.
  {
    const int fd = ::open((spec_.out_dir + "/prepare.lock").c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
    r = prepare_dataset(spec_);
    EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_TRUE(contains(r.status().message(), "another preparation is writing"))
        << r.status().message();
    ::close(fd);
  }
  // A folder with other files in it (a name ending in .tmp is not ours either).
  fs::create_directories(dir_.file("notes"));
  testing::write_file(dir_.file("notes/notes.tmp"), "mine\n");
  PrepareSpec notes = spec_;
  notes.out_dir = dir_.file("notes");
  EXPECT_EQ(prepare_dataset(notes).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(fs::exists(dir_.file("notes/notes.tmp")));
  fs::create_directories(dir_.file("busy"));
  testing::write_file(dir_.file("busy/notes.txt"), "mine\n");
  PrepareSpec busy = spec_;
  busy.out_dir = dir_.file("busy");
  r = prepare_dataset(busy);
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(r.status().message(), "not empty")) << r.status().message();
}

TEST_F(PrepareTest, BadInputsAreRefusedByName) {
  // Invalid UTF-8 deep in a file: the same message as reading the file whole (line, offset).
  std::string text = sample_text(200, 20);
  text.insert(text.size() / 2 + 3, "\xC3\x28");
  testing::write_file(dir_.file("bad.txt"), text);
  PrepareSpec bad = spec_;
  bad.out_dir = dir_.file("o1");
  bad.train = {dir_.file("bad.txt")};
  StatusOr<DatasetIndex> r = prepare_dataset(bad);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  const std::string read = read_text_file(dir_.file("bad.txt")).status().message();
  EXPECT_EQ(r.status().message().substr(0, read.size()), read) << r.status().message();

  testing::write_file(dir_.file("empty.txt"), "");
  bad.out_dir = dir_.file("o2");
  bad.train = {dir_.file("empty.txt")};
  r = prepare_dataset(bad);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(r.status().message(), dir_.file("empty.txt") + " is empty"))
      << r.status().message();

  testing::write_file(dir_.file("blank.txt"), " \n\t\n");
  bad.out_dir = dir_.file("o3");
  bad.train = {dir_.file("blank.txt")};
  EXPECT_TRUE(contains(prepare_dataset(bad).status().message(), "has no tokens"));

  ASSERT_EQ(::mkfifo(dir_.file("fifo").c_str(), 0600), 0);
  bad.out_dir = dir_.file("o4");
  bad.train = {dir_.file("fifo")};
  r = prepare_dataset(bad);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(r.status().message(), "is a FIFO")) << r.status().message();

  bad.train = {dir_.file("missing.txt")};
  EXPECT_EQ(prepare_dataset(bad).status().code(), StatusCode::kNotFound);
  fs::create_directories(dir_.file("nothing"));
  bad.train = {dir_.file("nothing")};
  EXPECT_TRUE(contains(prepare_dataset(bad).status().message(), "holds no regular files"));
}

TEST_F(PrepareTest, AFailureBeforeAnyWorkLeavesNothingInTheWayOfTheFixedRetry) {
  // Invalid UTF-8 in the training text fails the vocabulary's pass, before anything is written
  // worth resuming: the folder it made goes (its parents too), and the retry with the file fixed
  // (another size and time, so another plan) prepares it.
  const std::string text = sample_text(120, 21);
  std::string broken = text;
  broken.insert(text.size() / 2, "\xFF\xFE");
  testing::write_file(dir_.file("bad.txt"), broken);
  PrepareSpec bad = spec_;
  bad.out_dir = dir_.file("new/parent/ds");
  bad.train = {dir_.file("bad.txt")};
  Status s = prepare_dataset(bad).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s.message(), "invalid UTF-8")) << s.message();
  EXPECT_TRUE(contains(s.message(), "nothing was prepared yet, so " + bad.out_dir + " is removed"))
      << s.message();
  EXPECT_FALSE(fs::exists(dir_.file("new"))) << "the folders it made stay";
  testing::write_file(dir_.file("bad.txt"), text);
  StatusOr<DatasetIndex> fixed = prepare_dataset(bad);
  EXPECT_TRUE(fixed.ok()) << fixed.status().to_string();

  // A folder that existed before (empty) stays, emptied of this preparation's files.
  testing::write_file(dir_.file("bad.txt"), broken);
  fs::create_directories(dir_.file("mine"));
  bad.out_dir = dir_.file("mine");
  s = prepare_dataset(bad).status();
  EXPECT_TRUE(contains(s.message(), "this preparation's files are removed from " + bad.out_dir))
      << s.message();
  EXPECT_TRUE(fs::exists(bad.out_dir) && fs::is_empty(bad.out_dir));

  // Invalid UTF-8 in the validation text, after the training split's shards: they are kept, and
  // the message says what to do once the file is fixed.
  testing::write_file(dir_.file("bad-valid.txt"), broken);
  bad = spec_;
  bad.valid = {dir_.file("bad-valid.txt")};
  s = prepare_dataset(bad).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s.message(), spec_.out_dir + " keeps what was prepared before this"))
      << s.message();
  EXPECT_TRUE(contains(s.message(), "remove " + spec_.out_dir)) << s.message();
  EXPECT_TRUE(fs::exists(spec_.out_dir + "/train-00000.tok"));
  EXPECT_TRUE(fs::exists(spec_.out_dir + "/prepare.json"));
}

TEST_F(PrepareTest, ATextFileOrAMissingFolderIsNotADatasetAndTheHintFitsIt) {
  // A text file: prepare a new folder from it (never --out the file itself).
  const std::string text = dir_.file("valid.txt");
  Status s = read_dataset_index(text).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s.message(), text + " is a file, not a prepared dataset folder"))
      << s.message();
  EXPECT_TRUE(contains(s.message(), "momoe-data prepare --out NEW_FOLDER --train " + text))
      << s.message();
  EXPECT_FALSE(contains(s.message(), "--out " + text)) << s.message();
  EXPECT_EQ(open_dataset(text, false).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(verify_dataset(text).status().code(), StatusCode::kInvalidArgument);
  // A folder that does not exist yet: it may be made there.
  s = read_dataset_index(dir_.file("nowhere")).status();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_TRUE(
      contains(s.message(), "momoe-data prepare --out " + dir_.file("nowhere") + " --train"))
      << s.message();
}

class DamagedDatasetTest : public PrepareTest {
 protected:
  void SetUp() override {
    PrepareTest::SetUp();
    ASSERT_TRUE(prepare_dataset(spec_).ok());
    index_ = *read_dataset_index(spec_.out_dir);
    shard_ = spec_.out_dir + "/" + index_.splits.at("train").shards[1].file;
  }
  Status open(bool verify = true) { return open_dataset(spec_.out_dir, verify).status(); }
  DatasetIndex index_;
  std::string shard_;
};

TEST_F(DamagedDatasetTest, ADamagedIndexIsRefusedByName) {
  const std::string path = spec_.out_dir + "/index.json";
  std::string text = testing::read_file(path);
  const size_t at = text.find("\"tokens\": ") + 10;
  text[at] = text[at] == '9' ? '8' : static_cast<char>(text[at] + 1);
  testing::write_file(path, text);
  // Damage is input to replace (exit 2): the message says how.
  const Status s = open();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(s.message(), path)) << s.message();
  EXPECT_TRUE(contains(
      s.message(), "and prepare it again: momoe-data prepare --out " + spec_.out_dir + " --train "))
      << s.message();
  EXPECT_TRUE(contains(s.message(), "damaged")) << s.message();
  testing::write_file(path, text.substr(0, text.size() / 2));
  EXPECT_EQ(open().code(), StatusCode::kFailedPrecondition);
  fs::remove(path);
  EXPECT_EQ(open().code(), StatusCode::kNotFound);
}

TEST_F(DamagedDatasetTest, TruncatedOrCorruptedShardsAreRefusedByName) {
  const std::string bytes = testing::read_file(shard_);
  testing::write_file(shard_, bytes.substr(0, bytes.size() - 4));
  Status s = open(false);  // even without the payload check: the size disagrees
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(s.message(), "run `momoe-data verify " + spec_.out_dir + "`"))
      << s.message();
  EXPECT_TRUE(contains(s.message(), shard_)) << s.message();
  EXPECT_TRUE(contains(s.message(), "truncated")) << s.message();

  std::string flipped = bytes;
  flipped[bytes.size() - 3] = static_cast<char>(flipped[bytes.size() - 3] ^ 0x01);
  testing::write_file(shard_, flipped);
  s = open(true);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(s.message(), shard_) && contains(s.message(), "corrupted")) << s.message();

  // Every damaged shard, listed by verify.
  const std::string first = spec_.out_dir + "/" + index_.splits.at("train").shards[0].file;
  const std::string first_bytes = testing::read_file(first);
  testing::write_file(first, first_bytes.substr(0, 70));
  s = verify_dataset(spec_.out_dir).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(s.message(), "2 damaged shard(s)") && contains(s.message(), first) &&
              contains(s.message(), shard_))
      << s.message();
  testing::write_file(first, first_bytes);

  fs::remove(shard_);
  s = open(false);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(s.message(), shard_)) << s.message();
}

TEST_F(DamagedDatasetTest, AShardOfAnotherPreparationIsRefused) {
  // Another vocabulary: refused by fingerprint, naming the shard.
  PrepareSpec other = spec_;
  other.out_dir = dir_.file("other");
  other.vocab.max_size = 30;
  ASSERT_TRUE(prepare_dataset(other).ok());
  const DatasetIndex oi = *read_dataset_index(other.out_dir);
  fs::copy_file(other.out_dir + "/" + oi.splits.at("train").shards[1].file, shard_,
                fs::copy_options::overwrite_existing);
  Status s = open(false);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(s.message(), shard_) && contains(s.message(), "vocabulary mismatch"))
      << s.message();
  // The same vocabulary, another shard of it: the index's count and checksum disagree.
  fs::copy_file(spec_.out_dir + "/" + index_.splits.at("train").shards[2].file, shard_,
                fs::copy_options::overwrite_existing);
  s = open(false);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(s.message(), "does not match the dataset's index")) << s.message();
}

}  // namespace
}  // namespace moe::data
