// safetensors files: the exact bytes of a tiny file against a hand-built one, an independent
// parse of the header (nlohmann here, not the reader under test), files laid out the way the
// reference writer lays them out, round trips of every dtype and awkward shape, and every
// malformed file refused with an error naming the file and the tensor.
#include "core/checkpoint/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

namespace moe::ckpt {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// 8-byte little-endian length, the header as given (no padding added), then `data`.
std::string file_with_header(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<char>((static_cast<uint64_t>(header.size()) >> (8 * i)) & 0xff);
  return out + header + data;
}

TEST(SafetensorsTest, TinyFileMatchesHandBuiltBytes) {
  Tensor a = Tensor::from_vector<float>({2}, {1.0f, -2.0f});
  Tensor b = Tensor::from_vector<int32_t>({1, 1}, {7});
  SafetensorsWriter w;
  w.add("a", a);
  w.add("b", b);
  w.set_metadata("format", "pt");
  // 141 bytes of JSON padded with 3 spaces to 144 = 0x90; then 1.0f, -2.0f, 7 little-endian.
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"I32","shape":[1,1],"data_offsets":[8,12]}}   )";
  ASSERT_EQ(header.size(), 144u);
  std::string expected("\x90\0\0\0\0\0\0\0", 8);
  expected += header;
  expected += std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0\x07\x00\x00\x00", 12);
  EXPECT_EQ(w.serialize(), expected);
  EXPECT_EQ(w.serialize(), w.serialize());  // deterministic
}

TEST(SafetensorsTest, HeaderParsesIndependentlyAndTensorsKeepInsertionOrder) {
  Tensor z = Tensor::from_vector<double>({3}, {0.5, 1.5, 2.5});
  Tensor y = Tensor::from_vector<uint8_t>({5}, {1, 2, 3, 4, 5});
  Tensor x = Tensor::from_vector<int64_t>({2, 1}, {-1, 1ll << 50});
  SafetensorsWriter w;
  w.add("z", z);
  w.add("y", y);
  w.add("x", x);
  w.set_metadata("step", "12");
  w.set_metadata("first_expert", "4");
  const std::string bytes = w.serialize();
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  EXPECT_EQ(n % 8, 0u);
  ASSERT_EQ(bytes.size(), 8 + n + 24 + 5 + 16);
  const std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.front(), '{');
  EXPECT_EQ(header.find_last_not_of(' '), header.rfind('}'));  // padding is spaces only
  const json h = json::parse(header);
  EXPECT_EQ(h.size(), 4u);
  EXPECT_EQ(h["__metadata__"], json({{"step", "12"}, {"first_expert", "4"}}));
  EXPECT_EQ(h["z"], json({{"dtype", "F64"}, {"shape", {3}}, {"data_offsets", {0, 24}}}));
  EXPECT_EQ(h["y"], json({{"dtype", "U8"}, {"shape", {5}}, {"data_offsets", {24, 29}}}));
  EXPECT_EQ(h["x"], json({{"dtype", "I64"}, {"shape", {2, 1}}, {"data_offsets", {29, 45}}}));
  // Header key order: __metadata__, then insertion order.
  EXPECT_LT(header.find("\"__metadata__\""), header.find("\"z\""));
  EXPECT_LT(header.find("\"z\""), header.find("\"y\""));
  EXPECT_LT(header.find("\"y\""), header.find("\"x\""));
  const char* data = bytes.data() + 8 + n;
  double d[3];
  std::memcpy(d, data, 24);
  EXPECT_EQ(d[2], 2.5);
  EXPECT_EQ(static_cast<uint8_t>(data[28]), 5);
  int64_t i64[2];
  std::memcpy(i64, data + 29, 16);  // unaligned within the data section: the format allows it
  EXPECT_EQ(i64[1], 1ll << 50);
}

