// Token files: one split's token ids with what its text held, so that a run (and every rank of
// it) does not re-read and re-tokenise the text. The run's corpus cache (corpus.h) holds one per
// split; a prepared dataset (dataset.h) holds one per shard. Layout (little-endian):
//
//   offset  size  field
//   0       8     magic "MOETOK01"
//   8       4     u32 format version (2)
//   12      4     u32 header size in bytes (64)
//   16      8     u64 vocabulary fingerprint (vocabulary.h)
//   24      8     u64 token count N
//   32      8     u64 words of the text (text_reader.h TextStats)
//   40      8     u64 bytes of the text
//   48      8     u64 tokens that are <unk>
//   56      4     u32 CRC32 of the payload
//   60      4     u32 CRC32 of header bytes [0, 60)
//   64      4*N   i32 token ids [N]
//
// The payload is a plain i32 array, so `numpy.memmap(path, dtype='<i4', offset=64)` reads it.
// Version 1 (40-byte header without the text counts) is refused as another version; the run's
// cache then rebuilds. Written to a temporary name, fsynced, then renamed (io/file_util.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "core/data/text_reader.h"
#include "core/data/vocabulary.h"

namespace moe::data {

inline constexpr char kTokenCacheMagic[9] = "MOETOK01";
inline constexpr uint32_t kTokenCacheVersion = 2;
inline constexpr int64_t kTokenCacheHeaderBytes = 64;

struct TokenFileHeader {
  uint64_t vocab_fingerprint = 0;
  int64_t tokens = 0;
  TextStats stats;
  uint32_t payload_crc = 0;
};

// The 64 header bytes of a token file.
std::string encode_token_header(const TokenFileHeader& header);

// Validates the header bytes `h` (at least kTokenCacheHeaderBytes) of a file of `file_size` bytes
// named `path`. Errors name the path: kDataLoss (magic, header checksum, header size, truncated or
// too long for the count), kFailedPrecondition (another format version).
StatusOr<TokenFileHeader> decode_token_header(const char* h, int64_t file_size,
                                              const std::string& path);

Status write_token_cache(const std::string& path, const std::vector<int32_t>& ids,
                         uint64_t vocab_fingerprint, const TextStats& stats);

// Loads and validates a cache written for `vocab` (named `vocab_source` in errors); *stats (if
// given) receives the text counts. Errors, each naming the path:
//   kNotFound            missing file
//   kDataLoss            not a token cache (magic), corrupted header, truncated or oversized
//                        (expected vs actual bytes), payload checksum mismatch, or an id outside
//                        the vocabulary
//   kFailedPrecondition  another format version, or a vocabulary fingerprint mismatch (names both
//                        fingerprints)
StatusOr<std::vector<int32_t>> load_token_cache(const std::string& path, const Vocabulary& vocab,
                                                const std::string& vocab_source,
                                                TextStats* stats = nullptr);

}  // namespace moe::data
