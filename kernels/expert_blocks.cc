#include "kernels/expert_blocks.h"

#include <algorithm>

namespace moe::kernels {

Status validate_blocks(const char* op, const ExpertBlocks& b, const TensorView& data) {
  const int64_t rows = data.ndim() >= 1 ? data.dim(0) : 0;
  if (b.ranks < 1 || b.local_experts < 1) {
    return invalid_argument_error(op, ": blocks need ranks >= 1 and local experts >= 1, got ",
                                  b.ranks, " and ", b.local_experts);
  }
  if (b.capacity >= 0) {
    if (b.filled.numel() > 0 &&
        (b.filled.dtype() != DType::kI32 || b.filled.shape() != Shape{b.blocks()})) {
      return invalid_argument_error(op, ": filled must be i32 [", b.blocks(), "], got ",
                                    b.filled.view().to_string());
    }
    if (b.filled.numel() > 0 && b.filled.device() != data.device()) {
      return invalid_argument_error(op, ": filled ", b.filled.view().to_string(),
                                    " must live on the data's device (", data.to_string(), ")");
    }
  } else {
    if (static_cast<int64_t>(b.offsets.size()) != b.blocks() + 1 || b.offsets.front() != 0) {
      return invalid_argument_error(op, ": dropless blocks need ", b.blocks() + 1,
                                    " offsets starting at 0, got ", b.offsets.size());
    }
    for (size_t i = 1; i < b.offsets.size(); ++i) {
      if (b.offsets[i] < b.offsets[i - 1]) {
        return invalid_argument_error(op, ": block offsets decrease at block ", i - 1);
      }
    }
  }
  if (b.rows() != rows) {
    return invalid_argument_error(op, ": blocks cover ", b.rows(), " rows, the tensors have ",
                                  rows);
  }
  return Status::OK();
}

int64_t filled_rows(const ExpertBlocks& b, int64_t block) {
  if (b.capacity < 0) return b.offsets[block + 1] - b.offsets[block];
  if (b.filled.numel() == 0) return b.capacity;
  const int64_t n = b.filled.data<int32_t>()[block];
  return std::clamp<int64_t>(n, 0, b.capacity);
}

}  // namespace moe::kernels
