#include "core/checkpoint/safetensors.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>

#include "io/file_util.h"

// Tensor bytes are copied as they lie in memory; safetensors stores them little-endian.
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors I/O assumes a little-endian host"
#endif

namespace moe::ckpt {
namespace {

using nlohmann::json;

// The reference reader's limit (safetensors/src/tensor.rs MAX_HEADER_SIZE).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

bool dtype_from_name(const std::string& s, DType* out) {
  for (DType d : {DType::kF32, DType::kF64, DType::kBF16, DType::kI32, DType::kI64, DType::kU8}) {
    if (s == dtype_safetensors_name(d)) {
      *out = d;
      return true;
    }
  }
  return false;
}

// Parses one tensor entry of the header into *info; the error names file and tensor.
Status parse_entry(const json& e, const std::string& where, TensorInfo* info) {
  if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") ||
      !e.contains("data_offsets") || !e["dtype"].is_string() || !e["shape"].is_array() ||
      !e["data_offsets"].is_array() || e["data_offsets"].size() != 2) {
    return data_loss_error(
        where, ": needs dtype (string), shape (array) and data_offsets [begin, end]; got ",
        e.dump());
  }
  if (!dtype_from_name(e["dtype"].get<std::string>(), &info->dtype)) {
    return data_loss_error(where, ": unsupported dtype ", e["dtype"].dump(),
                           " (this build reads F32, F64, BF16, I32, I64, U8)");
  }
  uint64_t numel = 1;
  for (const json& d : e["shape"]) {
    // Non-negative integers parse as unsigned; anything else (negative, fraction) is refused.
    if (!d.is_number_unsigned() || d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX) ||
        __builtin_mul_overflow(numel, d.get<uint64_t>(), &numel)) {
      return data_loss_error(where, ": bad shape ", e["shape"].dump());
    }
    info->shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
  }
  for (const json& o : e["data_offsets"]) {
    if (!o.is_number_unsigned() || o.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return data_loss_error(where, ": bad data_offsets ", e["data_offsets"].dump());
    }
  }
  info->begin = static_cast<int64_t>(e["data_offsets"][0].get<uint64_t>());
  info->end = static_cast<int64_t>(e["data_offsets"][1].get<uint64_t>());
  uint64_t nbytes = 0;
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(info->dtype)), &nbytes) ||
      info->end < info->begin || static_cast<uint64_t>(info->end - info->begin) != nbytes) {
    return data_loss_error(where, ": data_offsets [", info->begin, ", ", info->end,
                           "] do not hold ", numel, " elements of ",
                           dtype_safetensors_name(info->dtype), " (", nbytes, " bytes)");
  }
  return Status::OK();
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// The tensors' byte ranges, in offset order, must tile [0, data_size) exactly.
Status check_data_ranges(const std::map<std::string, TensorInfo>& tensors, uint64_t data_size,
                         const std::string& path) {
  std::vector<std::pair<const std::string*, const TensorInfo*>> order;
  for (const auto& [name, info] : tensors) order.emplace_back(&name, &info);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return std::make_pair(a.second->begin, a.second->end) <
           std::make_pair(b.second->begin, b.second->end);
  });
  int64_t expected = 0;
  const std::string* previous = nullptr;
  for (const auto& [name, info] : order) {
    const std::string where = "safetensors file " + path + ", tensor '" + *name +
                              "': data_offsets [" + std::to_string(info->begin) + ", " +
                              std::to_string(info->end) + "]";
    if (info->begin < expected) {
      return data_loss_error(where, " overlaps tensor '", *previous, "', which ends at byte ",
                             expected);
    }
    if (info->begin > expected) {
      return data_loss_error(
          where, " leave bytes [", expected, ", ", info->begin, ") ",
          previous ? "after tensor '" + *previous + "'" : std::string("at the start of the data"),
          " unused");
    }
    if (static_cast<uint64_t>(info->end) > data_size) {
      return data_loss_error(where, " run past the ", data_size, " data bytes (truncated?)");
    }
    expected = info->end;
    previous = name;
  }
  if (static_cast<uint64_t>(expected) != data_size) {
    return data_loss_error(
        "safetensors file ", path, ": ", data_size - static_cast<uint64_t>(expected), " bytes ",
        previous ? "after the last tensor '" + *previous + "'" : std::string("of data"),
        " belong to no tensor");
  }
  return Status::OK();
}

}  // namespace

void SafetensorsWriter::add(const std::string& name, const TensorView& tensor) {
  MOE_CHECK(tensor.is_host(), "safetensors: ", name, " is not a host tensor");
  MOE_CHECK(name != "__metadata__", "safetensors: \"__metadata__\" is not a tensor name");
  for (const auto& [existing, t] : tensors_) {
    MOE_CHECK(existing != name, "safetensors: tensor '", name, "' added twice");
  }
  tensors_.emplace_back(name, tensor);
}

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) {
  metadata_[key] = value;
}

