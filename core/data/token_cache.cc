#include "core/data/token_cache.h"

#include <cstring>

#include "core/base/check.h"
#include "core/base/hash.h"
#include "core/io/file_util.h"

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

}  // namespace

Status write_token_cache(const std::string& path, const std::vector<int32_t>& ids,
                         uint64_t vocab_fingerprint) {
  char header[kTokenCacheHeaderBytes] = {};
  std::memcpy(header, kTokenCacheMagic, 8);
  put<uint32_t>(header + 8, kTokenCacheVersion);
  put<uint32_t>(header + 12, static_cast<uint32_t>(kTokenCacheHeaderBytes));
  put<uint64_t>(header + 16, vocab_fingerprint);
  put<uint64_t>(header + 24, static_cast<uint64_t>(ids.size()));
  put<uint32_t>(header + 32, io::crc32_of(ids.data(), ids.size() * sizeof(int32_t)));
  put<uint32_t>(header + 36, io::crc32_of(header, 36));
  const std::string_view payload(reinterpret_cast<const char*>(ids.data()),
                                 ids.size() * sizeof(int32_t));
  return io::write_file_atomic(path, {std::string_view(header, sizeof(header)), payload});
}

StatusOr<std::vector<int32_t>> load_token_cache(const std::string& path, const Vocabulary& vocab,
                                                const std::string& vocab_source) {
  MOE_ASSIGN_OR_RETURN(std::string bytes, io::read_file(path));
  const int64_t actual_size = static_cast<int64_t>(bytes.size());
  if (actual_size < 8 || std::memcmp(bytes.data(), kTokenCacheMagic, 8) != 0) {
    return data_loss_error("token cache ", path, " does not start with the magic '",
                           kTokenCacheMagic, "' (not a token cache, or corrupted)");
  }
  if (actual_size < kTokenCacheHeaderBytes) {
    return data_loss_error("token cache ", path, " is truncated: expected at least ",
                           kTokenCacheHeaderBytes, " bytes (the header), found ", actual_size);
  }
  const char* h = bytes.data();
  const uint32_t header_crc = io::crc32_of(h, 36);
  if (get<uint32_t>(h + 36) != header_crc) {
    return data_loss_error("token cache ", path, " has a corrupted header: crc32 ",
                           io::hex32(header_crc), ", stored ", io::hex32(get<uint32_t>(h + 36)));
  }
  const uint32_t version = get<uint32_t>(h + 8);
  if (version != kTokenCacheVersion) {
    return failed_precondition_error("token cache ", path, " has format version ", version,
                                     "; this build reads version ", kTokenCacheVersion);
  }
  if (get<uint32_t>(h + 12) != kTokenCacheHeaderBytes) {
    return data_loss_error("token cache ", path, " has header size ", get<uint32_t>(h + 12),
                           ", expected ", kTokenCacheHeaderBytes);
  }
  const uint64_t count = get<uint64_t>(h + 24);
  const uint64_t max_count = static_cast<uint64_t>(INT64_MAX - kTokenCacheHeaderBytes) / 4;
  const int64_t expected_size =
      count > max_count ? INT64_MAX : kTokenCacheHeaderBytes + static_cast<int64_t>(count) * 4;
  if (actual_size != expected_size) {
    return data_loss_error("token cache ", path, " is ",
                           actual_size < expected_size ? "truncated" : "too long", ": header says ",
                           count, " tokens, so expected ", expected_size, " bytes, found ",
                           actual_size);
  }
  const char* payload = h + kTokenCacheHeaderBytes;
  const uint32_t crc = io::crc32_of(payload, static_cast<size_t>(count) * 4);
  if (crc != get<uint32_t>(h + 32)) {
    return data_loss_error("token cache ", path, " is corrupted: payload crc32 ", io::hex32(crc),
                           ", stored ", io::hex32(get<uint32_t>(h + 32)));
  }
  MOE_RETURN_IF_ERROR(check_vocab_fingerprint(get<uint64_t>(h + 16), str_cat("token cache ", path),
                                              vocab.fingerprint(), vocab_source));
  std::vector<int32_t> ids(static_cast<size_t>(count));
  std::memcpy(ids.data(), payload, ids.size() * sizeof(int32_t));
  const int64_t vocab_size = vocab.size();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      return data_loss_error("token cache ", path, ": token ", i, " has id ", ids[i],
                             " outside the vocabulary [0, ", vocab_size, ")");
    }
  }
  return ids;
}

}  // namespace moe::data
