// The safetensors format (Hugging Face): an 8-byte little-endian header length N, N bytes of UTF-8
// JSON ({"__metadata__": {str: str}, "<name>": {"dtype", "shape", "data_offsets": [begin, end]}},
// padded with spaces to a multiple of 8), then the tensor bytes, contiguous and little-endian,
// with offsets relative to the first byte after the header. Readable by
// `safetensors.torch.load_file`.
//
// Byte output is deterministic: "__metadata__" (omitted when empty) comes first with its keys
// sorted, then the tensors in insertion order, laid out back to back in that same order. (The
// reference writer sorts by dtype alignment, then name; readers accept any order.)
// Reading is as strict as the reference reader: the tensors' byte ranges must tile the data
// section exactly (no gaps, no overlap, no trailing bytes) and the header is at most 100 MB.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/tensor.h"

namespace moe::ckpt {

class SafetensorsWriter {
 public:
  // The view must be a host tensor and stay valid until write()/serialize(). A name may be
  // added once and may not be "__metadata__" (both checked: programmer errors).
  void add(const std::string& name, const TensorView& tensor);
  void set_metadata(const std::string& key, const std::string& value);
  std::string serialize() const;
  // serialize() written crash-safely (io/file_util.h).
  Status write(const std::string& path) const;

 private:
  std::vector<std::pair<std::string, TensorView>> tensors_;
  std::map<std::string, std::string> metadata_;
};

struct TensorInfo {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;  // byte offsets into the data section
};

class SafetensorsFile {
 public:
  // Reads and validates the whole file: size, header length, JSON, every entry's dtype, shape
  // and offsets (in range, consistent with dtype x shape, tiling the data section). Errors name
  // the file and, where there is one, the tensor: kNotFound (missing file), kDataLoss (truncated
  // or malformed). parse() does the same on bytes already in memory.
  static StatusOr<SafetensorsFile> open(const std::string& path);
  static StatusOr<SafetensorsFile> parse(std::string bytes, const std::string& name_for_errors);

  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const { return tensors_.count(name) > 0; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  StatusOr<TensorInfo> info(const std::string& name) const;
  // Copies tensor `name` into dst (host), which must have its dtype and shape (kInvalidArgument
  // naming both otherwise; kNotFound for a missing name).
  Status read_into(const std::string& name, const TensorView& dst) const;
  StatusOr<Tensor> read(const std::string& name) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string bytes_;
  size_t data_start_ = 0;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace moe::ckpt
