// simt itself (tests/simt): that what it says it catches, it catches, each against a small kernel
// written here. The CUDA backend's tests run on it (simt.*); these keep its checks honest.
#include <gtest/gtest.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstring>
#include <vector>

#include "backend/cuda/launch.cuh"

using oomb::cuda::k::launch;

namespace {

// Each thread writes its slot, then reads its neighbour's: with the barrier between, or without.
__global__ void neighbour_k(int* out, bool barrier) {
  OOMB_DYNAMIC_SHARED(int, s);
  const int t = int(threadIdx.x), n = int(blockDim.x);
  s[t] = t + 1;
  if (barrier) __syncthreads();
  out[blockIdx.x * n + t] = s[(t + 1) % n];
}

std::vector<int> run_neighbour(bool barrier, unsigned blocks = 2, unsigned threads = 64) {
  std::vector<int> out(blocks * threads, 0);
  int* d = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&d), out.size() * 4);
  launch(neighbour_k, blocks, threads, threads * 4, nullptr, d, barrier);
  cudaMemcpy(out.data(), d, out.size() * 4, cudaMemcpyDeviceToHost);
  cudaFree(d);
  return out;
}

TEST(Simt, AMissingBarrierReadsWhatWasNotYetWritten) {
  const std::vector<int> with = run_neighbour(true), without = run_neighbour(false);
  for (size_t i = 0; i < with.size(); ++i) EXPECT_EQ(with[i], int(i % 64 + 1) % 64 + 1) << i;
  EXPECT_NE(with, without);  // thread t reads t + 1's slot before thread t + 1 ran: garbage
}

// static __shared__ starts as garbage in every block, not with the last block's values
__global__ void static_shared_k(int* out) {
  __shared__ int slot;
  if (blockIdx.x == 0 && threadIdx.x == 0) slot = 7;
  __syncthreads();
  if (threadIdx.x == 0) out[blockIdx.x] = slot;
}

TEST(Simt, StaticSharedMemoryStartsAsGarbageInEveryBlock) {
  int* d = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&d), 8);
  launch(static_shared_k, 2, 32, 0, nullptr, d);
  int out[2];
  cudaMemcpy(out, d, 8, cudaMemcpyDeviceToHost);
  cudaFree(d);
  EXPECT_EQ(out[0], 7);
  EXPECT_EQ(out[1], int(0xCDCDCDCD));
}

__global__ void shuffles_k(int* out) {
  const int l = int(threadIdx.x);
  out[l] = __shfl_sync(0xffffffffu, l * 10, 3, 8);          // lane 3 of each 8-lane segment
  out[32 + l] = __shfl_xor_sync(0xffffffffu, l * 10, 4, 8);  // within the segment
  out[64 + l] = __shfl_xor_sync(0xffffffffu, l * 10, 8, 8);  // an earlier segment's lane, or past it: its own
  out[96 + l] = int(__ballot_sync(0xffffffffu, l % 3 == 0));
}

TEST(Simt, ShufflesAndBallotAsCudaDefinesThem) {
  std::vector<int> out(128);
  int* d = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&d), 512);
  launch(shuffles_k, 1, 32, 0, nullptr, d);
  cudaMemcpy(out.data(), d, 512, cudaMemcpyDeviceToHost);
  cudaFree(d);
  unsigned ballot = 0;
  for (int l = 0; l < 32; l += 3) ballot |= 1u << l;
  for (int l = 0; l < 32; ++l) {
    EXPECT_EQ(out[l], ((l & ~7) + 3) * 10) << l;
    EXPECT_EQ(out[32 + l], (l ^ 4) * 10) << l;
    EXPECT_EQ(out[64 + l], ((l ^ 8) < l ? l ^ 8 : l) * 10) << l;
    EXPECT_EQ(unsigned(out[96 + l]), ballot) << l;
  }
}

// lanes 20.. exit; the rest vote (exited lanes count 0) and shuffle, reading lane `src`
__global__ void after_exit_k(int* out, int src) {
  const int l = int(threadIdx.x);
  if (l >= 20) return;
  out[l] = int(__ballot_sync(0xffffffffu, 1));
  out[32 + l] = __shfl_sync(0xffffffffu, l, src);
}

TEST(Simt, CollectivesAfterLanesExitAndReadingAnExitedLaneDies) {
  int* d = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&d), 256);
  launch(after_exit_k, 1, 32, 0, nullptr, d, 5);
  int out[64];
  cudaMemcpy(out, d, 256, cudaMemcpyDeviceToHost);
  EXPECT_EQ(unsigned(out[0]), (1u << 20) - 1);
  EXPECT_EQ(out[32 + 7], 5);
  EXPECT_DEATH(launch(after_exit_k, 1, 32, 0, nullptr, d, 21); cudaStreamSynchronize(nullptr),
               "reads lane 21 in a warp collective, which has exited");
  cudaFree(d);
}

__global__ void mismatch_k() {
  if (threadIdx.x == 0) __syncwarp();
  else (void)__shfl_sync(0xffffffffu, 1, 0);
}
// lane 0 waits for the block, the other lanes for lane 0 in a shuffle: a hang on a GPU
__global__ void deadlock_k() {
  if (threadIdx.x == 0) __syncthreads();
  else (void)__shfl_sync(0xffffffffu, 1, 0);
}

TEST(Simt, MismatchedCollectivesAndDeadlocksDie) {
  EXPECT_DEATH(launch(mismatch_k, 1, 32, 0, nullptr), "while its warp's other threads wait at");
  EXPECT_DEATH(launch(deadlock_k, 1, 32, 0, nullptr), "deadlock");
}

__global__ void nothing_k() {}

