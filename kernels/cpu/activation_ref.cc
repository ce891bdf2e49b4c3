#include "kernels/cpu/activation_ref.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/dtype.h"
#include "base/thread_pool.h"
#include "kernels/cpu/activation_math.h"

namespace moe::kernels::ref {
namespace {

// x[rows, :] += bias row (A act, F bias).
template <typename A, typename F>
void add_bias_rows(A* x, int64_t begin, int64_t end, int64_t n, const F* bias) {
  for (int64_t r = begin; r < end; ++r) {
    A* row = x + r * n;
    for (int64_t j = 0; j < n; ++j) row[j] = static_cast<A>(static_cast<F>(row[j]) + bias[j]);
  }
}

// x[rows, :] += bias row for every row, rows spread over the threads.
template <typename A, typename F>
void add_bias_parallel(A* x, int64_t begin, int64_t end, int64_t n, const F* bias) {
  parallel_for(end - begin, row_grain(n), [&](int64_t b, int64_t e) {
    add_bias_rows<A, F>(x, begin + b, begin + e, n, bias);
  });
}

// acc[j] += sum over rows [begin, end) of dy[r, j], rows added in order; the columns are spread
// over the threads (each column's sum runs on one thread, so its bits do not depend on them).
template <typename A>
void bias_grad_rows(const A* dy, int64_t begin, int64_t end, int64_t n, double* acc) {
  constexpr int64_t kCols = 32;
  parallel_for((n + kCols - 1) / kCols,
               std::max<int64_t>(1, kElementGrain / std::max<int64_t>(1, (end - begin) * kCols)),
               [&](int64_t c0, int64_t c1) {
                 const int64_t j0 = c0 * kCols, j1 = std::min(n, c1 * kCols);
                 for (int64_t r = begin; r < end; ++r) {
                   const A* row = dy + r * n;
                   for (int64_t j = j0; j < j1; ++j) acc[j] += static_cast<double>(row[j]);
                 }
               });
}

}  // namespace

template <typename T>
void activation_forward(Activation act, const T* px, int64_t n, T* py) {
  using C = accum_t<T>;
  parallel_for(n, kElementGrain, [&](int64_t begin, int64_t end) {
    switch (act) {
      case Activation::kRelu:
        for (int64_t i = begin; i < end; ++i) py[i] = static_cast<C>(px[i]) > C(0) ? px[i] : T(0);
        break;
      default:
        for (int64_t i = begin; i < end; ++i) {
          py[i] = static_cast<T>(apply_activation<C>(act, px[i]));
        }
    }
  });
}

template <typename T>
void activation_backward(Activation act, const T* px, const T* pdy, int64_t n, T* pdx) {
  using C = accum_t<T>;
  parallel_for(n, kElementGrain, [&](int64_t begin, int64_t end) {
    switch (act) {
      case Activation::kRelu:
        // dy is read whatever the sign (an unconditional load), so the select vectorises.
        for (int64_t i = begin; i < end; ++i) {
          const T g = pdy[i];
          pdx[i] = static_cast<C>(px[i]) > C(0) ? g : T(0);
        }
        break;
      default:
        for (int64_t i = begin; i < end; ++i) {
          pdx[i] = static_cast<T>(apply_activation_grad<C>(act, px[i]) * static_cast<C>(pdy[i]));
        }
    }
  });
}

template <typename T>
void swiglu_forward(const T* px, int64_t m, int64_t f, T* py) {
  using C = accum_t<T>;
  parallel_for(m, row_grain(f), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* gate = px + r * 2 * f;
      const T* up = gate + f;
      for (int64_t j = 0; j < f; ++j) {
        const double v = swiglu(static_cast<C>(gate[j]), static_cast<C>(up[j]));
        py[r * f + j] = static_cast<T>(static_cast<C>(v));
      }
    }
  });
}

template <typename T>
void swiglu_backward(const T* px, const T* pdy, int64_t m, int64_t f, T* pdx) {
  using C = accum_t<T>;
  parallel_for(m, row_grain(2 * f), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* gate = px + r * 2 * f;
      const T* up = gate + f;
      T* d_gate = pdx + r * 2 * f;
      T* d_up = d_gate + f;
      for (int64_t j = 0; j < f; ++j) {
        double dg = 0, du = 0;
        swiglu_grad(static_cast<C>(gate[j]), static_cast<C>(up[j]), static_cast<C>(pdy[r * f + j]),
                    &dg, &du);
        d_gate[j] = static_cast<T>(static_cast<C>(dg));
        d_up[j] = static_cast<T>(static_cast<C>(du));
      }
    }
  });
}

