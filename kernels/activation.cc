#include "kernels/activation.h"

#include <algorithm>
#include <cstring>

#include "kernels/common.h"
#include "kernels/reference/activation_ref.h"

namespace moe::kernels {

const char* activation_name(Activation act) {
  switch (act) {
    case Activation::kRelu: return "relu";
    case Activation::kGelu: return "gelu";
    case Activation::kGeluTanh: return "gelu_tanh";
  }
  return "?";
}

namespace {

template <typename T>
T apply(Activation act, T x) {
  switch (act) {
    case Activation::kRelu: return ref::relu(x);
    case Activation::kGelu: return ref::gelu_erf(x);
    case Activation::kGeluTanh: return ref::gelu_tanh(x);
  }
  return x;
}

template <typename T>
T apply_grad(Activation act, T x) {
  switch (act) {
    case Activation::kRelu: return ref::relu_grad(x);
    case Activation::kGelu: return ref::gelu_erf_grad(x);
    case Activation::kGeluTanh: return ref::gelu_tanh_grad(x);
  }
  return T(1);
}

Status check_grouped(const char* op, const TensorView& x, const TensorView& per_group,
                     const std::vector<int64_t>& offsets) {
  if (x.ndim() != 2 || per_group.ndim() != 2 || per_group.dim(1) != x.dim(1)) {
    return invalid_argument_error(op, ": needs x [M, N] and bias [G, N], got ", x.to_string(),
                                  ", ", per_group.to_string());
  }
  if (static_cast<int64_t>(offsets.size()) != per_group.dim(0) + 1 || offsets.front() != 0 ||
      offsets.back() != x.dim(0)) {
    return invalid_argument_error(op, ": offsets must have G + 1 = ", per_group.dim(0) + 1,
                                  " entries from 0 to ", x.dim(0));
  }
  return Status::OK();
}


Status dropout_apply(const char* op, const TensorView& x, const TensorView& row_keys,
                     CounterRng rng, float p, const TensorView& y) {
  MOE_RETURN_IF_ERROR(check_host_float(op, "x", x));
  MOE_RETURN_IF_ERROR(check_same_dtype(op, x, "y", y));
  if (x.shape() != y.shape() || x.ndim() != 2) {
    return invalid_argument_error(op, ": x ", x.to_string(), " and y ", y.to_string(),
                                  " must be the same [M, N]");
  }
  if (!(p >= 0.f && p < 1.f)) return invalid_argument_error(op, ": p = ", p, " not in [0, 1)");
  if (p == 0.f) {  // identity
    if (x.raw() != y.raw()) std::memcpy(y.raw(), x.raw(), x.nbytes());
    return Status::OK();
  }
  const bool keyed = row_keys.numel() > 0;
  if (keyed) {
    MOE_RETURN_IF_ERROR(check_dtype(op, "row_keys", row_keys, DType::kI64));
    MOE_RETURN_IF_ERROR(check_shape(op, "row_keys", row_keys, Shape{x.dim(0)}));
  }
  return dispatch_host_float(op, x, [&](auto tag) {
    using T = decltype(tag);
    const int64_t m = x.dim(0), n = x.dim(1);
    const T* px = x.data<T>();
    T* py = y.data<T>();
    const int64_t* keys = keyed ? row_keys.data<int64_t>() : nullptr;
    const T scale = static_cast<T>(1.0 / (1.0 - static_cast<double>(p)));
    // Element (r, j) uses lane j % 4 of Philox block key(r) * ceil(N / 4) + j / 4: four elements
    // per draw, and still a function of (row key, column) only.
    const uint64_t blocks_per_row = static_cast<uint64_t>((n + 3) / 4);
    for (int64_t r = 0; r < m; ++r) {
      const uint64_t key = static_cast<uint64_t>(keyed ? keys[r] : r);
      for (int64_t j0 = 0; j0 < n; j0 += 4) {
        uint32_t bits[4];
        rng.block(key * blocks_per_row + static_cast<uint64_t>(j0 / 4), bits);
        for (int64_t j = j0; j < std::min(n, j0 + 4); ++j) {
          const float u = static_cast<float>(bits[j - j0] >> 8) * (1.0f / 16777216.0f);
          py[r * n + j] = u >= p ? px[r * n + j] * scale : T(0);
        }
      }
    }
  });
}

}  // namespace

Status activation_forward(Activation act, const TensorView& x, const TensorView& y,
                          Stream stream) {
  constexpr const char* kOp = "activation_forward";
  MOE_RETURN_IF_ERROR(check_host_float(kOp, "x", x));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, x, "y", y));
  if (x.shape() != y.shape()) return invalid_argument_error(kOp, ": x and y shapes differ");
  return dispatch_host_float(kOp, x, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* py = y.data<T>();
    const int64_t n = x.numel();
    switch (act) {
      case Activation::kRelu:
        for (int64_t i = 0; i < n; ++i) py[i] = px[i] > T(0) ? px[i] : T(0);
        break;
      default:
        for (int64_t i = 0; i < n; ++i) py[i] = apply(act, px[i]);
    }
  });
}

