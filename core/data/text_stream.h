// Streaming reads of a text file, plain, gzip or zstd (detected from the content; a name ending in
// ".gz" or ".zst" must hold that format), in chunks that end at line boundaries. Tokenizing the
// chunks one by one gives the tokens of the whole text (text_reader.h: tokens never span lines),
// so a corpus larger than memory is read, validated and tokenized chunk by chunk, in parallel.
//
// zstd support is optional at build time (MOMOE_HAVE_ZSTD, Debian's libzstd-dev); without it a
// zstd file is refused by name.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"

namespace moe::data {

// True when this build reads zstd-compressed text.
bool zstd_supported();

// One chunk of a text file: whole lines (only the file's last chunk may end without '\n').
struct TextChunk {
  std::string text;
  int64_t offset = 0;  // decompressed byte offset of text[0] in the file
  int64_t line = 1;    // 1-based line number of text[0]
};

class TextChunkReader {
 public:
  // Opens `path` (which must be a regular file). Chunks hold about `chunk_bytes` bytes (more when a
  // line is longer). Errors: kNotFound, kInvalidArgument (not a regular file, naming what it is),
  // kFailedPrecondition (zstd file in a build without zstd), kInternal (cannot open).
  static StatusOr<std::unique_ptr<TextChunkReader>> open(const std::string& path,
                                                         int64_t chunk_bytes);
  virtual ~TextChunkReader() = default;

  // The next chunk into *chunk; false at the end of the file. Errors name the path: kDataLoss for
  // corrupted or truncated compressed data (or a ".gz"/".zst" file that is not), kInternal for a
  // read error. A UTF-8 byte-order mark at the start of the file is kept (drop_bom below).
  StatusOr<bool> next(TextChunk* chunk);

  // Discards decompressed bytes up to `offset` (a chunk boundary recorded earlier, at `line`), so
  // that the next chunk starts there. Only before the first next() call.
  Status skip_to(int64_t offset, int64_t line);

  // Progress: compressed bytes consumed so far, and the file's size on disk.
  virtual int64_t compressed_offset() const = 0;
  // The position on disk of the end of the chunks handed out so far: the decompressor and this
  // reader read ahead of them, so it is estimated from the compression ratio of what was read;
  // the file's size once the last chunk is out.
  int64_t chunks_end_on_disk() const;
  int64_t file_size() const { return file_size_; }
  const std::string& path() const { return path_; }

 protected:
  TextChunkReader(std::string path, int64_t file_size, int64_t chunk_bytes)
      : path_(std::move(path)), file_size_(file_size), chunk_bytes_(chunk_bytes) {}
  // Reads up to `n` decompressed bytes into `out`; 0 at the end of the data.
  virtual StatusOr<int64_t> read(char* out, int64_t n) = 0;

 private:
  std::string path_;
  int64_t file_size_ = 0;
  int64_t chunk_bytes_ = 0;
  std::string carry_;   // bytes read past the last chunk's final '\n'
  int64_t offset_ = 0;  // decompressed offset of carry_[0]
  int64_t line_ = 1;
  bool eof_ = false;
  bool started_ = false;
};

// Drops a UTF-8 byte-order mark from the file's first chunk (offset 0); offsets keep counting it.
void drop_bom(TextChunk* chunk);

// The whole decompressed file, read through TextChunkReader (no validation besides the format).
StatusOr<std::string> read_decompressed(const std::string& path);

// "a directory", "a FIFO (named pipe)", ... for a path that exists but is not a regular file;
// "" for a regular file; "missing" when it does not exist.
std::string describe_non_regular(const std::string& path);

}  // namespace moe::data
