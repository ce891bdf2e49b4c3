// Tensor (owning, move-only) and TensorView (non-owning, copyable), both row-major and contiguous.
// A view is a typed window: data pointer, dtype, shape and device. Layers take views; whoever
// allocates owns a Tensor. Shapes use the project letters in comments: T tokens, D model width,
// F expert hidden width, E experts, K top-k, C capacity, R EP ranks.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/base/check.h"
#include "core/base/device.h"
#include "core/base/dtype.h"

namespace moe {

class Shape {
 public:
  static constexpr int kMaxDims = 6;
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(const std::vector<int64_t>& dims);

  int ndim() const { return ndim_; }
  int64_t operator[](int i) const { return dims_[check_index(i)]; }
  int64_t& operator[](int i) { return dims_[check_index(i)]; }
  int64_t numel() const;
  std::vector<int64_t> to_vector() const { return {dims_.begin(), dims_.begin() + ndim_}; }
  std::string to_string() const;  // "[4, 8]"
  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }

 private:
  int check_index(int i) const;
  std::array<int64_t, kMaxDims> dims_{};
  int ndim_ = 0;
};

class TensorView {
 public:
  TensorView() = default;
  TensorView(void* data, DType dtype, Shape shape, Device device = Device::host())
      : data_(data), dtype_(dtype), shape_(shape), device_(device) {}

  // Typed pointer; aborts if T does not match the dtype (a programmer error).
  template <typename T>
  T* data() const {
    MOE_CHECK(dtype_ == dtype_of<T>, "tensor of dtype ", dtype_name(dtype_), " read as ",
              dtype_name(dtype_of<T>));
    return static_cast<T*>(data_);
  }
  void* raw() const { return data_; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return shape_.ndim(); }
  int64_t dim(int i) const { return shape_[i < 0 ? i + shape_.ndim() : i]; }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  Device device() const { return device_; }
  bool is_host() const { return device_.is_host(); }
  bool defined() const { return data_ != nullptr || numel() == 0; }

  // Same memory, another shape with the same element count.
  TensorView reshape(Shape shape) const;
  // Rows [begin, end) along dimension 0.
  TensorView rows(int64_t begin, int64_t end) const;
  // Element i along dimension 0, with that dimension dropped.
  TensorView operator[](int64_t i) const;
  std::string to_string() const;  // "f32[4, 8]@host"

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Shape shape_{0};  // an undefined view holds no elements
  Device device_;
};

class Tensor {
 public:
  Tensor() = default;
  ~Tensor();
  Tensor(Tensor&& other) noexcept;
  Tensor& operator=(Tensor&& other) noexcept;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  // Uninitialised storage on any device.
  static StatusOr<Tensor> allocate(Shape shape, DType dtype, Device device);
  // Host storage; aborts on out-of-memory (like std::vector).
  static Tensor empty(Shape shape, DType dtype);
  static Tensor zeros(Shape shape, DType dtype);
  // A host copy of `src` (any device).
  static Tensor copy_of(const TensorView& src);
  template <typename T>
  static Tensor from_vector(Shape shape, const std::vector<T>& values) {
    Tensor t = empty(shape, dtype_of<T>);
    MOE_CHECK(static_cast<int64_t>(values.size()) == t.numel(), "from_vector: ", values.size(),
              " values for shape ", shape.to_string());
    std::copy(values.begin(), values.end(), t.data<T>());
    return t;
  }

  const TensorView& view() const { return view_; }
  operator const TensorView&() const { return view_; }  // NOLINT: implicit by design
  template <typename T>
  T* data() const { return view_.data<T>(); }
  void* raw() const { return view_.raw(); }
  DType dtype() const { return view_.dtype(); }
  const Shape& shape() const { return view_.shape(); }
  int ndim() const { return view_.ndim(); }
  int64_t dim(int i) const { return view_.dim(i); }
  int64_t numel() const { return view_.numel(); }
  size_t nbytes() const { return view_.nbytes(); }
  Device device() const { return view_.device(); }
  bool defined() const { return owned_ != nullptr || numel() == 0; }

  Status zero();
  // Copies a view of the same shape and dtype from any device into this tensor.
  Status copy_from(const TensorView& src);

 private:
  void release();
  void* owned_ = nullptr;
  TensorView view_;
};

// Typed host conversions, for tests and I/O.
template <typename T>
std::vector<T> to_vector(const TensorView& view) {
  MOE_CHECK(view.is_host(), "to_vector needs a host tensor, got ", view.to_string());
  const T* p = view.data<T>();
  return std::vector<T>(p, p + view.numel());
}

// Host-side element-type conversion (f32/f64/bf16 among themselves; i32/i64 among themselves).
// Shapes must match.
Status convert_into(const TensorView& src, const TensorView& dst);

}  // namespace moe
