// The warp-level primitives that the tensor-core kernels (flash_attention_kernels.cuh) are
// written against: thread and block indices, the block's dynamic shared memory, the block
// barrier, the xor shuffle, asynchronous copies into shared memory, ldmatrix and mma.sync (bf16
// operands, f32 accumulators), and the packing of two floats into a bf16 operand register.
// tests/testing/warp_emulator.h gives the same names on the host, with the PTX ISA's fragment
// layouts, so that the kernels' index arithmetic runs in the CPU tests; on the GPU these are the
// instructions themselves.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "base/dtype.h"

namespace moe::kernels::cuda {

__device__ __forceinline__ int thread_x() { return static_cast<int>(threadIdx.x); }
__device__ __forceinline__ int block_x() { return static_cast<int>(blockIdx.x); }
__device__ __forceinline__ int block_y() { return static_cast<int>(blockIdx.y); }
__device__ __forceinline__ int grid_y() { return static_cast<int>(gridDim.y); }

// The block's dynamic shared memory (the launch's third argument), on a 128-byte boundary.
__device__ __forceinline__ unsigned char* dynamic_shared() {
  extern __shared__ __align__(128) unsigned char dynamic_shared_bytes[];
  return dynamic_shared_bytes;
}

__device__ __forceinline__ void block_sync() { __syncthreads(); }

// v of lane (this lane xor mask); every lane of the warp takes part.
__device__ __forceinline__ float shfl_xor(float v, int mask) {
  return __shfl_xor_sync(0xffffffffu, v, mask);
}

// The shared-memory address of p (inside the block's shared memory), as ldmatrix takes it.
__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8 x 8 matrices of 16-bit elements from shared memory: lanes 8 m .. 8 m + 7 give the
// addresses of matrix m's rows (16 bytes each, on 16-byte boundaries), and lane 4 g + t receives
// in r[m] row g, columns 2 t (low half) and 2 t + 1 (high half). The _trans form gives column g,
// rows 2 t and 2 t + 1 instead. A constant added to an address folds into the instruction.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// Asynchronous copies from global to shared memory (cp.async, Ampere and later): copy_async_16
// starts a copy of 16 bytes (both addresses on 16-byte boundaries) without a register in
// between; copy_async_commit closes this thread's group of copies started since the last one;
// copy_async_wait<N> returns once all but this thread's N newest groups have landed. Other
// threads see them after a block_sync that follows the wait.
__device__ __forceinline__ void copy_async_16(void* shared, const void* global) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared_address(shared)),
               "l"(global)
               : "memory");
}
__device__ __forceinline__ void copy_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void copy_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// c (16 x 8, f32) += a (16 x 16, bf16) b (16 x 8, bf16). Lane 4 g + t holds a: {row g, columns
// 2t, 2t+1}, {row g + 8, the same}, {row g, columns 2t + 8, 2t + 9}, {row g + 8, the same};
// b: {rows 2t, 2t + 1 of column g}, {rows 2t + 8, 2t + 9}; c: row g at columns 2t, 2t + 1, then
// row g + 8 at the same columns (PTX ISA, mma.m16n8k16).
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats rounded to bf16 (nearest even), lo in the low half: one operand register.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  uint32_t u;
  memcpy(&u, &v, sizeof(u));
  return u;
}

}  // namespace moe::kernels::cuda
