// Small file helpers for the data pipeline: crash-safe writes (temporary name, fsync, rename),
// whole-file reads, and the two checksums the on-disk formats use (FNV-1a 64 for identities such
// as the vocabulary fingerprint, CRC32 from zlib for payload integrity).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"

namespace moe::data {

// FNV-1a 64-bit hash. `fnv1a64_update` continues a running hash; start from kFnv1a64Offset.
inline constexpr uint64_t kFnv1a64Offset = 0xcbf29ce484222325ull;
inline constexpr uint64_t kFnv1a64Prime = 0x100000001b3ull;
uint64_t fnv1a64_update(uint64_t hash, const void* data, size_t size);
inline uint64_t fnv1a64(std::string_view bytes) {
  return fnv1a64_update(kFnv1a64Offset, bytes.data(), bytes.size());
}

// CRC32 (zlib's polynomial) of a byte range; the empty range gives 0.
uint32_t crc32_of(const void* data, size_t size);

// "0x0123456789abcdef" / "0x01234567".
std::string hex64(uint64_t value);
std::string hex32(uint32_t value);

// Writes `parts` (concatenated) to `path` so that a crash never leaves a partial file under that
// name: write to a temporary name unique to this process in the same folder, fsync, rename over
// `path`, fsync the folder. Concurrent writers of the same content are safe (last rename wins).
// Errors: kInternal naming the path and the system error.
Status write_file_atomic(const std::string& path, const std::vector<std::string_view>& parts);

// The whole file as bytes. Errors: kNotFound (missing), kInternal (unreadable), naming the path.
StatusOr<std::string> read_file_bytes(const std::string& path);

}  // namespace moe::data