TEST(SafetensorsTest, ReadsFilesLaidOutByOtherWriters) {
  // The reference crate's doc example: a 60-byte header (not padded), I32 [2, 2].
  const std::string doc = file_with_header(
      R"({"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}})", std::string(16, '\0'));
  StatusOr<SafetensorsFile> f = SafetensorsFile::parse(doc, "doc.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  Tensor t = Tensor::empty({2, 2}, DType::kI32);
  ASSERT_TRUE(f->read_into("test", t).ok());
  EXPECT_EQ(t.data<int32_t>()[3], 0);

  // Keys in another order than the data, header whitespace, an empty __metadata__, and a
  // tensor entry with an extra field (ignored, as by the reference reader).
  std::string data(12, '\0');
  const float two = 2.0f;
  const int32_t minus_three = -3;
  std::memcpy(&data[0], &minus_three, 4);
  std::memcpy(&data[4], &two, 4);
  std::memcpy(&data[8], &two, 4);
  const std::string other = file_with_header(
      "{ \"__metadata__\": {},\n \"w\": {\"shape\": [2], \"dtype\": \"F32\", \"data_offsets\": [4, "
      "12], \"x\": 1},\n"
      " \"idx\": {\"dtype\": \"I32\", \"shape\": [], \"data_offsets\": [0, 4]} }",
      data);
  f = SafetensorsFile::parse(other, "other.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->names(), (std::vector<std::string>{"idx", "w"}));
  EXPECT_TRUE(f->metadata().empty());
  StatusOr<Tensor> idx = f->read("idx");
  ASSERT_TRUE(idx.ok()) << idx.status().to_string();
  EXPECT_EQ(idx->ndim(), 0);
  EXPECT_EQ(idx->data<int32_t>()[0], -3);
  StatusOr<Tensor> wt = f->read("w");
  ASSERT_TRUE(wt.ok());
  EXPECT_EQ(wt->data<float>()[1], 2.0f);
}

std::string temp_dir(const std::string& name) {
  const fs::path d =
      fs::temp_directory_path() / ("momoe_st_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

TEST(SafetensorsTest, RoundTripEveryDtypeAndAwkwardShapes) {
  const std::string dir = temp_dir("roundtrip");
  std::vector<std::pair<std::string, Tensor>> ts;
  ts.emplace_back("f32", Tensor::from_vector<float>({2, 3}, {1, -2, 3.5f, 1e-30f, -0.0f, 7}));
  ts.emplace_back("f64", Tensor::from_vector<double>({1, 2}, {3.25, -1e300}));
  ts.emplace_back("i32",
                  Tensor::from_vector<int32_t>({3}, {-7, 0, std::numeric_limits<int32_t>::max()}));
  ts.emplace_back("i64",
                  Tensor::from_vector<int64_t>({2}, {-5, std::numeric_limits<int64_t>::min()}));
  ts.emplace_back("u8", Tensor::from_vector<uint8_t>({3}, {1, 0, 255}));
  Tensor bf = Tensor::empty({2, 1}, DType::kBF16);
  bf.data<bf16>()[0] = bf16(1.5f);
  bf.data<bf16>()[1].bits = 0x7fc1;  // a NaN with a payload: bytes, not values, must survive
  ts.emplace_back("bf16", std::move(bf));
  Tensor nan = Tensor::empty({1}, DType::kF32);
  nan.data<float>()[0] = std::nanf("3");
  ts.emplace_back("f32_nan", std::move(nan));
  Tensor scalar = Tensor::empty(Shape{}, DType::kF64);
  scalar.data<double>()[0] = 42.0;
  ts.emplace_back("scalar", std::move(scalar));
  ts.emplace_back("empty_rows", Tensor::zeros({0, 4}, DType::kF32));
  ts.emplace_back("empty_mid", Tensor::zeros({3, 0, 2}, DType::kI64));
  Tensor six = Tensor::empty({1, 2, 1, 2, 1, 2}, DType::kU8);
  for (int i = 0; i < 8; ++i) six.data<uint8_t>()[i] = static_cast<uint8_t>(10 * i);
  ts.emplace_back("six_dims", std::move(six));

  SafetensorsWriter w;
  for (const auto& [name, t] : ts) w.add(name, t);
  w.set_metadata("format", "pt");
  w.set_metadata("note", "ünïcode ✓");
  const std::string path = dir + "/x.safetensors";
  ASSERT_TRUE(w.write(path).ok());
  ASSERT_EQ(fs::directory_iterator(dir)->path().filename(), "x.safetensors");  // no temp file left

  StatusOr<SafetensorsFile> f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->path(), path);
  EXPECT_EQ(f->metadata().at("note"), "ünïcode ✓");
  EXPECT_EQ(f->metadata().size(), 2u);
  EXPECT_EQ(f->names().size(), ts.size());
  int64_t offset = 0;
  for (const auto& [name, t] : ts) {
    SCOPED_TRACE(name);
    StatusOr<TensorInfo> info = f->info(name);
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->dtype, t.dtype());
    EXPECT_EQ(info->shape, t.shape().to_vector());
    EXPECT_EQ(info->begin, offset);  // laid out in insertion order
    offset += static_cast<int64_t>(t.nbytes());
    EXPECT_EQ(info->end, offset);
    Tensor into = Tensor::empty(t.shape(), t.dtype());
    if (into.nbytes() > 0) std::memset(into.raw(), 0xab, into.nbytes());
    ASSERT_TRUE(f->read_into(name, into).ok());
    if (t.nbytes() > 0) {
      EXPECT_EQ(std::memcmp(into.raw(), t.raw(), t.nbytes()), 0);
    }
    StatusOr<Tensor> back = f->read(name);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(back->shape(), t.shape());
    EXPECT_EQ(back->dtype(), t.dtype());
    if (t.nbytes() > 0) {
      EXPECT_EQ(std::memcmp(back->raw(), t.raw(), t.nbytes()), 0);
    }
  }
  EXPECT_EQ(f->info("scalar")->shape, std::vector<int64_t>{});
  EXPECT_EQ(f->info("empty_rows")->end - f->info("empty_rows")->begin, 0);
  fs::remove_all(dir);
}

TEST(SafetensorsTest, ReadIntoChecksDtypeShapeAndDevice) {
  Tensor a = Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  SafetensorsWriter w;
  w.add("layer.w", a);
  StatusOr<SafetensorsFile> f = SafetensorsFile::parse(w.serialize(), "p.safetensors");
  ASSERT_TRUE(f.ok());
  Tensor wrong_shape = Tensor::empty({3, 2}, DType::kF32);
  Status s = f->read_into("layer.w", wrong_shape);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s.message(), "'layer.w' in p.safetensors is F32[2, 3], expected F32[3, 2]"))
      << s.message();
  Tensor wrong_dtype = Tensor::empty({2, 3}, DType::kF64);
  s = f->read_into("layer.w", wrong_dtype);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s.message(), "is F32[2, 3], expected F64[2, 3]")) << s.message();
  float never_touched[6];
  s = f->read_into("layer.w", TensorView(never_touched, DType::kF32, {2, 3}, Device::cuda(0)));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s.message(), "host")) << s.message();
  s = f->read_into("layer.b", wrong_shape);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_TRUE(contains(s.message(), "'layer.b' is not in p.safetensors")) << s.message();
  EXPECT_EQ(f->info("layer.b").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(f->read("layer.b").status().code(), StatusCode::kNotFound);
}

