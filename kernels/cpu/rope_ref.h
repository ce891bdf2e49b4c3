// Plain C++ rotary position embeddings on packed qkv (the CPU backend). See kernels/rope.h for the
// layout and the convention; the formulas are those of rope_math.h. A = float, double or bf16
// (activations); F = float or double (the cos and sin table).
#pragma once

#include <cstdint>

#include "kernels/rope.h"

namespace moe::kernels::ref {

// The table of rope_rotate: cos_sin[2 * (s * head_dim/2 + i)] = cos, [... + 1] = sin of
// rope_angle(s, i, head_dim, base) for s in [0, seq_len), i in [0, head_dim/2), each computed in
// double and rounded once to F.
template <typename F>
void rope_table(int64_t seq_len, int64_t head_dim, double base, F* cos_sin);

// in, out [B*S, 3D] (out may be in): q and k pairs turned by the table's angles (transpose: by
// their negatives), v copied. D = args.heads * head_dim.
template <typename A, typename F>
void rope_rotate(const RopeArgs& args, int64_t head_dim, bool transpose, const A* in, A* out);

}  // namespace moe::kernels::ref