TEST(Simt, LaunchesCudaRefusesAreErrorsAndRunNothing) {
  cudaGetLastError();
  launch(nothing_k, 1, 2048, 0, nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  launch(nothing_k, dim3(1, 70000), 32, 0, nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  launch(neighbour_k, 1, 32, size_t(64) << 10, nullptr, nullptr, false);  // 64 KB without opting in
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaFuncSetAttribute(neighbour_k, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 << 10), cudaSuccess);
  std::vector<int> out(32);
  int* d = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&d), 128);
  launch(neighbour_k, 1, 32, size_t(64) << 10, nullptr, d, true);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  cudaFree(d);
}

// A stream's work waits until something needs it: another stream's kernel that does not wait for
// the copy reads the old values, one that waits reads the new; the host reading pinned memory a
// copy fills before synchronizing sees the old. (Rewriting the copy's pinned source before the copy
// stream ran would change what it copies: a first draft of this test did, and read zeros.)
__global__ void read_k(const int* src, int* dst) { dst[threadIdx.x] = src[threadIdx.x]; }

TEST(Simt, StreamsRunTheirWorkAsLateAsCudaAllows) {
  cudaStream_t copy, compute;
  cudaStreamCreate(&copy);
  cudaStreamCreate(&compute);
  cudaEvent_t done;
  cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
  int *pinned = nullptr, *back = nullptr, *a = nullptr, *b = nullptr;
  cudaHostAlloc(reinterpret_cast<void**>(&pinned), 128, cudaHostAllocDefault);
  cudaHostAlloc(reinterpret_cast<void**>(&back), 128, cudaHostAllocDefault);
  cudaMalloc(reinterpret_cast<void**>(&a), 128);
  cudaMalloc(reinterpret_cast<void**>(&b), 128);
  for (int i = 0; i < 32; ++i) pinned[i] = i + 100;
  cudaMemset(a, 0, 128);
  cudaMemcpyAsync(a, pinned, 128, cudaMemcpyHostToDevice, copy);
  launch(read_k, 1, 32, 0, compute, a, b);  // no wait: a is not yet copied
  cudaStreamSynchronize(compute);
  std::vector<int> got(32);
  back[0] = -1;
  cudaMemcpyAsync(back, b, 128, cudaMemcpyDeviceToHost, compute);
  EXPECT_EQ(back[0], -1) << "read before the stream synchronized";
  cudaStreamSynchronize(compute);
  EXPECT_EQ(back[0], 0) << "the kernel that did not wait read the copy's destination before it";
  cudaEventRecord(done, copy);
  cudaStreamWaitEvent(compute, done);
  launch(read_k, 1, 32, 0, compute, a, b);
  cudaMemcpy(got.data(), b, 128, cudaMemcpyDeviceToHost);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(got[size_t(i)], i + 100) << i;
  cudaFree(a);
  cudaFree(b);
  cudaFreeHost(pinned);
  cudaFreeHost(back);
  cudaEventDestroy(done);
  cudaStreamDestroy(copy);
  cudaStreamDestroy(compute);
}

// mma.sync m16n8k16: D = A B + C for A (16 x 16), B (16 x 8), with fragments distributed here from
// the PTX ISA's tables by register and half (written apart from simt's own lookup, which goes the
// other way: from an element to its lane).
__global__ void mma_k(const float* A, const float* B, float* D) {
  const int lane = int(threadIdx.x), g = lane >> 2, t = lane & 3;
  auto word = [](float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    uint32_t w;
    std::memcpy(&w, &v, 4);
    return w;
  };
  uint32_t a[4], b[2];
  for (int r = 0; r < 4; ++r) {  // a register r holds (row, cols 2t and 2t+1) with row g (+8 for r odd), cols +8 for r >= 2
    const int row = g + 8 * (r & 1), col = 2 * t + 8 * (r >> 1);
    a[r] = word(A[row * 16 + col], A[row * 16 + col + 1]);
  }
  for (int r = 0; r < 2; ++r) {  // b register r holds rows k = 2t, 2t+1 (+8 for r = 1) of column g
    const int k = 2 * t + 8 * r;
    b[r] = word(B[k * 8 + g], B[(k + 1) * 8 + g]);
  }
  float c[4] = {1, 1, 1, 1};
  simt::mma_m16n8k16_bf16(c, a, b);
  for (int i = 0; i < 4; ++i) D[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)] = c[i];
}

TEST(Simt, MmaFragmentsAsThePtxIsaLaysThemOut) {
  std::vector<float> A(256), B(128), D(128);
  for (int i = 0; i < 256; ++i) A[size_t(i)] = float((i * 7) % 13 - 6) / 4;  // exact in bf16
  for (int i = 0; i < 128; ++i) B[size_t(i)] = float((i * 5) % 11 - 5) / 2;
  float *dA, *dB, *dD;
  cudaMalloc(reinterpret_cast<void**>(&dA), 1024);
  cudaMalloc(reinterpret_cast<void**>(&dB), 512);
  cudaMalloc(reinterpret_cast<void**>(&dD), 512);
  cudaMemcpy(dA, A.data(), 1024, cudaMemcpyHostToDevice);
  cudaMemcpy(dB, B.data(), 512, cudaMemcpyHostToDevice);
  launch(mma_k, 1, 32, 0, nullptr, dA, dB, dD);
  cudaMemcpy(D.data(), dD, 512, cudaMemcpyDeviceToHost);
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n) {
      double want = 1;
      for (int k = 0; k < 16; ++k) want += double(A[size_t(r * 16 + k)]) * B[size_t(k * 8 + n)];
      EXPECT_EQ(D[size_t(r * 8 + n)], float(want)) << r << ", " << n;
    }
  cudaFree(dA);
  cudaFree(dB);
  cudaFree(dD);
}

}  // namespace
