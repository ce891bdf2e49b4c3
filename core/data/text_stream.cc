#include "core/data/text_stream.h"

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#if MOMOE_HAVE_ZSTD
#include <zstd.h>
#endif

#include "base/check.h"

namespace moe::data {
namespace {

namespace fs = std::filesystem;

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// zlib's messages start with "<path>: "; we name the path ourselves.
std::string without_path(const std::string& msg, const std::string& path) {
  const std::string prefix = path + ": ";
  return msg.compare(0, prefix.size(), prefix) == 0 ? msg.substr(prefix.size()) : msg;
}

// Plain text and gzip, through zlib (gzread reads a file without a gzip header unchanged).
class GzipReader final : public TextChunkReader {
 public:
  GzipReader(std::string path, int64_t size, int64_t chunk_bytes, gzFile file)
      : TextChunkReader(std::move(path), size, chunk_bytes), file_(file) {}
  ~GzipReader() override {
    if (file_ != nullptr) gzclose_r(file_);
  }
  int64_t compressed_offset() const override { return done_ ? file_size() : gzoffset(file_); }

 protected:
  StatusOr<int64_t> read(char* out, int64_t n) override {
    if (done_) return int64_t{0};
    const int got = gzread(file_, out, static_cast<unsigned>(std::min<int64_t>(n, 1 << 30)));
    if (got < 0) {
      int errnum = 0;
      const std::string msg = gzerror(file_, &errnum);
      if (errnum == Z_ERRNO) {
        return internal_error("cannot read text file ", path(), ": ", std::strerror(errno));
      }
      return data_loss_error("corrupted gzip data in ", path(), ": ", without_path(msg, path()));
    }
    total_ += got;
    if (got > 0) return static_cast<int64_t>(got);
    // The end. A stream cut short reads without error up to the cut; zlib records Z_BUF_ERROR.
    done_ = true;
    int errnum = 0;
    const std::string msg = without_path(gzerror(file_, &errnum), path());
    const bool direct = gzdirect(file_) != 0;
    const int close_status = gzclose_r(file_);
    file_ = nullptr;
    if (errnum == Z_BUF_ERROR || close_status == Z_BUF_ERROR) {
      return data_loss_error(
          "truncated gzip file ", path(), " (the compressed stream ends after ", total_,
          " decompressed bytes): ", msg.empty() ? "unexpected end of file" : msg);
    }
    if (errnum != Z_OK || close_status != Z_OK) {
      return data_loss_error("cannot read gzip file ", path(), ": ", msg);
    }
    if (direct && ends_with(path(), ".gz") && total_ > 0) {
      return data_loss_error("file ", path(), " is named .gz but does not hold gzip data");
    }
    return int64_t{0};
  }

 private:
  gzFile file_;
  int64_t total_ = 0;
  bool done_ = false;
};

#if MOMOE_HAVE_ZSTD
class ZstdReader final : public TextChunkReader {
 public:
  ZstdReader(std::string path, int64_t size, int64_t chunk_bytes, std::FILE* file)
      : TextChunkReader(std::move(path), size, chunk_bytes),
        file_(file),
        stream_(ZSTD_createDStream()),
        in_buf_(ZSTD_DStreamInSize()) {
    ZSTD_initDStream(stream_);
    // Accept every window the format allows (zstd --long / --ultra write windows above the
    // decoder's default 128 MiB limit).
    ZSTD_DCtx_setParameter(stream_, ZSTD_d_windowLogMax, 31);  // ZSTD_WINDOWLOG_MAX_64
  }
  ~ZstdReader() override {
    ZSTD_freeDStream(stream_);
    std::fclose(file_);
  }
  int64_t compressed_offset() const override { return consumed_; }

