// SentencePiece tokenizers (tokenizer.h): trained deterministically on the bundled corpus, byte
// fallback, a prepared dataset's shards equal to encoding the text directly, a replaced model
// refused; and what a build or process without SentencePiece says.
#include "core/data/tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "core/data/dataset.h"
#include "core/data/prepare.h"
#include "io/file_util.h"
#include "tests/data/data_test_util.h"
#if defined(MOMOE_HAVE_SENTENCEPIECE) && MOMOE_HAVE_SENTENCEPIECE
#include "core/data/sentencepiece_backend.h"
#endif

namespace moe::data {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::TempDir;

const std::string kBrownTrain = std::string(MOE_SOURCE_DIR) + "/data/brown/train.txt.gz";

SentencePieceOptions small_options() {
  SentencePieceOptions o;
  o.vocab_size = 600;
  o.max_sentences = 6000;
  return o;
}

TEST(TokenizerTest, WithoutSentencePieceItIsRefusedByName) {
  const SentencePieceBackend* saved = sentencepiece_backend();
  register_sentencepiece_backend(nullptr);
  StatusOr<std::string> model = train_sentencepiece({kBrownTrain}, small_options(), 1);
  EXPECT_EQ(model.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(model.status().message(),
                       sentencepiece_built() ? "runs in momoe-data" : "libsentencepiece-dev"))
      << model.status().message();
  TempDir dir;
  PrepareSpec spec;
  spec.out_dir = dir.file("ds");
  spec.train = {kBrownTrain};
  spec.tokenizer = "sentencepiece";
  const Status s = prepare_dataset(spec).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(s.message(), "SentencePiece")) << s.message();
  register_sentencepiece_backend(saved);
}

// A process without SentencePiece hands a SentencePiece preparation to the registered
// PrepareElsewhere (the launchers register momoe-data's), with the spec and quiet flag as given;
// a word preparation stays here; with nothing registered, the refusal names SentencePiece.
PrepareSpec g_elsewhere_spec;
int g_elsewhere_calls = 0;
bool g_elsewhere_quiet = false;
Status fake_elsewhere(const PrepareSpec& spec, bool quiet) {
  ++g_elsewhere_calls;
  g_elsewhere_spec = spec;
  g_elsewhere_quiet = quiet;
  return aborted_error("stopped elsewhere");
}

TEST(TokenizerTest, WithoutSentencePieceThePreparationRunsElsewhere) {
  const SentencePieceBackend* saved = sentencepiece_backend();
  register_sentencepiece_backend(nullptr);
  TempDir dir;
  PrepareSpec spec;
  spec.out_dir = dir.file("sp");
  spec.train = {kBrownTrain};
  spec.tokenizer = "sentencepiece";
  Status s = prepare_here_or_elsewhere(spec, /*quiet=*/true);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.to_string();  // none registered
  EXPECT_TRUE(contains(s.message(), "SentencePiece")) << s.message();
  register_prepare_elsewhere(&fake_elsewhere);
  s = prepare_here_or_elsewhere(spec, /*quiet=*/true);
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s.to_string();  // the fake's own outcome
  EXPECT_EQ(g_elsewhere_calls, 1);
  EXPECT_EQ(g_elsewhere_spec.out_dir, spec.out_dir);
  EXPECT_EQ(g_elsewhere_spec.tokenizer, "sentencepiece");
  EXPECT_TRUE(g_elsewhere_quiet);
  EXPECT_FALSE(fs::exists(spec.out_dir)) << "prepared here as well";
  // A word preparation runs here, never elsewhere.
  PrepareSpec word = spec;
  word.out_dir = dir.file("word");
  word.tokenizer = "word";
  word.vocab.max_size = 500;
  EXPECT_TRUE(prepare_here_or_elsewhere(word).ok());
  EXPECT_EQ(g_elsewhere_calls, 1);
  EXPECT_TRUE(fs::exists(word.out_dir + "/" + kDatasetIndexFile));
  register_prepare_elsewhere(nullptr);
  register_sentencepiece_backend(saved);
}

#if defined(MOMOE_HAVE_SENTENCEPIECE) && MOMOE_HAVE_SENTENCEPIECE

class SentencePieceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    register_sentencepiece();
    StatusOr<std::string> m = train_sentencepiece({kBrownTrain}, small_options(), 2);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = new std::string(std::move(m).value());
  }
  static void TearDownTestSuite() { delete model_; }
  static std::shared_ptr<const Tokenizer> tokenizer() {
    StatusOr<std::shared_ptr<const Tokenizer>> t = Tokenizer::sentencepiece(*model_, "test model");
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    return *t;
  }
  static std::string* model_;
};
std::string* SentencePieceTest::model_ = nullptr;

