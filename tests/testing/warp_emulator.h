// A host emulation of the warp primitives of kernels/cuda/warp_mma.cuh, for CPU tests of the
// tensor-core kernels written against them (kernels/cuda/flash_attention_kernels.cuh): the
// kernel's own text runs on the CPU, one fiber per GPU thread, with the PTX ISA's semantics for
// ldmatrix (.x4, .trans) and mma.sync.m16n8k16 (bf16 operands, f32 accumulators), cp.async
// (a destination is NaN from the copy's start until its thread's wait covers it), the xor
// shuffle and the block barrier. It checks what the hardware would trap on or leave undefined:
// a collective that not all 32 lanes of a warp reach together (divergence), a barrier that some
// threads of the block never reach, an ldmatrix row address outside the block's shared memory
// or off a 16-byte boundary. Shared memory starts as NaN bits in every block, so a read of
// anything the kernel did not write shows in its results.
//
// It emulates the instructions' results, not their timing or their order of f32 sums inside a
// product (its own order: ascending k, one rounding per multiply-add). Warps advance at
// different rates between barriers (one collective in every 1 to 4 turns, the first warps
// fastest in even blocks and the last in odd ones), so a missing block_sync between one warp's
// reads of shared memory and another's writes shows as wrong results. Each fiber's stack has a
// guard page; a kernel that loops without collectives is not interrupted (the test's timeout
// ends it). A test of a kernel through it checks its index arithmetic, its barriers and its
// arithmetic's rounding points; only a GPU run checks the instructions themselves.
//
// Use: include this header, then `namespace <the kernels' namespace> { using namespace
// moe::testing::emu; }`, then the kernels' header; run a kernel with run_grid.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "base/dtype.h"

// The CUDA qualifiers the kernels' text uses, as host C++ (a host compiler has none of them).
#ifndef __CUDACC__
#define __device__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(...)
#endif

namespace moe::testing::emu {

struct Grid {
  int x = 1, y = 1;
};

// Runs kernel() once for each of `threads` threads (a multiple of 32, at most 1024) of every block
// of `grid`, blocks one after another, with `shared_bytes` of shared memory per block. Returns ""
// or the first fault (which block, which thread, what), after which that block is abandoned.
std::string run_grid(Grid grid, int threads, size_t shared_bytes,
                     const std::function<void()>& kernel);

// --- The primitives, callable only inside run_grid's kernel ---
int thread_x();
int block_x();
int block_y();
int grid_y();
unsigned char* dynamic_shared();
void block_sync();
float shfl_xor(float v, int mask);
// A shared-memory address as the kernels pass it to ldmatrix: its offset in the block's shared
// memory (a fault, and 0, outside it).
uint32_t shared_address(const void* p);
// cp.async: the destination holds NaN bits from the start of the copy until this thread's
// copy_async_wait covers its group, when the copy is carried out (a kernel that reads it before
// its wait, or starts a copy into a tile another warp still reads, gets NaNs in its results).
void copy_async_16(void* shared, const void* global);
void copy_async_commit();
void copy_async_wait_groups(int newest_left);
template <int N>
void copy_async_wait() {
  copy_async_wait_groups(N);
}
void ldmatrix_x4(uint32_t (&r)[4], uint32_t address);
void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t address);
void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
uint32_t pack_bf16(float lo, float hi);

}  // namespace moe::testing::emu
