#include "io/tfrecord.h"

#include <array>

namespace moe::io {
namespace {

// The byte-at-a-time table of the reflected Castagnoli polynomial.
std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}

void put_le(uint64_t v, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t get_le(std::string_view bytes, size_t at, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i)
    v |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[at + i])) << (8 * i);
  return v;
}

}  // namespace

uint32_t crc32c_of(std::string_view bytes) {
  static const std::array<uint32_t, 256> table = make_crc32c_table();
  uint32_t crc = 0xFFFFFFFFu;
  for (const char ch : bytes) crc = table[(crc ^ static_cast<uint8_t>(ch)) & 0xff] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

uint32_t mask_crc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

std::string tfrecord_frame(std::string_view data) {
  std::string out;
  out.reserve(data.size() + kTfRecordOverhead);
  put_le(data.size(), 8, &out);
  put_le(mask_crc32c(crc32c_of(out)), 4, &out);
  out.append(data);
  put_le(mask_crc32c(crc32c_of(data)), 4, &out);
  return out;
}

StatusOr<std::string> read_tfrecord(std::string_view bytes, size_t* offset) {
  const size_t at = *offset;
  if (bytes.size() < at || bytes.size() - at < 12) {
    return data_loss_error("TFRecord at byte ", at, ": the header is cut short");
  }
  if (get_le(bytes, at + 8, 4) != mask_crc32c(crc32c_of(bytes.substr(at, 8)))) {
    return data_loss_error("TFRecord at byte ", at, ": the length's checksum does not match");
  }
  const uint64_t length = get_le(bytes, at, 8);
  if (bytes.size() - at - 12 < 4 || length > bytes.size() - at - 16) {
    return data_loss_error("TFRecord at byte ", at, ": ", length, " data bytes are cut short");
  }
  const std::string_view data = bytes.substr(at + 12, length);
  if (get_le(bytes, at + 12 + length, 4) != mask_crc32c(crc32c_of(data))) {
    return data_loss_error("TFRecord at byte ", at, ": the data's checksum does not match");
  }
  *offset = at + kTfRecordOverhead + length;
  return std::string(data);
}

}  // namespace moe::io