TEST(SafetensorsTest, MoreDimsThanATensorHoldsIsAnErrorNotACrash) {
  const std::string bytes = file_with_header(
      R"({"deep":{"dtype":"U8","shape":[1,1,1,1,1,1,2],"data_offsets":[0,2]}})", "ab");
  StatusOr<SafetensorsFile> f = SafetensorsFile::parse(bytes, "deep.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->info("deep")->shape.size(), 7u);
  StatusOr<Tensor> t = f->read("deep");
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(t.status().message(), "7 dims")) << t.status().message();
  Tensor flat = Tensor::empty({2}, DType::kU8);
  EXPECT_TRUE(
      contains(f->read_into("deep", flat).message(), "U8[1, 1, 1, 1, 1, 1, 2], expected U8[2]"));
}

// Every malformed file: kDataLoss, naming the file, the tensor where there is one, and the
// problem.
TEST(SafetensorsTest, MalformedFilesAreRefusedNamingFileAndTensor) {
  Tensor a = Tensor::from_vector<float>({4}, {1, 2, 3, 4});
  SafetensorsWriter w;
  w.add("weights", a);
  const std::string good = w.serialize();
  ASSERT_TRUE(SafetensorsFile::parse(good, "m.safetensors").ok());
  const std::string data16(16, '\0');
  struct Case {
    std::string what, bytes, tensor, problem;
  };
  std::string huge_length = good;
  huge_length[5] = 1;  // 2^40 + small
  std::string bad_utf8 = file_with_header(std::string("{\"w\xff\":{}}"), "");
  const std::vector<Case> cases = {
      {"shorter than the length field", good.substr(0, 5), "", "too small"},
      {"empty", "", "", "too small"},
      {"header cut off", good.substr(0, 20), "", "exceeds the 12 bytes"},
      {"absurd header length", huge_length, "", "limit"},
      {"not JSON", file_with_header("{\"w\": [0, ", data16), "", "not valid UTF-8 JSON"},
      {"not UTF-8", bad_utf8, "", "not valid UTF-8 JSON"},
      {"not an object", file_with_header("[1, 2]", ""), "", "not a JSON object"},
      {"metadata not strings", file_with_header(R"({"__metadata__":{"k":3}})", ""), "",
       "metadata 'k' is not a string"},
      {"metadata not an object", file_with_header(R"({"__metadata__":[]})", ""), "",
       "__metadata__ is not an object"},
      {"missing data_offsets", file_with_header(R"({"w":{"dtype":"F32","shape":[4]}})", data16),
       "'w'", "needs dtype"},
      {"missing dtype", file_with_header(R"({"w":{"shape":[4],"data_offsets":[0,16]}})", data16),
       "'w'", "needs dtype"},
      {"entry not an object", file_with_header(R"({"w":7})", ""), "'w'", "needs dtype"},
      {"one offset",
       file_with_header(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[16]}})", data16), "'w'",
       "needs dtype"},
      {"unknown dtype",
       file_with_header(R"({"w":{"dtype":"F16","shape":[8],"data_offsets":[0,16]}})", data16),
       "'w'", "unsupported dtype \"F16\""},
      {"negative dim",
       file_with_header(R"({"w":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", data16),
       "'w'", "bad shape"},
      {"fractional dim",
       file_with_header(R"({"w":{"dtype":"F32","shape":[4.0],"data_offsets":[0,16]}})", data16),
       "'w'", "bad shape"},
      {"overflowing shape",
       file_with_header(
           R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]}})",
           data16),
       "'w'", "bad shape"},
      {"negative offset",
       file_with_header(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[-16,0]}})", data16),
       "'w'", "bad data_offsets"},
      {"size not dtype x shape",
       file_with_header(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", data16),
       "'w'", "do not hold 3 elements of F32 (12 bytes)"},
      {"end before begin",
       file_with_header(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[16,0]}})", data16),
       "'w'", "do not hold"},
      {"past the end",
       file_with_header(R"({"w":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}})", data16),
       "'w'", "run past the 16 data bytes"},
      {"truncated data", good.substr(0, good.size() - 3), "'weights'",
       "run past the 13 data bytes"},
      {"overlap",
       file_with_header(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                        data16),
       "'b'", "overlaps tensor 'a', which ends at byte 16"},
      {"gap at the start",
       file_with_header(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", data16),
       "'w'", "leave bytes [0, 8) at the start of the data unused"},
      {"gap between",
       file_with_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                        data16),
       "'b'", "leave bytes [4, 8) after tensor 'a' unused"},
      {"trailing bytes", good + "xyz", "'weights'",
       "3 bytes after the last tensor 'weights' belong to no tensor"},
      {"data but no tensors", file_with_header("{}", "ab"), "",
       "2 bytes of data belong to no tensor"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    StatusOr<SafetensorsFile> f = SafetensorsFile::parse(c.bytes, "m.safetensors");
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(f.status().code(), StatusCode::kDataLoss);
    const std::string& msg = f.status().message();
    EXPECT_TRUE(contains(msg, "m.safetensors")) << msg;
    EXPECT_TRUE(contains(msg, c.problem)) << msg;
    if (!c.tensor.empty()) {
      EXPECT_TRUE(contains(msg, "tensor " + c.tensor)) << msg;
    }
  }
}

