// FNV-1a 64-bit hashing of byte strings: stable across runs, platforms and ranks (used to key
// random streams by parameter name, to compare configurations between ranks, and for identities
// such as the vocabulary fingerprint).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace moe {

inline constexpr uint64_t kFnv1a64Offset = 0xcbf29ce484222325ull;
inline constexpr uint64_t kFnv1a64Prime = 0x100000001b3ull;

// Continues a running hash (start from kFnv1a64Offset).
inline uint64_t fnv1a64_update(uint64_t hash, const void* data, size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    hash ^= p[i];
    hash *= kFnv1a64Prime;
  }
  return hash;
}

inline uint64_t fnv1a64(std::string_view bytes) {
  return fnv1a64_update(kFnv1a64Offset, bytes.data(), bytes.size());
}

}  // namespace moe
