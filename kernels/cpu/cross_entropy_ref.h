// Plain C++ softmax cross-entropy (the CPU backend). Targets are already validated by the entry
// point (kernels/cross_entropy.h); -1 marks an ignored row. T = float or double.
#pragma once

#include <cstdint>

namespace moe::kernels::ref {

// logits [N, V]; targets [N]; lse and row_loss [N] or nullptr (0 for ignored rows). Returns the
// loss sum over counted rows and sets *count.
template <typename T>
double cross_entropy_forward(const T* logits, const int32_t* targets, int64_t n, int64_t v, T* lse,
                             T* row_loss, int64_t* count);
// lse [N] from the forward; d_logits [N, V] of type D (T, or bf16 for f32 logits) overwritten
// (may alias logits when D = T).
template <typename T, typename D>
void cross_entropy_backward(const T* logits, const int32_t* targets, const T* lse, int64_t n,
                            int64_t v, double scale, D* d_logits);

}  // namespace moe::kernels::ref
