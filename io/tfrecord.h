// TFRecord framing, the record format of TensorFlow and of TensorBoard's event files, and the
// CRC-32C (Castagnoli) it checksums with. One record is
//   uint64 length (little-endian) | uint32 masked_crc32c(those 8 bytes) | data | uint32
//   masked_crc32c(data)
// where masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8, so that a CRC of data that
// itself holds CRCs is not degenerate. A reader that meets a bad checksum knows the record is
// damaged; TensorBoard stops reading that file there and keeps what it read before.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace moe::io {

// CRC-32C (iSCSI, RFC 3720; reflected polynomial 0x82F63B78): crc32c_of("123456789") ==
// 0xE3069283. Debian 12 packages no C++ CRC-32C library, hence this table-driven one.
uint32_t crc32c_of(std::string_view bytes);
// TFRecord's mask of a CRC (see above).
uint32_t mask_crc32c(uint32_t crc);

inline constexpr size_t kTfRecordOverhead = 16;  // header 8 + 4, footer 4

// `data` as one framed record (data.size() + kTfRecordOverhead bytes).
std::string tfrecord_frame(std::string_view data);

// The record of `bytes` that starts at *offset: returns its data and moves *offset past it.
// kDataLoss naming the offset when the record is cut short or a checksum does not match
// (*offset is left where it was). Callers stop at *offset == bytes.size().
StatusOr<std::string> read_tfrecord(std::string_view bytes, size_t* offset);

}  // namespace moe::io
