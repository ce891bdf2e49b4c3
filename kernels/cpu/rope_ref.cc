#include "kernels/cpu/rope_ref.h"

#include <vector>

#include "base/dtype.h"
#include "base/thread_pool.h"
#include "kernels/cpu/rope_math.h"

namespace moe::kernels::ref {

template <typename F>
void rope_table(int64_t seq_len, int64_t head_dim, double base, F* cos_sin) {
  const int64_t half = head_dim / 2;
  for (int64_t s = 0; s < seq_len; ++s) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = rope_angle(s, i, head_dim, base);
      cos_sin[2 * (s * half + i)] = static_cast<F>(std::cos(angle));
      cos_sin[2 * (s * half + i) + 1] = static_cast<F>(std::sin(angle));
    }
  }
}

template <typename A, typename F>
void rope_rotate(const RopeArgs& args, int64_t head_dim, bool transpose, const A* in, A* out) {
  const int64_t S = args.seq_len, H = args.heads, D = H * head_dim, half = head_dim / 2;
  std::vector<F> table(static_cast<size_t>(2 * S * half));
  rope_table<F>(S, head_dim, args.base, table.data());
  const double sign = transpose ? -1.0 : 1.0;
  parallel_for(args.batch * S, row_grain(3 * D), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const F* cs = table.data() + 2 * (r % S) * half;
      const A* x = in + r * 3 * D;
      A* y = out + r * 3 * D;
      // Each pair is read before either element is written, so out may be in.
      for (int64_t c = 0; c < 2 * D; c += head_dim) {  // the heads of q, then of k
        for (int64_t i = 0; i < half; ++i) {
          const RopePair p =
              rope_turn(static_cast<double>(x[c + i]), static_cast<double>(x[c + i + half]),
                        static_cast<double>(cs[2 * i]), sign * static_cast<double>(cs[2 * i + 1]));
          y[c + i] = static_cast<A>(p.y0);
          y[c + i + half] = static_cast<A>(p.y1);
        }
      }
      if (y != x) {
        for (int64_t j = 2 * D; j < 3 * D; ++j) y[j] = x[j];
      }
    }
  });
}

#define MOE_INSTANTIATE_ROPE(A, F) \
  template void rope_rotate<A, F>(const RopeArgs&, int64_t, bool, const A*, A*);
MOE_INSTANTIATE_ROPE(float, float)
MOE_INSTANTIATE_ROPE(double, double)
MOE_INSTANTIATE_ROPE(bf16, float)
#undef MOE_INSTANTIATE_ROPE
template void rope_table<float>(int64_t, int64_t, double, float*);
template void rope_table<double>(int64_t, int64_t, double, double*);

}  // namespace moe::kernels::ref
