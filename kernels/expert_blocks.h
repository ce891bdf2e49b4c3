// The row layout of an MoE layer's expert computation on one rank (DESIGN.md steps 4-5). Rows are
// grouped in R * E_l blocks, b = r * E_l + l in that order: block b holds the rows that EP rank r
// sent to local expert l, which is exactly the layout the all-to-all delivers, so the expert
// GEMMs read the receive buffer in place.
//
// Capacity mode (capacity >= 0): every block has C rows (the padded receive buffer
// [R, E_l, C, D]); `filled` (optional, i32 [R * E_l] on the device) counts each block's rows in
// use, always a prefix. Rows past it are padding: kernels may skip them (the CPU backend does,
// and writes zeros to their outputs) or compute them (a GPU's batched GEMM); a padding row never
// reaches a result, because its input is zero and its output gradient is zero.
// Dropless mode (capacity < 0): block sizes vary; `offsets` holds the R * E_l + 1 row offsets on
// the host (the layer reads the exchanged counts once to size its buffers).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "base/tensor.h"

namespace moe::kernels {

struct ExpertBlocks {
  int64_t ranks = 1;             // R
  int64_t local_experts = 1;     // E_l
  int64_t capacity = -1;         // C, or -1 (dropless)
  Tensor filled;                 // capacity mode, optional: i32 [R * E_l] rows in use per block
  std::vector<int64_t> offsets;  // dropless: [R * E_l + 1] host row offsets

  int64_t blocks() const { return ranks * local_experts; }
  int64_t expert_of(int64_t block) const { return block % local_experts; }
  // Total rows (R * E_l * C, or offsets.back()).
  int64_t rows() const {
    if (capacity >= 0) return blocks() * capacity;
    return offsets.empty() ? 0 : offsets.back();
  }
  // Rows [begin, end) of block b, padding included.
  std::pair<int64_t, int64_t> block_rows(int64_t b) const {
    if (capacity >= 0) return {b * capacity, (b + 1) * capacity};
    return {offsets[b], offsets[b + 1]};
  }
};

// kInvalidArgument unless the blocks are well formed for `data`'s rows (dimension 0): ranks,
// experts >= 1; capacity mode with filled of dtype i32 [R * E_l] on data's device (when given);
// dropless offsets of size R * E_l + 1, non-decreasing, from 0 to rows.
Status validate_blocks(const char* op, const ExpertBlocks& blocks, const TensorView& data);

// Inside a kernel (host backend): the rows of block b that hold data: the filled prefix in
// capacity mode (clamped to C), the whole block in dropless mode.
int64_t filled_rows(const ExpertBlocks& blocks, int64_t b);

}  // namespace moe::kernels
