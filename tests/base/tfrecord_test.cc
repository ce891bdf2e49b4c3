// io/tfrecord.h: CRC-32C against the published check values (RFC 3720 B.4 and the CRC catalogue's
// "123456789"), the mask against TensorBoard's masked_crc32c, a record's bytes against a record
// framed by TensorBoard's own code, and the reader: records read back in order, and every
// flipped byte or cut anywhere in a record reported as kDataLoss, never read as data.
#include "io/tfrecord.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace moe::io {
namespace {

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

TEST(Crc32cTest, CheckValues) {
  EXPECT_EQ(crc32c_of("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c_of(""), 0u);
  EXPECT_EQ(crc32c_of(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c_of(std::string(32, '\xff')), 0x62A8AB43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  EXPECT_EQ(crc32c_of(ascending), 0x46DD794Eu);
}

TEST(Crc32cTest, MaskAsTensorBoardComputesIt) {
  // tensorboard.compat.tensorflow_stub.pywrap_tensorflow.masked_crc32c (tensorboard 2.21.0).
  EXPECT_EQ(mask_crc32c(crc32c_of("")), 0xa282ead8u);
  EXPECT_EQ(mask_crc32c(crc32c_of("123456789")), 0xc78ab0e5u);
}

TEST(TfRecordTest, FramesAsTensorBoardDoes) {
  // An Event {wall_time 1.5, file_version "brain.Event:2"}, framed by Python with struct and
  // TensorBoard's masked_crc32c.
  const std::string data = from_hex("09000000000000f83f1a0d627261696e2e4576656e743a32");
  const std::string framed = from_hex(
      "1800000000000000a37f4b22"
      "09000000000000f83f1a0d627261696e2e4576656e743a32"
      "2a28646c");
  EXPECT_EQ(tfrecord_frame(data), framed);
}

TEST(TfRecordTest, RecordsReadBackInOrder) {
  const std::vector<std::string> records = {"", "x", std::string(300, 'a'), "brain.Event:2"};
  std::string file;
  for (const std::string& r : records) file += tfrecord_frame(r);
  size_t offset = 0;
  for (const std::string& r : records) {
    StatusOr<std::string> got = read_tfrecord(file, &offset);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    EXPECT_EQ(*got, r);
  }
  EXPECT_EQ(offset, file.size());
}

TEST(TfRecordTest, EveryFlippedByteIsDataLoss) {
  const std::string first = tfrecord_frame("first record");
  const std::string second = tfrecord_frame("the second record, which gets damaged");
  for (size_t i = 0; i < second.size(); ++i) {
    for (const unsigned char flip : {0x01, 0x80}) {
      std::string file = first + second;
      file[first.size() + i] = static_cast<char>(file[first.size() + i] ^ flip);
      size_t offset = 0;
      StatusOr<std::string> one = read_tfrecord(file, &offset);
      ASSERT_TRUE(one.ok()) << one.status().to_string();
      EXPECT_EQ(*one, "first record");
      StatusOr<std::string> two = read_tfrecord(file, &offset);
      EXPECT_EQ(two.status().code(), StatusCode::kDataLoss) << "byte " << i << " flipped";
      EXPECT_EQ(offset, first.size()) << "the offset moved past a damaged record";
    }
  }
}

TEST(TfRecordTest, EveryCutIsDataLoss) {
  const std::string record = tfrecord_frame("a record cut short");
  for (size_t n = 0; n < record.size(); ++n) {
    size_t offset = 0;
    StatusOr<std::string> got = read_tfrecord(record.substr(0, n), &offset);
    EXPECT_EQ(got.status().code(), StatusCode::kDataLoss) << n << " bytes";
    EXPECT_EQ(offset, 0u);
  }
}

}  // namespace
}  // namespace moe::io