 protected:
  StatusOr<int64_t> read(char* out, int64_t n) override {
    ZSTD_outBuffer output{out, static_cast<size_t>(n), 0};
    while (output.pos == 0) {
      if (input_.pos == input_.size) {
        if (eof_) {
          if (frame_open_) {
            return data_loss_error("truncated zstd file ", path(),
                                   " (the compressed stream ends inside a frame, after ", total_,
                                   " decompressed bytes)");
          }
          return int64_t{0};
        }
        const size_t got = std::fread(in_buf_.data(), 1, in_buf_.size(), file_);
        if (got < in_buf_.size()) {
          if (std::ferror(file_)) {
            return internal_error("cannot read text file ", path(), ": ", std::strerror(errno));
          }
          eof_ = true;
        }
        input_ = ZSTD_inBuffer{in_buf_.data(), got, 0};
        if (got == 0) continue;
      }
      const size_t before = input_.pos;
      const size_t r = ZSTD_decompressStream(stream_, &output, &input_);
      consumed_ += static_cast<int64_t>(input_.pos - before);
      if (ZSTD_isError(r)) {
        return data_loss_error("corrupted zstd data in ", path(), ": ", ZSTD_getErrorName(r));
      }
      frame_open_ = r != 0;
    }
    total_ += static_cast<int64_t>(output.pos);
    return static_cast<int64_t>(output.pos);
  }

 private:
  std::FILE* file_;
  ZSTD_DStream* stream_;
  std::vector<char> in_buf_;
  ZSTD_inBuffer input_{nullptr, 0, 0};
  int64_t consumed_ = 0;
  int64_t total_ = 0;
  bool eof_ = false;
  bool frame_open_ = false;
};
#endif

}  // namespace

bool zstd_supported() { return MOMOE_HAVE_ZSTD != 0; }

std::string describe_non_regular(const std::string& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) return "missing";
  if (fs::is_regular_file(status)) return "";
  return fs::is_directory(status)                                     ? "a directory"
         : fs::is_fifo(status)                                        ? "a FIFO (named pipe)"
         : fs::is_character_file(status) || fs::is_block_file(status) ? "a device"
         : fs::is_socket(status)                                      ? "a socket"
                                                                      : "not a regular file";
}

StatusOr<std::unique_ptr<TextChunkReader>> TextChunkReader::open(const std::string& path,
                                                                 int64_t chunk_bytes) {
  MOE_CHECK(chunk_bytes >= 1, "chunk_bytes ", chunk_bytes);
  const std::string what = describe_non_regular(path);
  if (what == "missing") return not_found_error("text file not found: ", path);
  if (!what.empty()) {
    return invalid_argument_error("text file ", path, " is ", what, ", not a regular file");
  }
  std::error_code ec;
  const int64_t size = static_cast<int64_t>(fs::file_size(path, ec));
  if (ec) return internal_error("cannot stat ", path, ": ", ec.message());
  // The format, from the first bytes.
  unsigned char magic[4] = {0, 0, 0, 0};
  {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) {
      return internal_error("cannot open text file ", path, ": ", std::strerror(errno));
    }
    const size_t got = std::fread(magic, 1, 4, f);
    std::fclose(f);
    (void)got;
  }
  // A zstd frame, or a skippable frame (0x184D2A50..5F, as pzstd writes first).
  const bool zstd =
      (magic[0] == 0x28 && magic[1] == 0xB5 && magic[2] == 0x2F && magic[3] == 0xFD) ||
      ((magic[0] & 0xF0) == 0x50 && magic[1] == 0x2A && magic[2] == 0x4D && magic[3] == 0x18);
  if (ends_with(path, ".zst") && !zstd && size > 0) {
    return data_loss_error("file ", path, " is named .zst but does not hold zstd data");
  }
  if (zstd) {
#if MOMOE_HAVE_ZSTD
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) {
      return internal_error("cannot open text file ", path, ": ", std::strerror(errno));
    }
    return std::unique_ptr<TextChunkReader>(new ZstdReader(path, size, chunk_bytes, f));
