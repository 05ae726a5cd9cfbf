// Sparse attention's page metadata (mean key per page and kv head) and page scores, on the device.
// Each output has one writer and sums in a fixed order: the same inputs give the same bits. The
// metadata's means equal the CPU's (fp64 sums of the same rows, then one rounding to bf16).
#include "backend/cuda/kernels.h"

namespace oomb::cuda::k {

namespace {

constexpr int kThreads = 256;
constexpr unsigned kFull = 0xffffffffu;

__device__ inline uint16_t to_bf16(float f) {  // core/dtype.h's rounding, as kernels_basic.cu
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
__device__ inline float from_bf16(uint16_t h) { return __uint_as_float(uint32_t(h) << 16); }

// grid (pages touched, ceil(G * D / kThreads)): one thread per (page, element), rows in order
__global__ void page_key_means_k(const float* k, int64_t t0, int64_t P, uint16_t* means, int64_t T, int64_t GD) {
  const int64_t e = int64_t(blockIdx.y) * kThreads + threadIdx.x;
  if (e >= GD) return;
  const int64_t p = t0 / P + blockIdx.x;
  const int64_t lo = p * P > t0 ? p * P : t0, hi = (p + 1) * P < t0 + T ? (p + 1) * P : t0 + T;
  const int64_t r = lo - p * P, n = hi - lo;  // rows of the page before t0, rows written now
  double sum = 0;
  for (int64_t t = lo; t < hi; ++t) sum += double(k[(t - t0) * GD + e]);
  uint16_t* m = means + p * GD + e;
  const double before = r > 0 ? double(from_bf16(*m)) * double(r) : 0.0;
  *m = to_bf16(float((before + sum) / double(r + n)));
}

// grid (tiles, S), kThreads threads; shared: the tile's queries summed per kv head (Gs x D,
// Gs = G when shared, else 1), then one warp per page at a time.
__global__ void page_scores_k(const float* q, int64_t tile, const uint16_t* means, float* scores, int64_t T,
                              int64_t H, int64_t G, int64_t D, int64_t pages, int64_t S) {
  extern __shared__ float qs[];
  const int64_t i = blockIdx.x, s = blockIdx.y, group = H / G, Gs = S == 1 ? G : 1;
  const int64_t t0 = i * tile, t1 = t0 + tile < T ? t0 + tile : T;
  for (int64_t e = threadIdx.x; e < Gs * D; e += blockDim.x) {
    const int64_t g = S == 1 ? e / D : s, d = e % D;
    float acc = 0;
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t h = g * group; h < (g + 1) * group; ++h) acc += q[(t * H + h) * D + d];
    qs[e] = acc;
  }
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  for (int64_t p = warp; p < pages; p += warps) {
    float acc = 0;
    for (int64_t e = lane; e < Gs * D; e += 32) {
      const int64_t g = S == 1 ? e / D : s, d = e % D;
      acc += qs[e] * from_bf16(means[(p * G + g) * D + d]);
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(kFull, acc, o);
    if (lane == 0) scores[(i * S + s) * pages + p] = acc;
  }
}

}  // namespace

void page_key_means(const float* k, int64_t t0, int64_t page_size, uint16_t* means, int64_t T, int64_t G, int64_t D,
                    cudaStream_t s) {
  if (T == 0) return;
  const int64_t touched = (t0 + T - 1) / page_size - t0 / page_size + 1, GD = G * D;
  page_key_means_k<<<dim3(unsigned(touched), unsigned((GD + kThreads - 1) / kThreads)), kThreads, 0, s>>>(
      k, t0, page_size, means, T, GD);
}

void page_scores(const float* q, int64_t tile, const uint16_t* means, float* scores, int64_t T, int64_t H, int64_t G,
                 int64_t D, int64_t pages, int64_t S, cudaStream_t s) {
  const int64_t tiles = (T + tile - 1) / tile;
  if (tiles == 0 || pages == 0) return;
  const size_t smem = size_t((S == 1 ? G : 1) * D) * sizeof(float);
  page_scores_k<<<dim3(unsigned(tiles), unsigned(S)), kThreads, smem, s>>>(q, tile, means, scores, T, H, G, D, pages,
                                                                           S);
}

}  // namespace oomb::cuda::k
