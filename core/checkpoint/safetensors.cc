#include "core/checkpoint/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/checkpoint/file_util.h"

namespace moe::ckpt {
namespace {

using nlohmann::json;

bool dtype_from_name(const std::string& s, DType* out) {
  for (DType d : {DType::kF32, DType::kF64, DType::kBF16, DType::kI32, DType::kI64, DType::kU8}) {
    if (s == dtype_safetensors_name(d)) {
      *out = d;
      return true;
    }
  }
  return false;
}

}  // namespace

void SafetensorsWriter::add(const std::string& name, const TensorView& tensor) {
  MOE_CHECK(tensor.is_host(), "safetensors: ", name, " is not a host tensor");
  tensors_.emplace_back(name, tensor);
}

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) {
  metadata_[key] = value;
}

std::string SafetensorsWriter::serialize() const {
  // Build the header with ordered keys: __metadata__ first, then tensors in insertion order.
  std::string header = "{";
  bool first = true;
  if (!metadata_.empty()) {
    header += "\"__metadata__\":" + json(metadata_).dump();
    first = false;
  }
  int64_t offset = 0;
  for (const auto& [name, t] : tensors_) {
    json entry;
    entry["dtype"] = dtype_safetensors_name(t.dtype());
    entry["shape"] = t.shape().to_vector();
    entry["data_offsets"] = {offset, offset + static_cast<int64_t>(t.nbytes())};
    offset += static_cast<int64_t>(t.nbytes());
    header += (first ? "" : ",") + json(name).dump() + ":" +
              "{\"dtype\":" + entry["dtype"].dump() + ",\"shape\":" + entry["shape"].dump() +
              ",\"data_offsets\":" + entry["data_offsets"].dump() + "}";
    first = false;
  }
  header += "}";
  while (header.size() % 8 != 0) header += ' ';
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += header;
  for (const auto& [name, t] : tensors_) out.append(static_cast<const char*>(t.raw()), t.nbytes());
  return out;
}

Status SafetensorsWriter::write(const std::string& path) const {
  return write_file_atomic(path, serialize());
}

StatusOr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  MOE_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
  return parse(std::move(bytes), path);
}

StatusOr<SafetensorsFile> SafetensorsFile::parse(std::string bytes, const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  if (bytes.size() < 8) {
    return data_loss_error("safetensors file ", path, " is ", bytes.size(),
                           " bytes: too small for the 8-byte header length (truncated?)");
  }
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  if (n > bytes.size() - 8) {
    return data_loss_error("safetensors file ", path, ": header length ", n, " exceeds the ",
                           bytes.size() - 8, " bytes that follow (truncated?)");
  }
  json header = json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<int64_t>(n), nullptr,
                            /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return data_loss_error("safetensors file ", path, ": the header is not a JSON object");
  }
  f.data_start_ = 8 + n;
  const uint64_t data_size = bytes.size() - f.data_start_;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& e = it.value();
    if (name == "__metadata__") {
      if (!e.is_object()) return data_loss_error("safetensors file ", path, ": __metadata__ is not an object");
      for (auto m = e.begin(); m != e.end(); ++m) {
        if (!m.value().is_string()) {
          return data_loss_error("safetensors file ", path, ": metadata '", m.key(), "' is not a string");
        }
        f.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = "safetensors file " + path + ", tensor '" + name + "'";
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets") ||
        !e["dtype"].is_string() || !e["shape"].is_array() || !e["data_offsets"].is_array() ||
        e["data_offsets"].size() != 2) {
      return data_loss_error(where, ": needs dtype, shape and data_offsets [begin, end]");
    }
    TensorInfo info;
    if (!dtype_from_name(e["dtype"].get<std::string>(), &info.dtype)) {
      return data_loss_error(where, ": unsupported dtype ", e["dtype"].dump());
    }
    int64_t numel = 1;
    for (const json& d : e["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) return data_loss_error(where, ": bad shape ", e["shape"].dump());
      info.shape.push_back(d.get<int64_t>());
      numel *= d.get<int64_t>();
    }
    for (const json& o : e["data_offsets"]) {
      if (!o.is_number_integer() || o.get<int64_t>() < 0) return data_loss_error(where, ": bad data_offsets");
    }
    info.begin = e["data_offsets"][0].get<int64_t>();
    info.end = e["data_offsets"][1].get<int64_t>();
    if (info.end < info.begin || static_cast<uint64_t>(info.end) > data_size) {
      return data_loss_error(where, ": data_offsets [", info.begin, ", ", info.end,
                             "] outside the ", data_size, " data bytes (truncated?)");
    }
    if (info.end - info.begin != numel * static_cast<int64_t>(dtype_size(info.dtype))) {
      return data_loss_error(where, ": ", info.end - info.begin, " bytes do not hold ", numel,
                             " elements of ", dtype_safetensors_name(info.dtype));
    }
    ranges.emplace_back(info.begin, info.end);
    f.tensors_[name] = info;
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) {
      return data_loss_error("safetensors file ", path, ": tensor data ranges overlap");
    }
  }
  f.bytes_ = std::move(bytes);
  return f;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& [name, info] : tensors_) out.push_back(name);
  return out;
}

StatusOr<TensorInfo> SafetensorsFile::info(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return not_found_error("tensor '", name, "' is not in ", path_);
  return it->second;
}

Status SafetensorsFile::read_into(const std::string& name, const TensorView& dst) const {
  MOE_ASSIGN_OR_RETURN(TensorInfo info, this->info(name));
  if (info.dtype != dst.dtype() || Shape(info.shape) != dst.shape()) {
    return invalid_argument_error("tensor '", name, "' in ", path_, " is ",
                                  dtype_safetensors_name(info.dtype), Shape(info.shape).to_string(),
                                  ", expected ", dtype_safetensors_name(dst.dtype()),
                                  dst.shape().to_string());
  }
  if (!dst.is_host()) return invalid_argument_error("read_into needs a host tensor for '", name, "'");
  std::memcpy(dst.raw(), bytes_.data() + data_start_ + info.begin, static_cast<size_t>(info.end - info.begin));
  return Status::OK();
}

StatusOr<Tensor> SafetensorsFile::read(const std::string& name) const {
  MOE_ASSIGN_OR_RETURN(TensorInfo info, this->info(name));
  Tensor t = Tensor::empty(Shape(info.shape), info.dtype);
  MOE_RETURN_IF_ERROR(read_into(name, t));
  return t;
}

}  // namespace moe::ckpt
