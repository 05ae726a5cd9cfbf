// Sparse attention's page metadata (mean key, or Quest's per-dimension min/max, per page and kv
// head), page scores and top-K, on the device. Each output has one writer and sums or counts in a
// fixed order (no atomics): the same inputs give the same bits. The metadata equals the CPU's bit
// for bit (means: fp64 sums of the same rows, one rounding to bf16; min/max: the same comparisons
// in the same order, rounded down / up), and so does the top-K's choice.
#include "backend/cuda/bf16.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"

namespace oomb::cuda::k {

namespace {

constexpr int kThreads = 256;
constexpr unsigned kFull = 0xffffffffu;

// core/dtype.h's directed roundings: the largest bf16 <= f, the smallest >= f (NaN stays NaN)
__device__ inline uint16_t to_bf16_dir(float f, bool up) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  const bool inexact = (u & 0xffffu) != 0, negative = (u >> 31) != 0;
  return uint16_t((u >> 16) + (inexact && negative != up ? 1u : 0u));  // truncation rounds toward zero
}

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

// k: (T, G, D) f32 of tokens [t0, t0 + T); minmax: (pages, 2, G, D) bf16.
// grid (pages touched, ceil(G * D / kThreads)): one thread per (page, element); the rows in order,
// then the page's earlier bounds (the CPU's comparisons in the CPU's order)
__global__ void page_key_minmax_k(const float* k, int64_t t0, int64_t P, uint16_t* minmax, int64_t T, int64_t GD) {
  const int64_t e = int64_t(blockIdx.y) * kThreads + threadIdx.x;
  if (e >= GD) return;
  const int64_t p = t0 / P + blockIdx.x;
  const int64_t lo = p * P > t0 ? p * P : t0, hi = (p + 1) * P < t0 + T ? (p + 1) * P : t0 + T;
  float a = k[(lo - t0) * GD + e], b = a;
  for (int64_t t = lo + 1; t < hi; ++t) {
    const float x = k[(t - t0) * GD + e];
    a = x < a ? x : a;
    b = x > b ? x : b;
  }
  uint16_t *mn = minmax + p * 2 * GD + e, *mx = mn + GD;
  if (lo > p * P) {  // the page has rows before t0: their bounds are bf16 values, exact in f32
    const float a0 = from_bf16(*mn), b0 = from_bf16(*mx);
    a = a0 < a ? a0 : a;
    b = b0 > b ? b0 : b;
  }
  *mn = to_bf16_dir(a, false);
  *mx = to_bf16_dir(b, true);
}

// q: (T, H, D) f32; meta: means (pages, G, D) bf16, or with kQuest minmax (pages, 2, G, D) bf16;
// scores: (tiles, S, pages) f32.
// grid (tiles, S), kThreads threads; shared: the tile's queries summed per kv head of the choice
// (Gs x D, Gs = G when shared, else 1), with kQuest their positive parts and the rest apart
// (2 x Gs x D); then one warp per page at a time.
template <bool kQuest>
__global__ void page_scores_k(const float* q, int64_t tile, const uint16_t* meta, float* scores, int64_t T, int64_t H,
                              int64_t G, int64_t D, int64_t pages, int64_t S) {
  OOMB_DYNAMIC_SHARED(float, qs);
  const int64_t i = blockIdx.x, s = blockIdx.y, group = H / G, Gs = S == 1 ? G : 1, GsD = Gs * D;
  const int64_t t0 = i * tile, t1 = t0 + tile < T ? t0 + tile : T;
  for (int64_t e = threadIdx.x; e < GsD; e += blockDim.x) {
    const int64_t g = S == 1 ? e / D : s, d = e % D;
    float acc = 0, neg = 0;
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        const float v = q[(t * H + h) * D + d];
        if (!kQuest || v > 0)
          acc += v;
        else
          neg += v;
      }
    qs[e] = acc;
    if (kQuest) qs[GsD + e] = neg;
  }
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  for (int64_t p = warp; p < pages; p += warps) {
    float acc = 0;
    for (int64_t e = lane; e < GsD; e += 32) {
      const int64_t g = S == 1 ? e / D : s, d = e % D;
      if (kQuest) {
        const uint16_t* lo = meta + (p * 2 * G + g) * D + d;  // min; the max G x D further
        acc += qs[e] * from_bf16(lo[G * D]) + qs[GsD + e] * from_bf16(*lo);
      } else {
        acc += qs[e] * from_bf16(meta[(p * G + g) * D + d]);
      }
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(kFull, acc, o);
    if (lane == 0) scores[(i * S + s) * pages + p] = acc;
  }
}

// An order-preserving key of a score: a larger score has a larger key; NaN counts as -inf and -0
// as +0 (the CPU's comparison: equal scores tie, broken by the page).
__device__ inline uint32_t topk_key(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) u = 0xff800000u;
  if ((u & 0x7fffffffu) == 0) u = 0;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The sum of v over the block, for every thread (red: 32 ints of shared memory).
__device__ inline int block_sum(int v, int* red) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  if (lane == 0) red[warp] = v;
  __syncthreads();
  int total = 0;
  for (int w = 0; w < warps; ++w) total += red[w];
  __syncthreads();  // red is free again
  return total;
}