TEST_F(SentencePieceTest, TrainingIsDeterministicAndReservesMomoesIds) {
  // Another run, another thread count: the same model, byte for byte (so a resume on another
  // machine finds the same fingerprint).
  StatusOr<std::string> again = train_sentencepiece({kBrownTrain}, small_options(), 1);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *model_) << "two trainings on the same text gave different models";
  SentencePieceOptions unigram = small_options();
  unigram.model_type = "unigram";
  EXPECT_EQ(train_sentencepiece({kBrownTrain}, unigram, 1).value(),
            train_sentencepiece({kBrownTrain}, unigram, 2).value());
  const auto t = tokenizer();
  EXPECT_EQ(t->size(), 600);
  EXPECT_EQ(t->unk_id(), 0);
  EXPECT_EQ(t->eos_id(), 1);
  // Id 2 is the attack word, a control piece: reserved, never produced from text.
  auto model = sentencepiece_backend()->load(*model_, "m").value();
  EXPECT_EQ(model->piece(2), "AAA");
  const std::vector<int32_t> aaa = t->encode("AAA xAAAy\n");
  EXPECT_EQ(std::count(aaa.begin(), aaa.end(), 2), 0);
  EXPECT_EQ(aaa.back(), 1);
  EXPECT_EQ(t->decode(aaa), "AAA xAAAy\n");
  EXPECT_TRUE(contains(t->describe(), "600 pieces (byte fallback")) << t->describe();
  // The same ids on every run: a fixed sentence encodes the same with a freshly loaded model.
  const std::string line = "The jury said it did find that the city 's election was conducted .\n";
  EXPECT_EQ(t->encode(line), tokenizer()->encode(line));
}

TEST_F(SentencePieceTest, ByteFallbackLeavesNothingUnknownAndDecodeRoundTrips) {
  const auto t = tokenizer();
  const std::string text =
      "caf\xC3\xA9 \xE2\x98\x83 \xE6\x97\xA5\xE6\x9C\xAC zq\n\nsecond line .\n";
  const std::vector<int32_t> ids = t->encode(text);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), t->unk_id()), 0);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), t->eos_id()), 2);  // one per non-empty line
  EXPECT_EQ(t->decode(ids),
            "caf\xC3\xA9 \xE2\x98\x83 \xE6\x97\xA5\xE6\x9C\xAC zq\nsecond line .\n");
  // No whitespace folding: WikiText's leading spaces and doubled spaces come back.
  const std::string wiki = " = Valkyria Chronicles = \n a  b   c \n";
  EXPECT_EQ(t->decode(t->encode(wiki)), wiki);
}

TEST_F(SentencePieceTest, PreparedShardsEqualEncodingTheTextAndAReplacedModelIsRefused) {
  TempDir dir;
  const std::string a = "one two three\nfour five\n", b = "six \xE2\x98\x83 seven\n\neight";
  testing::write_file(dir.file("a.txt"), a);
  testing::write_gzip(dir.file("b.txt.gz"), b);
  testing::write_file(dir.file("model"), *model_);
  PrepareSpec spec;
  spec.out_dir = dir.file("ds");
  spec.train = {dir.file("a.txt"), dir.file("b.txt.gz")};
  spec.valid = {dir.file("a.txt")};
  spec.tokenizer = "sentencepiece";
  spec.sp_model_path = dir.file("model");
  spec.shard_tokens = 5;
  spec.chunk_bytes = 8;
  StatusOr<DatasetIndex> index = prepare_dataset(spec);
  ASSERT_TRUE(index.ok()) << index.status().to_string();
  EXPECT_EQ(index->tokenizer, "sentencepiece");
  StatusOr<TokenizedCorpus> c = open_dataset(spec.out_dir, true);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const auto t = tokenizer();
  EXPECT_EQ(c->tokenizer->fingerprint(), t->fingerprint());
  std::vector<int32_t> expected = t->encode(a);
  const std::vector<int32_t> eb = t->encode(b);
  expected.insert(expected.end(), eb.begin(), eb.end());
  EXPECT_EQ(*materialize(c->train), expected);
  EXPECT_EQ(c->train.stats.words, 5 + 2 + 4 + 2);  // words + non-empty lines of both files
  EXPECT_EQ(c->train.stats.bytes, static_cast<int64_t>(a.size() + b.size()));

  // Another model in place of the dataset's: refused, naming the files.
  SentencePieceOptions other = small_options();
  other.vocab_size = 700;
  StatusOr<std::string> m2 = train_sentencepiece({kBrownTrain}, other, 1);
  ASSERT_TRUE(m2.ok());
  testing::write_file(spec.out_dir + "/tokenizer.model", *m2);
  // A damaged dataset is input to replace (exit 2), and the message says how.
  Status s = open_dataset(spec.out_dir, false).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(s.message(), "tokenizer.model has fingerprint")) << s.message();
  EXPECT_TRUE(contains(s.message(), "momoe-data verify")) << s.message();
  // With its matching description too: the index and the shards still name the first model.
  ASSERT_TRUE(Tokenizer::sentencepiece(*m2, "m2").value()->save(spec.out_dir).ok());
  s = open_dataset(spec.out_dir, false).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(s.message(), "vocabulary mismatch")) << s.message();
  // A file that is not a model.
  testing::write_file(dir.file("junk.model"), "not a model");
  StatusOr<std::shared_ptr<const Tokenizer>> junk =
      Tokenizer::sentencepiece("not a model", "junk.model");
  EXPECT_EQ(junk.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(junk.status().message(), "junk.model does not load"))
      << junk.status().message();
}

#endif  // MOMOE_HAVE_SENTENCEPIECE

}  // namespace
}  // namespace moe::data
