// Checkpoint file formats: safetensors byte layout and round trips, every malformed-file error,
// the crash-safe directory commit, manifests and their verification.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/checkpoint/checkpoint_io.h"
#include "core/checkpoint/file_util.h"
#include "core/checkpoint/safetensors.h"

namespace moe::ckpt {
namespace {
namespace fs = std::filesystem;

std::string temp_dir(const std::string& name) {
  const std::string d = (fs::temp_directory_path() / ("momoe_ckpt_" + name + "_" + std::to_string(::getpid()))).string();
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(SafetensorsTest, ByteLayoutOfATinyFile) {
  Tensor a = Tensor::from_vector<float>({2}, {1.0f, -2.0f});
  Tensor b = Tensor::from_vector<int32_t>({1, 1}, {7});
  SafetensorsWriter w;
  w.add("a", a);
  w.add("b", b);
  w.set_metadata("format", "pt");
  const std::string bytes = w.serialize();
  // Independent parse: little-endian u64 header length, JSON, 8-byte padding, then data.
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  EXPECT_EQ(n % 8, 0u);
  ASSERT_EQ(bytes.size(), 8 + n + 8 + 4);
  const nlohmann::json h = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(h["__metadata__"]["format"], "pt");
  EXPECT_EQ(h["a"]["dtype"], "F32");
  EXPECT_EQ(h["a"]["shape"], nlohmann::json::array({2}));
  EXPECT_EQ(h["a"]["data_offsets"], nlohmann::json::array({0, 8}));
  EXPECT_EQ(h["b"]["dtype"], "I32");
  EXPECT_EQ(h["b"]["data_offsets"], nlohmann::json::array({8, 12}));
  float f[2];
  std::memcpy(f, bytes.data() + 8 + n, 8);
  EXPECT_EQ(f[1], -2.0f);
  EXPECT_EQ(bytes.substr(8, n).find("{\"__metadata__\""), 0u);  // metadata first, then insertion order
  EXPECT_LT(bytes.find("\"a\""), bytes.find("\"b\""));
}

TEST(SafetensorsTest, RoundTripEveryDtypeAndAwkwardShapes) {
  const std::string dir = temp_dir("roundtrip");
  std::vector<Tensor> ts;
  ts.push_back(Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6}));
  ts.push_back(Tensor::from_vector<double>({1}, {3.25}));
  ts.push_back(Tensor::from_vector<int64_t>({2}, {-5, 1ll << 40}));
  ts.push_back(Tensor::from_vector<uint8_t>({3}, {1, 2, 255}));
  Tensor bf = Tensor::empty({2}, DType::kBF16);
  bf.data<bf16>()[0] = bf16(1.5f);
  bf.data<bf16>()[1] = bf16(-3.0f);
  ts.push_back(std::move(bf));
  ts.push_back(Tensor::zeros({0, 4}, DType::kF32));  // zero-size
  Tensor scalar = Tensor::empty(Shape{}, DType::kF32);
  scalar.data<float>()[0] = 42.f;
  ts.push_back(std::move(scalar));
  SafetensorsWriter w;
  for (size_t i = 0; i < ts.size(); ++i) w.add("t" + std::to_string(i), ts[i]);
  ASSERT_TRUE(w.write(dir + "/x.safetensors").ok());
  StatusOr<SafetensorsFile> f = SafetensorsFile::open(dir + "/x.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->names().size(), ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    StatusOr<Tensor> back = f->read("t" + std::to_string(i));
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(back->shape(), ts[i].shape());
    EXPECT_EQ(back->dtype(), ts[i].dtype());
    EXPECT_EQ(std::memcmp(back->raw(), ts[i].raw(), ts[i].nbytes()), 0);
  }
  Tensor wrong = Tensor::empty({3, 2}, DType::kF32);
  Status s = f->read_into("t0", wrong);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("F32[2, 3], expected F32[3, 2]"), std::string::npos) << s.message();
  EXPECT_EQ(f->read("missing").status().code(), StatusCode::kNotFound);
  fs::remove_all(dir);
}

