// Binary cache of one split's token ids, so that a run (and every rank of it) does not re-read and
// re-tokenise the text. Layout (little-endian):
//
//   offset  size  field
//   0       8     magic "MOETOK01"
//   8       4     u32 format version (1)
//   12      4     u32 header size in bytes (40)
//   16      8     u64 vocabulary fingerprint (vocabulary.h)
//   24      8     u64 token count N
//   32      4     u32 CRC32 of the payload
//   36      4     u32 CRC32 of header bytes [0, 36)
//   40      4*N   i32 token ids [N]
//
// Written to a temporary name, fsynced, then renamed (core/io/file_util.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/data/vocabulary.h"

namespace moe::data {

inline constexpr char kTokenCacheMagic[9] = "MOETOK01";
inline constexpr uint32_t kTokenCacheVersion = 1;
inline constexpr int64_t kTokenCacheHeaderBytes = 40;

Status write_token_cache(const std::string& path, const std::vector<int32_t>& ids,
                         uint64_t vocab_fingerprint);

// Loads and validates a cache written for `vocab` (named `vocab_source` in errors). Errors, each
// naming the path:
//   kNotFound            missing file
//   kDataLoss            not a token cache (magic), corrupted header, truncated or oversized
//                        (expected vs actual bytes), payload checksum mismatch, or an id outside
//                        the vocabulary
//   kFailedPrecondition  another format version, or a vocabulary fingerprint mismatch (names both
//                        fingerprints)
StatusOr<std::vector<int32_t>> load_token_cache(const std::string& path, const Vocabulary& vocab,
                                                const std::string& vocab_source);

}  // namespace moe::data
