// simt itself (tests/simt): that what it says it catches, it catches, each against a small kernel
// written here. The CUDA backend's tests run on it (simt.*); these keep its checks honest.
#include <gtest/gtest.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cuda/cudnn/cudnn_sdpa.h"
#include "backend/cuda/launch.cuh"
#include "core/dtype.h"

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

// oomb's allow_shared: a refusal is an error naming the kernel, its bytes and the device's most, and it is
// taken, so that the next launch's check does not report it as its own
TEST(Simt, SharedMemoryAboveTheDevicesMostIsNamedWhenAskedFor) {
  cudaGetLastError();
  try {
    oomb::cuda::k::allow_shared(neighbour_k, size_t(1) << 20, "the neighbour kernel");
    FAIL() << "1 MiB of shared memory per block was allowed";
  } catch (const oomb::Error& e) {
    EXPECT_NE(std::string(e.what()).find("the neighbour kernel needs 1048576 B of shared memory per block"),
              std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("allows 232448 B"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_NO_THROW(oomb::cuda::k::allow_shared(neighbour_k, size_t(64) << 10, "the neighbour kernel"));
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

// Timing events: an elapsed time only once both records are reached (cudaErrorNotReady before),
// the later record no earlier than the first; an event made without timing has none to give.
TEST(Simt, EventsTimeWhenTheirStreamReachesThem) {
  cudaStream_t s;
  cudaStreamCreate(&s);
  cudaEvent_t a, b, untimed;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming);
  int* d = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&d), 128);
  float ms = -1;
  EXPECT_EQ(cudaEventElapsedTime(&ms, a, b), cudaErrorInvalidResourceHandle) << "never recorded";
  cudaEventRecord(a, s);
  launch(read_k, 1, 32, 0, s, d, d);
  cudaEventRecord(b, s);
  cudaEventRecord(untimed, s);
  EXPECT_EQ(cudaEventElapsedTime(&ms, a, b), cudaErrorNotReady) << "the stream has not reached them";
  cudaEventSynchronize(b);
  ASSERT_EQ(cudaEventElapsedTime(&ms, a, b), cudaSuccess);
  EXPECT_GE(ms, 0);
  EXPECT_EQ(cudaEventElapsedTime(&ms, a, untimed), cudaErrorInvalidResourceHandle);
  cudaGetLastError();
  cudaFree(d);
  for (cudaEvent_t e : {a, b, untimed}) cudaEventDestroy(e);
  cudaStreamDestroy(s);
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

// ldmatrix .x4 (and .trans) feeding mma: D = A B + 1 for A (16 x 16) and B (16 x 16, two n-tiles of
// 8) in shared memory, rows padded to 24 elements (48 bytes, so every row starts 16-byte aligned).
// The row addresses follow the PTX ISA: lane l gives row l % 8 of matrix l / 8, and matrix i lands
// in register i; the matrices are picked so the registers are mma's fragments: A's (rows +8, then
// columns +8), B's from B^T stored row-major (n, k) without trans, and from B stored row-major
// (k, n) with trans. Both B paths must give the float64 product.
__global__ void ldmatrix_mma_k(const float* A, const float* B, float* D, int trans_b, int misalign) {
  OOMB_DYNAMIC_SHARED(__nv_bfloat16, s);
  constexpr int ld = 24;
  __nv_bfloat16 *sA = s, *sB = s + 16 * ld;  // sB: B^T (n, k), or with trans_b B (k, n)
  const int lane = int(threadIdx.x), m = lane >> 3, r = lane & 7;
  for (int i = lane; i < 256; i += 32) {
    const int row = i / 16, col = i % 16;
    sA[row * ld + col] = __float2bfloat16_rn(A[i]);
    sB[row * ld + col] = __float2bfloat16_rn(trans_b ? B[i] : B[col * 16 + row]);
  }
  __syncthreads();
  uint32_t a[4], b[4];
  // A's register i: rows + 8 (i odd), columns + 8 (i >= 2)
  simt::ldmatrix_x4(a, sA + (r + 8 * (m & 1)) * ld + 8 * (m >> 1) + misalign, false);
  if (trans_b)  // B (k, n): register i holds k + 8 (i odd) of n-tile i / 2
    simt::ldmatrix_x4(b, sB + (r + 8 * (m & 1)) * ld + 8 * (m >> 1), true);
  else  // B^T (n, k): register i holds k + 8 (i odd) of n-tile i / 2
    simt::ldmatrix_x4(b, sB + (r + 8 * (m >> 1)) * ld + 8 * (m & 1), false);
  const int g = lane >> 2, t = lane & 3;
  for (int n = 0; n < 2; ++n) {
    float c[4] = {1, 1, 1, 1};
    simt::mma_m16n8k16_bf16(c, a, b + 2 * n);
    for (int i = 0; i < 4; ++i) D[(g + 8 * (i >> 1)) * 16 + 8 * n + 2 * t + (i & 1)] = c[i];
  }
}

TEST(Simt, LdmatrixFeedsMmaAsThePtxIsaLaysItOut) {
  std::vector<float> A(256), B(256), D(256);
  for (int i = 0; i < 256; ++i) A[size_t(i)] = float((i * 7) % 13 - 6) / 4;  // exact in bf16
  for (int i = 0; i < 256; ++i) B[size_t(i)] = float((i * 5) % 11 - 5) / 2;
  float *dA, *dB, *dD;
  cudaMalloc(reinterpret_cast<void**>(&dA), 1024);
  cudaMalloc(reinterpret_cast<void**>(&dB), 1024);
  cudaMalloc(reinterpret_cast<void**>(&dD), 1024);
  cudaMemcpy(dA, A.data(), 1024, cudaMemcpyHostToDevice);
  cudaMemcpy(dB, B.data(), 1024, cudaMemcpyHostToDevice);
  for (int trans = 0; trans < 2; ++trans) {
    SCOPED_TRACE(trans ? "B by ldmatrix .trans" : "B^T by ldmatrix");
    cudaMemset(dD, 0, 1024);
    launch(ldmatrix_mma_k, 1, 32, 2 * 16 * 24 * 2, nullptr, dA, dB, dD, trans, 0);
    cudaMemcpy(D.data(), dD, 1024, cudaMemcpyDeviceToHost);
    for (int r = 0; r < 16; ++r)
      for (int n = 0; n < 16; ++n) {
        double want = 1;
        for (int k = 0; k < 16; ++k) want += double(A[size_t(r * 16 + k)]) * B[size_t(k * 16 + n)];
        EXPECT_EQ(D[size_t(r * 16 + n)], float(want)) << r << ", " << n;
      }
  }
  // a row address off the 16-byte grid: CUDA's ldmatrix is undefined there; simt names it
  EXPECT_DEATH(launch(ldmatrix_mma_k, 1, 32, 2 * 16 * 24 * 2, nullptr, dA, dB, dD, 0, 2);
               cudaStreamSynchronize(nullptr),
               "ldmatrix row address .* is not 16-byte aligned");
  cudaFree(dA);
  cudaFree(dB);
  cudaFree(dD);
}

// cuDNN's attention on simt (tests/simt/cudnn_sdpa.cpp) against attention written out here in float64:
// forward then backward on a stream, GQA and causal (bottom-right), o and dq in fp32 and in bf16. q
// arrives by a copy issued on the same stream just before the forward, so the forward must run in
// stream order to see it; outputs are rounded once to their type, and touch nothing past their end.
// (Device memory is host memory on simt: the test reads it directly, before and after the stream runs.)
namespace cudnn = oomb::cuda::cudnn;

template <class T>
T* device(size_t n, size_t guard = 0) {
  void* p = nullptr;
  cudaMalloc(&p, (n + guard) * sizeof(T));
  std::memset(p, 0x5A, (n + guard) * sizeof(T));
  return static_cast<T*>(p);
}

bool is_bf16(float f) { return oomb::bf16_to_f32(oomb::f32_to_bf16(f)) == f; }

void sdpa_matches_attention(oomb::sdpa::DType out) {
  using oomb::bf16_to_f32;
  using oomb::f32_to_bf16;
  const bool bf = out == oomb::sdpa::DType::bf16;
  oomb::sdpa::Shape sh;
  sh.heads = 4, sh.kv_heads = 2, sh.q_len = 5, sh.kv_len = 9, sh.dim = 8, sh.causal = true, sh.out = out;
  sh.scale = float(1 / std::sqrt(8.0));
  const int64_t H = sh.heads, G = sh.heads / sh.kv_heads, KH = sh.kv_heads, Q = sh.q_len, K = sh.kv_len, D = sh.dim;
  const size_t nq = size_t(Q * H * D), nk = size_t(K * KH * D), nrow = size_t(Q * H);
  uint32_t seed = 12345;
  auto rnd = [&] {
    seed = seed * 1664525u + 1013904223u;
    return float(int(seed >> 8) % 2001 - 1000) / 500.0f;
  };
  std::vector<uint16_t> q(nq), k(nk), v(nk);
  for (auto* t : {&q, &k, &v})
    for (auto& x : *t) x = f32_to_bf16(rnd());
  std::vector<float> d_o(nq);
  for (auto& x : d_o) x = bf ? bf16_to_f32(f32_to_bf16(rnd())) : rnd();
  const size_t es = bf ? 2 : 4;  // o, do, dq
  auto out_at = [&](const void* p, size_t i) {
    return bf ? double(bf16_to_f32(static_cast<const uint16_t*>(p)[i])) : double(static_cast<const float*>(p)[i]);
  };

  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  cudnn::Sdpa sdpa(sh, s);
  // dS in bf16, (queries, heads, keys) each length rounded up to 64, GQA's dk, dv per head in bf16,
  // 256 B: as cuDNN 9.19's engine 6 asks for o, do, dq in bf16
  EXPECT_EQ(sdpa.workspace_bytes(), size_t(64 * 4 * 64 * 2 + 2 * 4 * 9 * 8 * 2 + 256));
  const size_t ws_bytes = sdpa.workspace_bytes();
  auto *dev_q = device<uint16_t>(nq), *dev_k = device<uint16_t>(nk), *dev_v = device<uint16_t>(nk);
  auto *dk = device<uint16_t>(nk), *dv = device<uint16_t>(nk);
  auto* dev_do = device<unsigned char>(nq * es);
  auto *o = device<unsigned char>(nq * es, 16 * es), *dq = device<unsigned char>(nq * es, 16 * es);
  auto *stats = device<float>(nrow), *ssum = device<float>(nrow);
  auto* ws = device<unsigned char>(ws_bytes);
  std::memset(ws, 0, ws_bytes);
  uint16_t* pinned_q = nullptr;
  cudaHostAlloc(reinterpret_cast<void**>(&pinned_q), nq * 2, cudaHostAllocDefault);
  std::memcpy(pinned_q, q.data(), nq * 2);
  std::vector<unsigned char> do_bytes(nq * es);
  for (size_t i = 0; i < nq; ++i) {
    if (bf) {
      const uint16_t h = f32_to_bf16(d_o[i]);
      std::memcpy(&do_bytes[2 * i], &h, 2);
    } else {
      std::memcpy(&do_bytes[4 * i], &d_o[i], 4);
    }
  }
  cudaMemcpy(dev_k, k.data(), nk * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dev_v, v.data(), nk * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dev_do, do_bytes.data(), nq * es, cudaMemcpyHostToDevice);
  cudaMemset(dev_q, 0, nq * 2);  // q as it was: zeros, until the copy on s runs

  cudaMemcpyAsync(dev_q, pinned_q, nq * 2, cudaMemcpyHostToDevice, s);
  sdpa.forward(dev_q, dev_k, dev_v, o, stats, ws);
  EXPECT_EQ(o[0], 0x5A) << "the forward ran when issued, not when its stream got there";
  EXPECT_EQ(ws[0], 0) << "the forward ran when issued, not when its stream got there";
  sdpa.backward(dev_q, dev_k, dev_v, o, dev_do, stats, dq, dk, dv, ssum, ws);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  for (size_t i = 0; i < std::min<size_t>(ws_bytes, 4096); ++i) {
    ASSERT_EQ(ws[i], 0xCD) << "workspace byte " << i;
  }
  if (ws_bytes > 4096) {
    EXPECT_EQ(ws[4096], 0) << "more than the first 4096 bytes of the workspace scribbled over";
  }
  for (size_t i = nq * es; i < nq * es + 16 * es; ++i) {
    EXPECT_EQ(o[i], 0x5A) << "o written past its end, byte " << i;
    EXPECT_EQ(dq[i], 0x5A) << "dq written past its end, byte " << i;
  }

  // attention in float64, from the bf16 inputs (and, for the backward, the o and stats it was given)
  auto qf = [&](int64_t i, int64_t h, int64_t d) { return double(bf16_to_f32(q[size_t((i * H + h) * D + d)])); };
  auto kf = [&](int64_t j, int64_t h, int64_t d) { return double(bf16_to_f32(k[size_t((j * KH + h / G) * D + d)])); };
  auto vf = [&](int64_t j, int64_t h, int64_t d) { return double(bf16_to_f32(v[size_t((j * KH + h / G) * D + d)])); };
  auto seen = [&](int64_t i, int64_t j) { return j <= i + K - Q; };
  std::vector<double> p(size_t(H * Q * K), 0.0), want_dq(nq, 0.0), want_dk(nk, 0.0), want_dv(nk, 0.0);
  auto P = [&](int64_t h, int64_t i, int64_t j) -> double& { return p[size_t((h * Q + i) * K + j)]; };
  auto score = [&](int64_t h, int64_t i, int64_t j) {
    double dot = 0;
    for (int64_t d = 0; d < D; ++d) dot += qf(i, h, d) * kf(j, h, d);
    return double(sh.scale) * dot;
  };
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < Q; ++i) {
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < K; ++j)
        if (seen(i, j)) mx = std::max(mx, score(h, i, j));
      for (int64_t j = 0; j < K; ++j)
        if (seen(i, j)) sum += std::exp(score(h, i, j) - mx);
      const double lse = mx + std::log(sum);
      const float got_lse = stats[size_t(i * H + h)];
      EXPECT_NEAR(got_lse, lse, 1e-6 * std::abs(lse) + 1e-6) << "stats, head " << h << " row " << i;
      double psum = 0;  // the softmax that stats implies sums to 1
      for (int64_t j = 0; j < K; ++j)
        if (seen(i, j)) psum += std::exp(score(h, i, j) - double(got_lse));
      EXPECT_NEAR(psum, 1.0, 1e-6) << "head " << h << " row " << i;
      for (int64_t j = 0; j < K; ++j) P(h, i, j) = seen(i, j) ? std::exp(score(h, i, j) - lse) : 0.0;
      auto pb = [&](int64_t j) { return std::exp(score(h, i, j) - double(got_lse)); };  // the backward's p
      double dsum = 0;  // rowsum(do * o), with o as the backward read it
      for (int64_t d = 0; d < D; ++d) {
        const size_t at = size_t((i * H + h) * D + d);
        double want = 0;
        for (int64_t j = 0; j < K; ++j) want += P(h, i, j) * vf(j, h, d);
        const double got = out_at(o, at);
        EXPECT_NEAR(got, want, (bf ? 1.0 / 256 : 1e-6) * std::abs(want) + 1e-7) << "o " << h << ", " << i << ", " << d;
        if (bf) {
          EXPECT_EQ(double(bf16_to_f32(f32_to_bf16(float(want)))), got) << "o rounded once, to nearest even";
        }
        dsum += double(d_o[at]) * got;
      }
      EXPECT_NEAR(ssum[size_t(i * H + h)], dsum, 1e-6 * std::abs(dsum) + 1e-6) << "softmax_sum " << h << ", " << i;
      for (int64_t j = 0; j < K; ++j) {
        if (!seen(i, j)) continue;
        double dp = 0;
        for (int64_t d = 0; d < D; ++d) dp += double(d_o[size_t((i * H + h) * D + d)]) * vf(j, h, d);
        const double ds = pb(j) * (dp - dsum) * double(sh.scale);
        for (int64_t d = 0; d < D; ++d) {
          want_dq[size_t((i * H + h) * D + d)] += ds * kf(j, h, d);
          want_dk[size_t((j * KH + h / G) * D + d)] += ds * qf(i, h, d);
          want_dv[size_t((j * KH + h / G) * D + d)] += pb(j) * double(d_o[size_t((i * H + h) * D + d)]);
        }
      }
    }
  for (size_t i = 0; i < nq; ++i) {
    const double got = out_at(dq, i);
    EXPECT_NEAR(got, want_dq[i], (bf ? 1.0 / 256 : 1e-6) * std::abs(want_dq[i]) + 1e-7) << "dq " << i;
    if (bf) {
      EXPECT_TRUE(is_bf16(float(got))) << "dq " << i;
    }
  }
  for (size_t i = 0; i < nk; ++i) {
    EXPECT_NEAR(bf16_to_f32(dk[i]), want_dk[i], std::abs(want_dk[i]) / 256 + 1e-7) << "dk " << i;
    EXPECT_NEAR(bf16_to_f32(dv[i]), want_dv[i], std::abs(want_dv[i]) / 256 + 1e-7) << "dv " << i;
  }

  EXPECT_THROW(sdpa.forward(dev_q, dev_k, dev_v, o, stats, nullptr), std::exception) << "a null workspace";
  setenv("OOMB_SIMT_CUDNN_WORKSPACE", "123", 1);
  EXPECT_EQ(sdpa.workspace_bytes(), 123u);
  unsetenv("OOMB_SIMT_CUDNN_WORKSPACE");
  cudaStreamDestroy(s);
  for (void* ptr : std::initializer_list<void*>{dev_q, dev_k, dev_v, dev_do, o, dq, dk, dv, stats, ssum, ws}) cudaFree(ptr);
  cudaFreeHost(pinned_q);
}

TEST(Simt, CudnnAttentionStandInIsAttentionInStreamOrder) {
  std::string why;
  EXPECT_TRUE(cudnn::available(&why)) << why;
  EXPECT_EQ(cudnn::version(), "simt (the graph interpreter)");
  EXPECT_EQ(cudnn::version_code(), 91900u);
  EXPECT_THROW(cudnn::deviceprop_json(), std::exception);
  oomb::sdpa::Shape bad;
  bad.heads = 3, bad.kv_heads = 2, bad.q_len = 1, bad.kv_len = 1, bad.dim = 8;
  EXPECT_THROW(cudnn::Sdpa(bad, nullptr), std::invalid_argument);
  {
    SCOPED_TRACE("out f32");
    sdpa_matches_attention(oomb::sdpa::DType::f32);
  }
  {
    SCOPED_TRACE("out bf16");
    sdpa_matches_attention(oomb::sdpa::DType::bf16);
  }
}

}  // namespace