// How many threads before this one in the block have flag set; *total: how many in all.
__device__ inline int block_count_before(bool flag, int* red, int* total) {
  const unsigned ballot = __ballot_sync(kFull, flag);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  if (lane == 0) red[warp] = __popc(ballot);
  __syncthreads();
  int before = __popc(ballot & ((1u << lane) - 1u)), all = 0;
  for (int w = 0; w < warps; ++w) {
    before += w < warp ? red[w] : 0;
    all += red[w];
  }
  __syncthreads();
  *total = all;
  return before;
}

// scores: (tiles, S, pages) f32; chosen: (tiles, S, K) int32.
// grid (tiles, S), kThreads threads: one block per row. The K-th largest key v of the candidates
// [first, pages) by a radix select, one bit at a time from the top (each count a block sum); then
// the pages in order, each taken if its key is above v, or equal to v while fewer than the equal
// keys wanted have been taken (ties to the lower page), written in ascending order.
__global__ void page_topk_k(const float* scores, int64_t pages, int64_t first, int32_t* chosen, int64_t K) {
  __shared__ int red[32];
  const int64_t row = int64_t(blockIdx.x) * gridDim.y + blockIdx.y;
  const float* sc = scores + row * pages;
  int32_t* out = chosen + row * K;
  const int64_t n = pages - first;
  if (n <= K) {  // every candidate, then -1 (the same for every thread of the block)
    for (int64_t j = threadIdx.x; j < K; j += blockDim.x) out[j] = j < n ? int32_t(first + j) : -1;
    return;
  }
  uint32_t v = 0, mask = 0;
  int64_t need = K;  // v is the need-th largest key of those equal to v under mask
  for (int bit = 31; bit >= 0; --bit) {
    const uint32_t b = 1u << bit;
    int c = 0;
    for (int64_t p = first + threadIdx.x; p < pages; p += blockDim.x) {
      const uint32_t key = topk_key(sc[p]);
      c += (key & mask) == v && (key & b) != 0;
    }
    const int64_t above = block_sum(c, red);
    if (above >= need)
      v |= b;
    else
      need -= above;
    mask |= b;
  }
  // K - need keys above v, and need of the keys equal to v: the first ones
  int64_t eq_seen = 0, at = 0;
  for (int64_t p0 = first; p0 < pages; p0 += blockDim.x) {
    const int64_t p = p0 + threadIdx.x;
    const uint32_t key = p < pages ? topk_key(sc[p]) : 0;
    const bool gt = p < pages && key > v, eq = p < pages && key == v;
    int eq_total = 0, taken = 0;
    const int eq_before = block_count_before(eq, red, &eq_total);
    const bool take = gt || (eq && eq_seen + eq_before < need);
    const int at_before = block_count_before(take, red, &taken);
    if (take) out[at + at_before] = int32_t(p);
    eq_seen += eq_total;
    at += taken;
  }
}

}  // namespace

void page_key_means(const float* k, int64_t t0, int64_t page_size, uint16_t* means, int64_t T, int64_t G, int64_t D,
                    cudaStream_t s) {
  if (T == 0) return;
  const int64_t touched = (t0 + T - 1) / page_size - t0 / page_size + 1, GD = G * D;
  launch(page_key_means_k, dim3(unsigned(touched), unsigned((GD + kThreads - 1) / kThreads)), kThreads, 0, s,
      k, t0, page_size, means, T, GD);
}

void page_key_minmax(const float* k, int64_t t0, int64_t page_size, uint16_t* minmax, int64_t T, int64_t G, int64_t D,
                     cudaStream_t s) {
  if (T == 0) return;
  const int64_t touched = (t0 + T - 1) / page_size - t0 / page_size + 1, GD = G * D;
  launch(page_key_minmax_k, dim3(unsigned(touched), unsigned((GD + kThreads - 1) / kThreads)), kThreads, 0, s,
      k, t0, page_size, minmax, T, GD);
}

void page_scores(const float* q, int64_t tile, const uint16_t* means, float* scores, int64_t T, int64_t H, int64_t G,
                 int64_t D, int64_t pages, int64_t S, cudaStream_t s) {
  const int64_t tiles = (T + tile - 1) / tile;
  if (tiles == 0 || pages == 0) return;
  const size_t smem = size_t((S == 1 ? G : 1) * D) * sizeof(float);
  launch(page_scores_k<false>, dim3(unsigned(tiles), unsigned(S)), kThreads, smem, s, q, tile, means, scores, T, H,
         G, D, pages, S);
}

void page_quest_scores(const float* q, int64_t tile, const uint16_t* minmax, float* scores, int64_t T, int64_t H,
                       int64_t G, int64_t D, int64_t pages, int64_t S, cudaStream_t s) {
  const int64_t tiles = (T + tile - 1) / tile;
  if (tiles == 0 || pages == 0) return;
  const size_t smem = size_t(2 * (S == 1 ? G : 1) * D) * sizeof(float);
  launch(page_scores_k<true>, dim3(unsigned(tiles), unsigned(S)), kThreads, smem, s, q, tile, minmax, scores, T, H,
         G, D, pages, S);
}

void page_topk(const float* scores, int64_t tiles, int64_t S, int64_t pages, int64_t first, int32_t* chosen, int64_t K,
               cudaStream_t s) {
  if (tiles == 0 || S == 0) return;
  launch(page_topk_k, dim3(unsigned(tiles), unsigned(S)), kThreads, 0, s, scores, pages, first, chosen, K);
}

}  // namespace oomb::cuda::k
