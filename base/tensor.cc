#include "base/tensor.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "base/allocator.h"

namespace moe {

Shape::Shape(std::initializer_list<int64_t> dims) {
  MOE_CHECK(static_cast<int>(dims.size()) <= kMaxDims, "shape with ", dims.size(), " dims");
  for (int64_t d : dims) {
    MOE_CHECK(d >= 0, "negative dimension ", d);
    dims_[ndim_++] = d;
  }
}

Shape::Shape(const std::vector<int64_t>& dims) {
  MOE_CHECK(static_cast<int>(dims.size()) <= kMaxDims, "shape with ", dims.size(), " dims");
  for (int64_t d : dims) {
    MOE_CHECK(d >= 0, "negative dimension ", d);
    dims_[ndim_++] = d;
  }
}

int Shape::check_index(int i) const {
  MOE_CHECK(i >= 0 && i < ndim_, "dimension index ", i, " out of range for ", to_string());
  return i;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim_; ++i) n *= dims_[i];
  return n;
}

std::string Shape::to_string() const {
  std::ostringstream os;
  os << "[";
  for (int i = 0; i < ndim_; ++i) os << (i ? ", " : "") << dims_[i];
  os << "]";
  return os.str();
}

bool Shape::operator==(const Shape& o) const {
  if (ndim_ != o.ndim_) return false;
  for (int i = 0; i < ndim_; ++i)
    if (dims_[i] != o.dims_[i]) return false;
  return true;
}

namespace {
thread_local int g_device_access_depth = 0;
}  // namespace

DeviceAccessScope::DeviceAccessScope() { ++g_device_access_depth; }
DeviceAccessScope::~DeviceAccessScope() { --g_device_access_depth; }
bool device_access_allowed() { return g_device_access_depth > 0; }

void TensorView::access_violation() const {
  detail::check_failed(__FILE__, __LINE__, "device_access_allowed()",
                       str_cat("host access to device tensor ", to_string(),
                               " outside a kernel: core/layers and core/model must not read or "
                               "write tensor memory on the host (use a kernel, or read results "
                               "back once per step through Context::read_back)"));
}

TensorView TensorView::reshape(Shape shape) const {
  MOE_CHECK(shape.numel() == numel(), "reshape ", shape_.to_string(), " -> ", shape.to_string());
  return TensorView(data_, dtype_, shape, device_, guarded_);
}

TensorView TensorView::rows(int64_t begin, int64_t end) const {
  MOE_CHECK(ndim() >= 1 && begin >= 0 && begin <= end && end <= dim(0), "rows [", begin, ", ", end,
            ") of ", to_string());
  Shape s = shape_;
  s[0] = end - begin;
  const int64_t row_elems = dim(0) == 0 ? 0 : numel() / dim(0);
  char* base = static_cast<char*>(data_);
  return TensorView(base == nullptr ? nullptr : base + begin * row_elems * dtype_size(dtype_),
                    dtype_, s, device_, guarded_);
}

TensorView TensorView::operator[](int64_t i) const {
  MOE_CHECK(ndim() >= 1 && i >= 0 && i < dim(0), "index ", i, " of ", to_string());
  std::vector<int64_t> dims = shape_.to_vector();
  dims.erase(dims.begin());
  return rows(i, i + 1).reshape(Shape(dims));
}

std::string TensorView::to_string() const {
  return str_cat(dtype_name(dtype_), shape_.to_string(), "@", device_.to_string(),
                 guarded_ ? "(guarded)" : "");
}

// Owns one block: from an allocator (returned stream-ordered) or from aligned_alloc (host).
struct TensorStorage {
  void* ptr = nullptr;
  size_t bytes = 0;
  std::shared_ptr<Allocator> allocator;
  Stream stream;
  std::shared_ptr<const void> stream_owner;  // released after the block is returned on `stream`
  ~TensorStorage() {
    if (ptr == nullptr) return;
    if (allocator) {
      allocator->deallocate(ptr, bytes, stream);
    } else {
      std::free(ptr);
    }
  }
};

StatusOr<Tensor> Tensor::allocate(Shape shape, DType dtype,
                                  const std::shared_ptr<Allocator>& allocator, Stream stream,
                                  bool guarded, std::shared_ptr<const void> stream_owner) {
  MOE_CHECK(allocator != nullptr, "Tensor::allocate without an allocator");
  Tensor t;
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  auto storage = std::make_shared<TensorStorage>();
  MOE_ASSIGN_OR_RETURN(storage->ptr, allocator->allocate(bytes, stream));
  storage->bytes = bytes;
  storage->allocator = allocator;
  storage->stream = stream;
  storage->stream_owner = std::move(stream_owner);
  t.view_ = TensorView(storage->ptr, dtype, shape, allocator->device(), guarded);
  t.storage_ = std::move(storage);
  return t;
}

