// Plain C++ loops of the MoE statistics (the CPU backend); see kernels/moe_stats.h for what each
// slot means. Each adds (+=) its sums, in double, into the f64 slots at out (ac_stats also sets
// its min, max and mean slots); arrays are row-major. T = float or double (also bf16 for
// row_norm_sum).
#pragma once

#include <cstdint>

namespace moe::kernels::ref {

// out[0] += sum_i -p[i] log p[i] over the n probabilities with p[i] > 0.
template <typename T>
void entropy_sum(const T* probs, int64_t n, double* out);
// out[0] += sum_t ||x[t, :]||_2 for x [rows, d].
template <typename T>
void row_norm_sum(const T* x, int64_t rows, int64_t d, double* out);
// out[0] += sum_t x[t, col] for x [rows, cols].
template <typename T>
void column_sum(const T* x, int64_t rows, int64_t cols, int64_t col, double* out);
// out[i] += counts[i] for i < n.
void accumulate_counts(const int64_t* counts, int64_t n, double* out);
// out[0] += #(a[i] != b[i]) for i < n.
void count_mismatches(const int32_t* a, const int32_t* b, int64_t n, double* out);
// out[0..4) += the SparseMixer counts of kernels/moe_stats.h: mask [tokens, experts],
// is_argmax [tokens], scale [tokens].
template <typename T>
void sparsemixer_stats(const uint8_t* mask, const uint8_t* is_argmax, const T* scale,
                       int64_t tokens, int64_t experts, double* out);
// The AC router's slots out [2 experts + kAcStatsFixed] (kernels/moe_stats.h) from abs_dev
// [experts, d], counts [experts], local_counts [experts] and summary [5].
void ac_stats(const double* abs_dev, const int64_t* counts, const int64_t* local_counts,
              const double* summary, int64_t experts, int64_t d, double* out);

}  // namespace moe::kernels::ref