Status activation_backward(Activation act, const TensorView& x, const TensorView& dy,
                           const TensorView& dx, Stream stream) {
  constexpr const char* kOp = "activation_backward";
  MOE_RETURN_IF_ERROR(check_host_float(kOp, "x", x));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, x, "dy", dy));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, x, "dx", dx));
  if (x.shape() != dy.shape() || x.shape() != dx.shape()) {
    return invalid_argument_error(kOp, ": x, dy and dx shapes differ");
  }
  return dispatch_host_float(kOp, x, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    const T* pdy = dy.data<T>();
    T* pdx = dx.data<T>();
    const int64_t n = x.numel();
    switch (act) {
      case Activation::kRelu:
        for (int64_t i = 0; i < n; ++i) pdx[i] = px[i] > T(0) ? pdy[i] : T(0);
        break;
      default:
        for (int64_t i = 0; i < n; ++i) pdx[i] = apply_grad(act, px[i]) * pdy[i];
    }
  });
}

Status add_bias_grouped(const TensorView& x, const TensorView& bias,
                        const std::vector<int64_t>& offsets, Stream stream) {
  constexpr const char* kOp = "add_bias_grouped";
  MOE_RETURN_IF_ERROR(check_host_float(kOp, "x", x));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, x, "bias", bias));
  MOE_RETURN_IF_ERROR(check_grouped(kOp, x, bias, offsets));
  return dispatch_host_float(kOp, x, [&](auto tag) {
    using T = decltype(tag);
    const int64_t n = x.dim(1);
    T* px = x.data<T>();
    const T* pb = bias.data<T>();
    for (size_t g = 0; g + 1 < offsets.size(); ++g)
      for (int64_t r = offsets[g]; r < offsets[g + 1]; ++r)
        for (int64_t j = 0; j < n; ++j) px[r * n + j] += pb[g * n + j];
  });
}

Status bias_grad_grouped(const TensorView& dy, const TensorView& dbias,
                         const std::vector<int64_t>& offsets, Stream stream) {
  constexpr const char* kOp = "bias_grad_grouped";
  MOE_RETURN_IF_ERROR(check_host_float(kOp, "dy", dy));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, dy, "dbias", dbias));
  MOE_RETURN_IF_ERROR(check_grouped(kOp, dy, dbias, offsets));
  return dispatch_host_float(kOp, dy, [&](auto tag) {
    using T = decltype(tag);
    const int64_t n = dy.dim(1);
    const T* pdy = dy.data<T>();
    T* pdb = dbias.data<T>();
    for (size_t g = 0; g + 1 < offsets.size(); ++g)
      for (int64_t r = offsets[g]; r < offsets[g + 1]; ++r)
        for (int64_t j = 0; j < n; ++j) pdb[g * n + j] += pdy[r * n + j];
  });
}

Status dropout_forward(const TensorView& x, const TensorView& row_keys, CounterRng rng, float p,
                       const TensorView& y, Stream stream) {
  return dropout_apply("dropout_forward", x, row_keys, rng, p, y);
}

Status dropout_backward(const TensorView& dy, const TensorView& row_keys, CounterRng rng, float p,
                        const TensorView& dx, Stream stream) {
  // Inverted dropout is linear with a fixed mask: its backward is the same masked scaling.
  return dropout_apply("dropout_backward", dy, row_keys, rng, p, dx);
}

}  // namespace moe::kernels
