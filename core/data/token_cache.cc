#include "core/data/token_cache.h"

#include <cstring>

#include "base/check.h"
#include "base/hash.h"
#include "io/file_util.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "token_cache.cc writes the host byte order and assumes a little-endian host"
#endif

namespace moe::data {
namespace {

template <typename T>
void put(char* dst, T value) {
  std::memcpy(dst, &value, sizeof(T));
}
template <typename T>
T get(const char* src) {
  T value;
  std::memcpy(&value, src, sizeof(T));
  return value;
}

constexpr int kHeaderCrcAt = 60;

}  // namespace

std::string encode_token_header(const TokenFileHeader& header) {
  char h[kTokenCacheHeaderBytes] = {};
  std::memcpy(h, kTokenCacheMagic, 8);
  put<uint32_t>(h + 8, kTokenCacheVersion);
  put<uint32_t>(h + 12, static_cast<uint32_t>(kTokenCacheHeaderBytes));
  put<uint64_t>(h + 16, header.vocab_fingerprint);
  put<uint64_t>(h + 24, static_cast<uint64_t>(header.tokens));
  put<uint64_t>(h + 32, static_cast<uint64_t>(header.stats.words));
  put<uint64_t>(h + 40, static_cast<uint64_t>(header.stats.bytes));
  put<uint64_t>(h + 48, static_cast<uint64_t>(header.stats.unknown));
  put<uint32_t>(h + 56, header.payload_crc);
  put<uint32_t>(h + kHeaderCrcAt, io::crc32_of(h, kHeaderCrcAt));
  return std::string(h, sizeof(h));
}

StatusOr<TokenFileHeader> decode_token_header(const char* h, int64_t file_size,
                                              const std::string& path) {
  if (file_size < 8 || std::memcmp(h, kTokenCacheMagic, 8) != 0) {
    return data_loss_error("token file ", path, " does not start with the magic '",
                           kTokenCacheMagic, "' (not a token file, or corrupted)");
  }
  const uint32_t version = get<uint32_t>(h + 8);
  if (file_size >= 16 && version != kTokenCacheVersion && version >= 1 && version < 64) {
    return failed_precondition_error("token file ", path, " has format version ", version,
                                     "; this build reads version ", kTokenCacheVersion);
  }
  if (file_size < kTokenCacheHeaderBytes) {
    return data_loss_error("token file ", path, " is truncated: expected at least ",
                           kTokenCacheHeaderBytes, " bytes (the header), found ", file_size);
  }
  const uint32_t header_crc = io::crc32_of(h, kHeaderCrcAt);
  if (get<uint32_t>(h + kHeaderCrcAt) != header_crc) {
    return data_loss_error("token file ", path, " has a corrupted header: crc32 ",
                           io::hex32(header_crc), ", stored ",
                           io::hex32(get<uint32_t>(h + kHeaderCrcAt)));
  }
  if (version != kTokenCacheVersion) {
    return failed_precondition_error("token file ", path, " has format version ", version,
                                     "; this build reads version ", kTokenCacheVersion);
  }
  if (get<uint32_t>(h + 12) != kTokenCacheHeaderBytes) {
    return data_loss_error("token file ", path, " has header size ", get<uint32_t>(h + 12),
                           ", expected ", kTokenCacheHeaderBytes);
  }
  const uint64_t count = get<uint64_t>(h + 24);
  const uint64_t max_count = static_cast<uint64_t>(INT64_MAX - kTokenCacheHeaderBytes) / 4;
  const int64_t expected_size =
      count > max_count ? INT64_MAX : kTokenCacheHeaderBytes + static_cast<int64_t>(count) * 4;
  if (file_size != expected_size) {
    return data_loss_error("token file ", path, " is ",
                           file_size < expected_size ? "truncated" : "too long", ": header says ",
                           count, " tokens, so expected ", expected_size, " bytes, found ",
                           file_size);
  }
  TokenFileHeader header;
  header.vocab_fingerprint = get<uint64_t>(h + 16);
  header.tokens = static_cast<int64_t>(count);
  header.stats.words = static_cast<int64_t>(get<uint64_t>(h + 32));
  header.stats.bytes = static_cast<int64_t>(get<uint64_t>(h + 40));
  header.stats.unknown = static_cast<int64_t>(get<uint64_t>(h + 48));
  header.payload_crc = get<uint32_t>(h + 56);
  return header;
}

Status write_token_cache(const std::string& path, const std::vector<int32_t>& ids,
                         uint64_t vocab_fingerprint, const TextStats& stats) {
  TokenFileHeader header;
  header.vocab_fingerprint = vocab_fingerprint;
  header.tokens = static_cast<int64_t>(ids.size());
  header.stats = stats;
  header.payload_crc = io::crc32_of(ids.data(), ids.size() * sizeof(int32_t));
  const std::string head = encode_token_header(header);
  const std::string_view payload(reinterpret_cast<const char*>(ids.data()),
                                 ids.size() * sizeof(int32_t));
  return io::write_file_atomic(path, {std::string_view(head), payload});
}

StatusOr<std::vector<int32_t>> load_token_cache(const std::string& path, const Vocabulary& vocab,
                                                const std::string& vocab_source, TextStats* stats) {
  MOE_ASSIGN_OR_RETURN(std::string bytes, io::read_file(path));
  std::string head = bytes.substr(0, static_cast<size_t>(kTokenCacheHeaderBytes));
  head.resize(static_cast<size_t>(kTokenCacheHeaderBytes), '\0');
  MOE_ASSIGN_OR_RETURN(const TokenFileHeader header,
                       decode_token_header(head.data(), static_cast<int64_t>(bytes.size()), path));
  const char* payload = bytes.data() + kTokenCacheHeaderBytes;
  const size_t count = static_cast<size_t>(header.tokens);
  const uint32_t crc = io::crc32_of(payload, count * 4);
  if (crc != header.payload_crc) {
    return data_loss_error("token file ", path, " is corrupted: payload crc32 ", io::hex32(crc),
                           ", stored ", io::hex32(header.payload_crc));
  }
  MOE_RETURN_IF_ERROR(check_vocab_fingerprint(
      header.vocab_fingerprint, str_cat("token file ", path), vocab.fingerprint(), vocab_source));
  std::vector<int32_t> ids(count);
  if (count > 0) std::memcpy(ids.data(), payload, count * sizeof(int32_t));
  const int64_t vocab_size = vocab.size();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      return data_loss_error("token file ", path, ": token ", i, " has id ", ids[i],
                             " outside the vocabulary [0, ", vocab_size, ")");
    }
  }
  if (stats != nullptr) *stats = header.stats;
  return ids;
}

}  // namespace moe::data