std::string SafetensorsWriter::serialize() const {
  // The header is assembled by hand so that keys keep our order (nlohmann's json object would
  // sort them): __metadata__ first, then tensors in insertion order.
  std::string header = "{";
  bool first = true;
  if (!metadata_.empty()) {
    header += "\"__metadata__\":" + json(metadata_).dump();
    first = false;
  }
  int64_t offset = 0;
  for (const auto& [name, t] : tensors_) {
    const int64_t end = offset + static_cast<int64_t>(t.nbytes());
    header += (first ? "" : ",") + json(name).dump() +
              ":{\"dtype\":" + json(dtype_safetensors_name(t.dtype())).dump() +
              ",\"shape\":" + json(t.shape().to_vector()).dump() +
              ",\"data_offsets\":" + json({offset, end}).dump() + "}";
    offset = end;
    first = false;
  }
  header += "}";
  while (header.size() % 8 != 0) header += ' ';
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out.reserve(8 + header.size() + static_cast<size_t>(offset));
  out += header;
  for (const auto& [name, t] : tensors_) out.append(static_cast<const char*>(t.raw()), t.nbytes());
  return out;
}

Status SafetensorsWriter::write(const std::string& path) const {
  return io::write_file_atomic(path, serialize());
}

StatusOr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  MOE_ASSIGN_OR_RETURN(std::string bytes, io::read_file(path));
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
  if (n > kMaxHeaderBytes) {
    return data_loss_error("safetensors file ", path, ": header length ", n, " is over the ",
                           kMaxHeaderBytes, "-byte limit (not a safetensors file?)");
  }
  if (n > bytes.size() - 8) {
    return data_loss_error("safetensors file ", path, ": header length ", n, " exceeds the ",
                           bytes.size() - 8, " bytes that follow (truncated?)");
  }
  const json header =
      json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<int64_t>(n), nullptr,
                  /*allow_exceptions=*/false);
  if (header.is_discarded()) {
    return data_loss_error("safetensors file ", path, ": the ", n,
                           "-byte header is not valid UTF-8 JSON");
  }
  if (!header.is_object()) {
    return data_loss_error("safetensors file ", path, ": the header is not a JSON object");
  }
  f.data_start_ = 8 + n;
  const uint64_t data_size = bytes.size() - f.data_start_;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& e = it.value();
    if (name == "__metadata__") {
      if (!e.is_object())
        return data_loss_error("safetensors file ", path, ": __metadata__ is not an object");
      for (auto m = e.begin(); m != e.end(); ++m) {
        if (!m.value().is_string()) {
          return data_loss_error("safetensors file ", path, ": metadata '", m.key(),
                                 "' is not a string");
        }
        f.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    TensorInfo info;
    MOE_RETURN_IF_ERROR(
        parse_entry(e, "safetensors file " + path + ", tensor '" + name + "'", &info));
    f.tensors_[name] = info;
  }
  MOE_RETURN_IF_ERROR(check_data_ranges(f.tensors_, data_size, path));
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
  // Compared as vectors: the file may hold more dims than Shape can (Shape::kMaxDims).
  if (info.dtype != dst.dtype() || info.shape != dst.shape().to_vector()) {
    return invalid_argument_error("tensor '", name, "' in ", path_, " is ",
                                  dtype_safetensors_name(info.dtype), shape_string(info.shape),
                                  ", expected ", dtype_safetensors_name(dst.dtype()),
                                  dst.shape().to_string());
  }
  if (!dst.is_host()) {
    return invalid_argument_error("read_into: tensor '", name, "' of ", path_,
                                  " needs a host destination, got ", dst.to_string());
  }
  if (info.end > info.begin) {
    std::memcpy(dst.raw(), bytes_.data() + data_start_ + info.begin,
                static_cast<size_t>(info.end - info.begin));
  }
  return Status::OK();
}

StatusOr<Tensor> SafetensorsFile::read(const std::string& name) const {
  MOE_ASSIGN_OR_RETURN(TensorInfo info, this->info(name));
  if (info.shape.size() > static_cast<size_t>(Shape::kMaxDims)) {
    return invalid_argument_error("tensor '", name, "' in ", path_, " has ", info.shape.size(),
                                  " dims; tensors here have at most ", Shape::kMaxDims);
  }
  Tensor t = Tensor::empty(Shape(info.shape), info.dtype);
  MOE_RETURN_IF_ERROR(read_into(name, t));
  return t;
}

}  // namespace moe::ckpt