#else
    return failed_precondition_error(
        "text file ", path,
        " is zstd-compressed, and this build has no zstd support (install "
        "libzstd-dev and rebuild, or decompress it with `zstd -d`)");
#endif
  }
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) {
    const int err = errno;
    if (err == ENOENT) return not_found_error("text file not found: ", path);
    return internal_error("cannot open text file ", path, ": ",
                          err != 0 ? std::strerror(err) : "out of memory");
  }
  gzbuffer(file, 1u << 18);
  return std::unique_ptr<TextChunkReader>(new GzipReader(path, size, chunk_bytes, file));
}

StatusOr<bool> TextChunkReader::next(TextChunk* chunk) {
  started_ = true;
  // Read until carry_ holds chunk_bytes_ and a '\n' after them, or the data ends.
  size_t cut = std::string::npos;
  size_t searched = 0;
  while (true) {
    if (static_cast<int64_t>(carry_.size()) >= chunk_bytes_) {
      const size_t from = std::max<size_t>(searched, static_cast<size_t>(chunk_bytes_) - 1);
      cut = carry_.find('\n', from);
      searched = carry_.size();
      if (cut != std::string::npos) break;
    }
    if (eof_) break;
    const size_t old = carry_.size();
    const int64_t want = std::max<int64_t>(chunk_bytes_, 1 << 16);
    carry_.resize(old + static_cast<size_t>(want));
    StatusOr<int64_t> got = read(carry_.data() + old, want);
    if (!got.ok()) {
      carry_.resize(old);
      return got.status();
    }
    carry_.resize(old + static_cast<size_t>(*got));
    if (*got == 0) eof_ = true;
  }
  if (carry_.empty()) return false;
  chunk->offset = offset_;
  chunk->line = line_;
  if (cut == std::string::npos) {
    chunk->text = std::move(carry_);
    carry_.clear();
  } else {
    chunk->text.assign(carry_, 0, cut + 1);
    carry_.erase(0, cut + 1);
  }
  offset_ += static_cast<int64_t>(chunk->text.size());
  for (char c : chunk->text) line_ += c == '\n';
  return true;
}

int64_t TextChunkReader::chunks_end_on_disk() const {
  if (eof_ && carry_.empty()) return file_size_;
  const double read = static_cast<double>(offset_) + static_cast<double>(carry_.size());
  if (read <= 0) return 0;
  const double ratio = static_cast<double>(compressed_offset()) / read;
  return std::min(file_size_, static_cast<int64_t>(static_cast<double>(offset_) * ratio));
}

Status TextChunkReader::skip_to(int64_t offset, int64_t line) {
  MOE_CHECK(!started_, "TextChunkReader::skip_to after next()");
  std::vector<char> buf(1 << 20);
  int64_t left = offset;
  while (left > 0) {
    MOE_ASSIGN_OR_RETURN(
        const int64_t got,
        read(buf.data(), std::min<int64_t>(left, static_cast<int64_t>(buf.size()))));
    if (got == 0) {
      return data_loss_error("text file ", path_, " ends after ", offset - left,
                             " bytes, before the resume point at byte ", offset,
                             " (it changed since the preparation started)");
    }
    left -= got;
  }
  offset_ = offset;
  line_ = line;
  return Status::OK();
}

void drop_bom(TextChunk* chunk) {
  if (chunk->offset == 0 && chunk->text.compare(0, 3, "\xEF\xBB\xBF") == 0) chunk->text.erase(0, 3);
}

StatusOr<std::string> read_decompressed(const std::string& path) {
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<TextChunkReader> reader,
                       TextChunkReader::open(path, int64_t{1} << 24));
  std::string text;
  TextChunk chunk;
  while (true) {
    MOE_ASSIGN_OR_RETURN(const bool more, reader->next(&chunk));
    if (!more) break;
    if (text.empty()) {
      text = std::move(chunk.text);
    } else {
      text += chunk.text;
    }
  }
  return text;
}

}  // namespace moe::data