StatusOr<Tensor> Tensor::try_empty(Shape shape, DType dtype) {
  Tensor t;
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  auto storage = std::make_shared<TensorStorage>();
  if (bytes > 0) {
    storage->ptr = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (storage->ptr == nullptr) {
      return resource_exhausted_error("host memory: cannot allocate ", bytes, " bytes for ",
                                      shape.to_string(), " ", dtype_name(dtype));
    }
  }
  storage->bytes = bytes;
  t.view_ = TensorView(storage->ptr, dtype, shape, Device::host());
  t.storage_ = std::move(storage);
  return t;
}

Tensor Tensor::empty(Shape shape, DType dtype) {
  StatusOr<Tensor> t = try_empty(shape, dtype);
  MOE_CHECK(t.ok(), t.status().message());
  return std::move(t).value();
}

Tensor Tensor::zeros(Shape shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  MOE_CHECK(t.zero().ok());
  return t;
}

Tensor Tensor::copy_of(const TensorView& src) {
  MOE_CHECK(src.is_host(), "Tensor::copy_of needs a host view, got ", src.to_string(),
            " (use Context::read_back)");
  Tensor t = empty(src.shape(), src.dtype());
  if (src.nbytes() > 0) std::memcpy(t.raw(), src.raw(), src.nbytes());
  return t;
}

Tensor Tensor::reshape(Shape shape) const {
  Tensor t = *this;
  t.view_ = view_.reshape(shape);
  return t;
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  Tensor t = *this;
  t.view_ = view_.rows(begin, end);
  return t;
}

Status Tensor::zero() {
  if (!view_.is_host()) {
    return invalid_argument_error("Tensor::zero on ", view_.to_string(), ": use Context::zero");
  }
  if (nbytes() > 0) std::memset(raw(), 0, nbytes());
  return Status::OK();
}

namespace {

template <typename Src, typename Dst>
void convert_elements(const Src* src, Dst* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<Dst>(static_cast<double>(src[i]));
}

double load_float(const TensorView& v, int64_t i) {
  switch (v.dtype()) {
    case DType::kF32:
      return v.data<float>()[i];
    case DType::kF64:
      return v.data<double>()[i];
    case DType::kBF16:
      return static_cast<float>(v.data<bf16>()[i]);
    default:
      return 0;
  }
}

void store_float(const TensorView& v, int64_t i, double x) {
  switch (v.dtype()) {
    case DType::kF32:
      v.data<float>()[i] = static_cast<float>(x);
      break;
    case DType::kF64:
      v.data<double>()[i] = x;
      break;
    case DType::kBF16:
      v.data<bf16>()[i] = bf16(static_cast<float>(x));
      break;
    default:
      break;
  }
}

}  // namespace

Status convert_into(const TensorView& src, const TensorView& dst) {
  if (!src.is_host() || !dst.is_host()) {
    return invalid_argument_error("convert_into needs host tensors, got ", src.to_string(), " -> ",
                                  dst.to_string());
  }
  if (src.shape() != dst.shape()) {
    return invalid_argument_error("convert_into: shape ", src.shape().to_string(), " -> ",
                                  dst.shape().to_string());
  }
  const int64_t n = src.numel();
  if (dtype_is_floating(src.dtype()) && dtype_is_floating(dst.dtype())) {
    for (int64_t i = 0; i < n; ++i) store_float(dst, i, load_float(src, i));
    return Status::OK();
  }
  if (src.dtype() == DType::kI32 && dst.dtype() == DType::kI64) {
    convert_elements(src.data<int32_t>(), dst.data<int64_t>(), n);
    return Status::OK();
  }
  if (src.dtype() == DType::kI64 && dst.dtype() == DType::kI32) {
    convert_elements(src.data<int64_t>(), dst.data<int32_t>(), n);
    return Status::OK();
  }
  if (src.dtype() == dst.dtype()) {
    std::copy_n(static_cast<const char*>(src.raw()), src.nbytes(), static_cast<char*>(dst.raw()));
    return Status::OK();
  }
  return invalid_argument_error("convert_into: no conversion from ", dtype_name(src.dtype()),
                                " to ", dtype_name(dst.dtype()));
}

}  // namespace moe