template <typename A, typename F>
void add_bias(A* x, int64_t m, int64_t n, const F* bias) {
  add_bias_parallel<A, F>(x, 0, m, n, bias);
}

template <typename A, typename F>
void sigmoid_gate_forward(const A* px, const F* logit, int64_t m, int64_t n, A* py) {
  using C = accum_t<A>;
  parallel_for(m, row_grain(n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const double s = logistic(static_cast<double>(logit[r]));
      for (int64_t j = 0; j < n; ++j) {
        py[r * n + j] = static_cast<A>(static_cast<C>(s * static_cast<C>(px[r * n + j])));
      }
    }
  });
}

template <typename A, typename F>
void sigmoid_gate_backward(const A* px, const F* logit, const A* pdy, int64_t m, int64_t n, A* pdx,
                           A* dlogit) {
  using C = accum_t<A>;
  parallel_for(m, row_grain(2 * n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const double s = logistic(static_cast<double>(logit[r]));
      double dot = 0;  // before dx is written: dx may alias dy
      for (int64_t j = 0; j < n; ++j) {
        dot += static_cast<double>(static_cast<C>(pdy[r * n + j])) *
               static_cast<double>(static_cast<C>(px[r * n + j]));
      }
      dlogit[r] = static_cast<A>(static_cast<C>(s * (1.0 - s) * dot));
      for (int64_t j = 0; j < n; ++j) {
        pdx[r * n + j] = static_cast<A>(static_cast<C>(s * static_cast<C>(pdy[r * n + j])));
      }
    }
  });
}

template <typename A, typename F>
void bias_grad(const A* dy, int64_t m, int64_t n, F* db) {
  std::vector<double> acc(n, 0.0);
  bias_grad_rows<A>(dy, 0, m, n, acc.data());
  for (int64_t j = 0; j < n; ++j) db[j] = static_cast<F>(db[j] + acc[j]);
}

// One block's rows: bias added to the filled ones, the padding zeroed.
template <typename A, typename F>
void add_bias_block(const ExpertBlocks& blocks, int64_t b, A* px, int64_t n, const F* bias) {
  const auto [begin, end] = blocks.block_rows(b);
  const int64_t used = begin + filled_rows(blocks, b);
  add_bias_rows<A, F>(px, begin, used, n, bias + blocks.expert_of(b) * n);
  std::fill(px + used * n, px + end * n, A(0));
}

// Many blocks (fine-grained experts) run a block per task; a few large ones spread their rows.
template <typename A, typename F>
void add_bias_blocks(const ExpertBlocks& blocks, A* px, int64_t n, const F* bias) {
  if (blocks.blocks() >= 4 * parallel_threads()) {
    parallel_for(blocks.blocks(), 1, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) add_bias_block(blocks, b, px, n, bias);
    });
    return;
  }
  for (int64_t b = 0; b < blocks.blocks(); ++b) {
    const auto [begin, end] = blocks.block_rows(b);
    const int64_t used = begin + filled_rows(blocks, b);
    add_bias_parallel<A, F>(px, begin, used, n, bias + blocks.expert_of(b) * n);
    std::fill(px + used * n, px + end * n, A(0));
  }
}

// db[e] += the column sums of expert e's blocks in the header's order (rank order, chunks of
// kBiasGradChunk rows, each from zero). Tasks are (expert, 32-column chunk) pairs, so every
// column's sum runs on one thread in that order.
template <typename A, typename F>
void bias_grad_blocks(const ExpertBlocks& blocks, const A* dy, int64_t n, F* db) {
  constexpr int64_t kCols = 32;
  const int64_t experts = blocks.local_experts, chunks = (n + kCols - 1) / kCols;
  const int64_t rows_per_task = std::max<int64_t>(1, blocks.rows() / experts) * kCols;
  parallel_for(
      experts * chunks, std::max<int64_t>(1, kElementGrain / rows_per_task),
      [&](int64_t i0, int64_t i1) {
        std::vector<double> acc(kCols), part(kCols);
        for (int64_t i = i0; i < i1; ++i) {
          const int64_t e = i / chunks, j0 = (i % chunks) * kCols, j1 = std::min(n, j0 + kCols);
          std::fill(acc.begin(), acc.end(), 0.0);
          for (int64_t b = e; b < blocks.blocks(); b += experts) {
            const int64_t begin = blocks.block_rows(b).first, end = begin + filled_rows(blocks, b);
            for (int64_t c = begin; c < end; c += kBiasGradChunk) {
              std::fill(part.begin(), part.end(), 0.0);
              for (int64_t r = c; r < std::min(end, c + kBiasGradChunk); ++r) {
                const A* row = dy + r * n;
                for (int64_t j = j0; j < j1; ++j) part[j - j0] += static_cast<double>(row[j]);
              }
              for (int64_t j = j0; j < j1; ++j) acc[j - j0] += part[j - j0];
            }
          }
          F* out = db + e * n;
          for (int64_t j = j0; j < j1; ++j) out[j] = static_cast<F>(out[j] + acc[j - j0]);
        }
      });
}