TEST(SafetensorsTest, OpenNamesAMissingOrTruncatedFile) {
  StatusOr<SafetensorsFile> f = SafetensorsFile::open("/nonexistent/x.safetensors");
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(contains(f.status().message(), "/nonexistent/x.safetensors")) << f.status().message();

  const std::string dir = temp_dir("truncated");
  Tensor a = Tensor::from_vector<int32_t>({2}, {1, 2});
  SafetensorsWriter w;
  w.add("ids", a);
  const std::string path = dir + "/t.safetensors";
  ASSERT_TRUE(w.write(path).ok());
  fs::resize_file(path, fs::file_size(path) - 1);
  f = SafetensorsFile::open(path);
  EXPECT_EQ(f.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(f.status().message(), path + ", tensor 'ids'")) << f.status().message();
  fs::remove_all(dir);
}

TEST(SafetensorsDeathTest, DuplicateOrReservedNamesAreProgrammerErrors) {
  Tensor a = Tensor::from_vector<float>({1}, {1});
  EXPECT_DEATH(
      {
        SafetensorsWriter w;
        w.add("x", a);
        w.add("x", a);
      },
      "added twice");
  EXPECT_DEATH(
      {
        SafetensorsWriter w;
        w.add("__metadata__", a);
      },
      "not a tensor name");
}

}  // namespace
}  // namespace moe::ckpt
