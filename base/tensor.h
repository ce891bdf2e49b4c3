// Tensor (owning, shared storage) and TensorView (non-owning), both row-major and contiguous.
// A view is a typed window: data pointer, dtype, shape, device and the host-access guard. Layers
// take views; whoever allocates owns a Tensor. Shapes use the project letters in comments: T
// tokens, D model width, F expert hidden width, E experts, K top-k, C capacity, R EP ranks.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/check.h"
#include "base/device.h"
#include "base/dtype.h"

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

// Host access to device memory. A Context that guards host access (the CPU test build's stand-in
// for a GPU) marks its tensors `guarded`: reading or writing their memory from host code
// (data<T>(), raw()) aborts unless a DeviceAccessScope is open on this thread. Kernel entry
// points, communicator backends and the Context's copies open one: they are the "device". Layers
// and the model never do, so a host access there fails the test that runs them.
class DeviceAccessScope {
 public:
  DeviceAccessScope();
  ~DeviceAccessScope();
  DeviceAccessScope(const DeviceAccessScope&) = delete;
  DeviceAccessScope& operator=(const DeviceAccessScope&) = delete;
};
bool device_access_allowed();

class TensorView {
 public:
  TensorView() = default;
  TensorView(void* data, DType dtype, Shape shape, Device device = Device::host(),
             bool guarded = false)
      : data_(data), dtype_(dtype), shape_(shape), device_(device), guarded_(guarded) {}

  // Typed pointer; aborts if T does not match the dtype (a programmer error), or on host access
  // to a guarded tensor outside a DeviceAccessScope.
  template <typename T>
  T* data() const {
    MOE_CHECK(dtype_ == dtype_of<T>, "tensor of dtype ", dtype_name(dtype_), " read as ",
              dtype_name(dtype_of<T>));
    check_access();
    return static_cast<T*>(data_);
  }
  void* raw() const {
    check_access();
    return data_;
  }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return shape_.ndim(); }
  int64_t dim(int i) const { return shape_[i < 0 ? i + shape_.ndim() : i]; }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  Device device() const { return device_; }
  bool is_host() const { return device_.is_host(); }
  bool guarded() const { return guarded_; }
  bool defined() const { return data_ != nullptr || numel() == 0; }
  // True when both views start at the same address (aliasing checks; never dereferences).
  bool same_data(const TensorView& o) const { return data_ == o.data_; }

  // Same memory, another shape with the same element count.
  TensorView reshape(Shape shape) const;
  // Rows [begin, end) along dimension 0.
  TensorView rows(int64_t begin, int64_t end) const;
  // Element i along dimension 0, with that dimension dropped.
  TensorView operator[](int64_t i) const;
  std::string to_string() const;  // "f32[4, 8]@host"

 private:
  void check_access() const {
    if (guarded_ && !device_access_allowed()) access_violation();
  }
  [[noreturn]] void access_violation() const;

  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Shape shape_{0};  // an undefined view holds no elements
  Device device_;
  bool guarded_ = false;
};

class Allocator;
struct TensorStorage;

// An owning tensor. Copies share the storage (like a shared_ptr): saving an activation for the
// backward costs a reference count, not a copy. clone() makes a deep copy. The storage returns to
// its allocator (stream-ordered) when the last tensor sharing it goes away.
class Tensor {
 public:
  Tensor() = default;
  Tensor(const Tensor&) = default;
  Tensor& operator=(const Tensor&) = default;
  // A moved-from tensor is empty (no storage, no elements).
  Tensor(Tensor&& other) noexcept
      : storage_(std::move(other.storage_)), view_(std::exchange(other.view_, TensorView())) {}
  Tensor& operator=(Tensor&& other) noexcept {
    storage_ = std::move(other.storage_);
    view_ = std::exchange(other.view_, TensorView());
    return *this;
  }

  // Uninitialised storage from `allocator` (stream-ordered on `stream`); `guarded` marks the
  // memory as device memory for host-access checks (see DeviceAccessScope). `stream_owner` keeps
  // the stream alive until the storage has been returned on it (a tensor may outlive the Context
  // that made it).
  static StatusOr<Tensor> allocate(Shape shape, DType dtype,
                                   const std::shared_ptr<Allocator>& allocator, Stream stream = {},
                                   bool guarded = false,
                                   std::shared_ptr<const void> stream_owner = nullptr);
  // Host storage, unguarded, for data pipelines, I/O and tests (core code allocates through its
  // Context instead). try_empty returns kResourceExhausted naming the size when the memory is
  // not there; empty aborts then (like std::vector), for small host tensors.
  static StatusOr<Tensor> try_empty(Shape shape, DType dtype);
  static Tensor empty(Shape shape, DType dtype);
  static Tensor zeros(Shape shape, DType dtype);
  // A host copy of an unguarded host view (device data reaches the host through
  // Context::read_back, which is a synchronisation point).
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
  T* data() const {
    return view_.data<T>();
  }
  void* raw() const { return view_.raw(); }
  DType dtype() const { return view_.dtype(); }
  const Shape& shape() const { return view_.shape(); }
  int ndim() const { return view_.ndim(); }
  int64_t dim(int i) const { return view_.dim(i); }
  int64_t numel() const { return view_.numel(); }
  size_t nbytes() const { return view_.nbytes(); }
  Device device() const { return view_.device(); }
  bool defined() const { return storage_ != nullptr || numel() == 0; }

  // The same storage seen with another shape (same element count), or as rows [begin, end).
  Tensor reshape(Shape shape) const;
  Tensor rows(int64_t begin, int64_t end) const;

  // Host-only (unguarded host tensors): fill with zeros. Device tensors use Context::zero.
  Status zero();

 private:
  std::shared_ptr<TensorStorage> storage_;
  TensorView view_;
};

// Typed host conversions, for tests and I/O.
template <typename T>
std::vector<T> to_vector(const TensorView& view) {
  MOE_CHECK(view.is_host(), "to_vector needs a host tensor, got ", view.to_string());
  if (view.numel() == 0) return {};
  const T* p = view.data<T>();
  return std::vector<T>(p, p + view.numel());
}

// Host-side element-type conversion (f32/f64/bf16 among themselves; i32/i64 among themselves).
// Shapes must match.
Status convert_into(const TensorView& src, const TensorView& dst);

}  // namespace moe