TEST(SafetensorsTest, MalformedFilesAreRefusedNamingTheProblem) {
  Tensor a = Tensor::from_vector<float>({4}, {1, 2, 3, 4});
  SafetensorsWriter w;
  w.add("weights", a);
  const std::string good = w.serialize();
  auto error = [](const std::string& bytes) {
    StatusOr<SafetensorsFile> f = SafetensorsFile::parse(bytes, "m.safetensors");
    return f.ok() ? std::string("ok") : f.status().to_string();
  };
  EXPECT_EQ(error(good), "ok");
  EXPECT_NE(error(good.substr(0, 5)).find("too small"), std::string::npos);
  EXPECT_NE(error(good.substr(0, good.size() - 3)).find("'weights'"), std::string::npos);
  EXPECT_NE(error(good.substr(0, 20)).find("header length"), std::string::npos);
  std::string bad_json = good;
  bad_json[8] = '[';
  EXPECT_NE(error(bad_json).find("not a JSON object"), std::string::npos);
  auto with_header = [&](const std::string& json) {
    std::string h = json;
    while (h.size() % 8) h += ' ';
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
    return out + h + std::string(16, '\0');
  };
  EXPECT_NE(error(with_header(R"({"w":{"dtype":"F17","shape":[4],"data_offsets":[0,16]}})")).find("unsupported dtype"),
            std::string::npos);
  EXPECT_NE(error(with_header(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})")).find("do not hold 3"),
            std::string::npos);
  EXPECT_NE(error(with_header(R"({"w":{"dtype":"F32","shape":[4]}})")).find("needs dtype, shape and data_offsets"),
            std::string::npos);
  EXPECT_NE(error(with_header(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})"))
                .find("overlap"), std::string::npos);
  EXPECT_NE(error(with_header(R"({"w":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}})")).find("outside"),
            std::string::npos);
  EXPECT_EQ(SafetensorsFile::open("/nonexistent/x.safetensors").status().code(), StatusCode::kNotFound);
}

TEST(CheckpointDirTest, AtomicCommitManifestVerificationAndPruning) {
  const std::string run = temp_dir("dirs");
  for (int64_t step : {5, 10, 15}) {
    StatusOr<AtomicDirectory> d = AtomicDirectory::begin(run + "/" + checkpoint_dir_name(step));
    ASSERT_TRUE(d.ok());
    write_bytes(d->path() + "/data.bin", "payload-" + std::to_string(step));
    CheckpointManifestInfo m;
    m.step = step;
    m.files.push_back(*describe_file(d->path(), "data.bin", CheckpointFileKind::kDense, 0, 1));
    ASSERT_TRUE(write_manifest(d->path(), m).ok());
    ASSERT_TRUE(d->commit().ok());
  }
  // A crash mid-write leaves only a .tmp directory, which is never picked.
  fs::create_directories(run + "/" + checkpoint_dir_name(20) + ".tmp");
  StatusOr<std::string> latest = find_latest_checkpoint(run);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(fs::path(*latest).filename(), "ckpt-00000015");
  StatusOr<CheckpointManifestInfo> m = read_manifest(*latest);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->step, 15);
  EXPECT_TRUE(verify_checkpoint_dir(*latest, *m).ok());

  // Corrupt one byte: checksum mismatch. Truncate: size mismatch. Delete: missing.
  write_bytes(*latest + "/data.bin", "payload-16");
  Status s = verify_checkpoint_dir(*latest, *m);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("checksum mismatch in data.bin"), std::string::npos) << s.message();
  write_bytes(*latest + "/data.bin", "pay");
  s = verify_checkpoint_dir(*latest, *m);
  EXPECT_NE(s.message().find("data.bin is 3 bytes, manifest says 10"), std::string::npos) << s.message();
  fs::remove(*latest + "/data.bin");
  EXPECT_NE(verify_checkpoint_dir(*latest, *m).message().find("missing"), std::string::npos);

  // Re-committing a step replaces the old directory.
  StatusOr<AtomicDirectory> again = AtomicDirectory::begin(run + "/" + checkpoint_dir_name(15));
  write_bytes(again->path() + "/other.bin", "x");
  ASSERT_TRUE(write_manifest(again->path(), CheckpointManifestInfo{}).ok());
  ASSERT_TRUE(again->commit().ok());
  EXPECT_TRUE(fs::exists(run + "/ckpt-00000015/other.bin"));
  EXPECT_FALSE(fs::exists(run + "/ckpt-00000015/data.bin"));

  ASSERT_TRUE(prune_checkpoints(run, 1).ok());
  EXPECT_FALSE(fs::exists(run + "/ckpt-00000005"));
  EXPECT_FALSE(fs::exists(run + "/ckpt-00000010"));
  EXPECT_TRUE(fs::exists(run + "/ckpt-00000015"));
  EXPECT_EQ(read_manifest(run).status().code(), StatusCode::kNotFound);
  write_bytes(run + "/ckpt-00000015/manifest.pb", "\xff\xff garbage");
  EXPECT_EQ(read_manifest(run + "/ckpt-00000015").status().code(), StatusCode::kDataLoss);
  fs::remove_all(run);
}

}  // namespace
}  // namespace moe::ckpt
