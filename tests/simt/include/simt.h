// simt: CUDA kernels run on the CPU, for tests (the CUDA backend checked op by op where no GPU is).
// Each CUDA thread of a block is a fiber (Boost.Context) on the calling thread; the blocks of a grid run
// one after another. A fiber runs until it reaches a barrier (__syncthreads, __syncwarp, a warp
// collective); when the barrier's last thread arrives, the others go on, in thread order. What this
// catches: wrong indexing and fragment layouts, launch configurations CUDA refuses, a barrier that
// not every thread reaches (deadlock, named), lanes of a warp at different collectives, a shuffle
// reading a lane that exited, a missing
// __syncthreads that lets a thread read shared memory before a later-scheduled thread wrote it
// (OOMB_SIMT_ORDER=reverse schedules the other way round), and, with ASan, reads or writes past a
// buffer. What it cannot catch: timing, real concurrency, the memory model, tensor-core rounding.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace simt {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};
// the running thread's indices and its launch's shape (CUDA's threadIdx, blockIdx, blockDim, gridDim);
// defined here (inline, constant-initialized), so no TLS wrapper is called (GCC's UBSan took an
// extern one's missing initializer for a null pointer)
inline thread_local Dim3 thread_idx, block_idx, block_dim, grid_dim;
inline thread_local int running_lane = 0;  // the running thread's lane in its warp (lane())

// A kernel's body (one thread's run) and its argument.
using Body = void (*)(void* arg);
// "" or why CUDA would refuse the launch (block or grid dimensions, shared memory above the kernel's limit)
std::string refusal(const void* kernel, Dim3 grid, Dim3 block, size_t shared);
// Runs body(arg) for every thread of every block. Returns "" or refusal()'s reason, running nothing.
std::string launch(const void* kernel, Dim3 grid, Dim3 block, size_t shared, Body body, void* arg);
// cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes): "" or why not
std::string set_max_shared(const void* kernel, size_t bytes);
void* dynamic_shared();  // the block's dynamic shared memory (extern __shared__)
// OOMB_SIMT_ORDER=reverse: a block's threads, a grid's blocks and the streams a synchronizing call
// drains run last to first (each order hides the races the other shows)
bool reverse_order();

void sync_block();  // __syncthreads
void sync_warp();   // __syncwarp
inline int lane() { return running_lane; }  // the running thread's lane in its warp
int warp_lanes();   // lanes of its warp (32, or fewer in a block's last partial warp)
// A warp collective: every live lane gives `bytes` (at most 64) and gets all lanes' (lane i's at
// i * bytes); lanes that exited before it gave nothing (their bit in `valid` clear), and reading
// one of those dies, naming it.
[[noreturn]] void read_exited_lane(int src);  // dies, naming the lane and the reader
struct Exchanged {
  const void* data;
  uint32_t valid;
  const void* from(int src, size_t bytes) const {
    if (!(valid >> src & 1)) read_exited_lane(src);
    return static_cast<const unsigned char*>(data) + size_t(src) * bytes;
  }
};
Exchanged exchange(const void* v, size_t bytes);
template <class T>
struct ExchangedOf : Exchanged {
  const T& operator[](int src) const { return *static_cast<const T*>(from(src, sizeof(T))); }
  const T* all() const { return static_cast<const T*>(data); }
};
template <class T>
ExchangedOf<T> exchange(const T& v) {
  static_assert(sizeof(T) <= 64);
  return {exchange(&v, sizeof(T))};
}
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 as the PTX ISA defines its fragments: c += a b
void mma_m16n8k16_bf16(float c[4], const uint32_t a[4], const uint32_t b[2]);
// ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16: lane l gives the address of row l % 8 of matrix
// l / 8 (16-byte aligned, or simt dies naming it) and gets in r[i] matrix i's fragment: (row l / 4,
// columns 2 (l % 4) and + 1), or with trans (rows 2 (l % 4) and + 1, column l / 4), the first in the
// low half
void ldmatrix_x4(uint32_t r[4], const void* row, bool trans);

}  // namespace simt
