// The safetensors format (Hugging Face): an 8-byte little-endian header length N, N bytes of JSON
// ({"__metadata__": {str: str}, "<name>": {"dtype", "shape", "data_offsets": [begin, end]}}, padded
// with spaces to a multiple of 8), then the tensor bytes, contiguous and little-endian. Readable
// by `safetensors.torch.load_file`. Tensors are written in insertion order.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/base/tensor.h"

namespace moe::ckpt {

class SafetensorsWriter {
 public:
  // The view must be a host tensor and stay valid until write()/serialize().
  void add(const std::string& name, const TensorView& tensor);
  void set_metadata(const std::string& key, const std::string& value);
  std::string serialize() const;
  // serialize() written crash-safely (file_util.h write_file_atomic).
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
  // and offsets (in range, consistent with dtype x shape, non-overlapping). Errors name the file
  // and the tensor: kNotFound (missing), kDataLoss (truncated or malformed).
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