template <typename T>
void dropout(const T* px, int64_t m, int64_t n, const int64_t* keys, int64_t key_base,
             const CounterRng& rng, float p, T* py) {
  using C = accum_t<T>;
  const bool keyed = keys != nullptr;
  if (p == 0.f) {
    if (px != py) std::memcpy(py, px, static_cast<size_t>(m * n) * sizeof(T));
    for (int64_t r = 0; keyed && r < m; ++r) {
      if (keys[r] < 0) std::fill(py + r * n, py + (r + 1) * n, T(0));
    }
    return;
  }
  const C scale = static_cast<C>(1.0 / (1.0 - static_cast<double>(p)));
  // Element (r, j) uses lane j % 4 of Philox block key(r) * ceil(N / 4) + j / 4: four elements
  // per draw, and still a function of (row key, column) only.
  const uint64_t blocks_per_row = static_cast<uint64_t>((n + 3) / 4);
  parallel_for(m, row_grain(4 * n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t key = keyed ? keys[r] : key_base + r;
      if (key < 0) {
        std::fill(py + r * n, py + (r + 1) * n, T(0));
        continue;
      }
      for (int64_t j0 = 0; j0 < n; j0 += 4) {
        uint32_t bits[4];
        rng.block(static_cast<uint64_t>(key) * blocks_per_row + static_cast<uint64_t>(j0 / 4),
                  bits);
        for (int64_t j = j0; j < std::min(n, j0 + 4); ++j) {
          const float u = static_cast<float>(bits[j - j0] >> 8) * (1.0f / 16777216.0f);
          py[r * n + j] = u >= p ? static_cast<T>(static_cast<C>(px[r * n + j]) * scale) : T(0);
        }
      }
    }
  });
}

#define MOE_INSTANTIATE_ACTIVATION(T)                                                              \
  template void activation_forward<T>(Activation, const T*, int64_t, T*);                          \
  template void activation_backward<T>(Activation, const T*, const T*, int64_t, T*);               \
  template void swiglu_forward<T>(const T*, int64_t, int64_t, T*);                                 \
  template void swiglu_backward<T>(const T*, const T*, int64_t, int64_t, T*);                      \
  template void dropout<T>(const T*, int64_t, int64_t, const int64_t*, int64_t, const CounterRng&, \
                           float, T*);
MOE_INSTANTIATE_ACTIVATION(float)
MOE_INSTANTIATE_ACTIVATION(double)
MOE_INSTANTIATE_ACTIVATION(bf16)
#undef MOE_INSTANTIATE_ACTIVATION

#define MOE_INSTANTIATE_BIAS(A, F)                                                              \
  template void sigmoid_gate_forward<A, F>(const A*, const F*, int64_t, int64_t, A*);           \
  template void sigmoid_gate_backward<A, F>(const A*, const F*, const A*, int64_t, int64_t, A*, \
                                            A*);                                                \
  template void add_bias<A, F>(A*, int64_t, int64_t, const F*);                                 \
  template void bias_grad<A, F>(const A*, int64_t, int64_t, F*);                                \
  template void add_bias_blocks<A, F>(const ExpertBlocks&, A*, int64_t, const F*);              \
  template void bias_grad_blocks<A, F>(const ExpertBlocks&, const A*, int64_t, F*);
MOE_INSTANTIATE_BIAS(float, float)
MOE_INSTANTIATE_BIAS(double, double)
MOE_INSTANTIATE_BIAS(bf16, float)
#undef MOE_INSTANTIATE_BIAS

}  // namespace moe::kernels::ref
