// FNV-1a 64-bit hashing of byte strings: stable across runs, platforms and ranks (used to key
// random streams by parameter name and to compare configurations between ranks).
#pragma once

#include <cstdint>
#include <string_view>

namespace moe {

inline uint64_t fnv1a64(std::string_view bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace moe
