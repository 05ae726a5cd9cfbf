// Embedding, RMSNorm, RoPE, SwiGLU / GeGLU, elementwise ops and conversions, reductions and optimizer updates.
#include <cuda_bf16.h>

#include <algorithm>

#include "backend/cuda/bf16.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"

namespace oomb::cuda::k {

namespace {

constexpr int kThreads = 256;
inline unsigned blocks_for(int64_t n, int threads = kThreads) { return unsigned((n + threads - 1) / threads); }

// Block-wide sum in fp64 with a fixed tree: the same order on every run.
__device__ double block_sum(double v) {
  __shared__ double part[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // part[] may still be read by a previous call
  if (lane == 0) part[warp] = v;
  __syncthreads();
  const int nw = (blockDim.x + 31) >> 5;
  double r = lane < nw ? part[lane] : 0.0;
  for (int o = 16; o > 0; o >>= 1) r += __shfl_xor_sync(0xffffffffu, r, o);
  return r;  // every thread holds the total
}

// embed: out (T, d); grid T
__global__ void embedding_fwd_k(const int32_t* ids, const float* table, float* out, int64_t d) {
  const int64_t t = blockIdx.x;
  const float* row = table + int64_t(ids[t]) * d;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) out[t * d + c] = row[c];
}

// One block per token; only the first token of each id works, adding every later token of that id
// in token order (the CPU backend's order per element). O(T^2) id comparisons, T a chunk.
__global__ void embedding_bwd_k(const int32_t* ids, const float* dout, float* dtable, int64_t T, int64_t d,
                                int32_t skip) {
  const int64_t t = blockIdx.x;
  const int32_t id = ids[t];
  if (id == skip) return;  // the whole block: transformers' padding_idx row takes nothing
  __shared__ int first;
  if (threadIdx.x == 0) first = 1;
  __syncthreads();
  for (int64_t u = threadIdx.x; u < t; u += blockDim.x)
    if (ids[u] == id) first = 0;  // benign race: every writer writes 0
  __syncthreads();
  if (!first) return;
  float* row = dtable + int64_t(id) * d;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    float acc = row[c];
    for (int64_t u = t; u < T; ++u)
      if (ids[u] == id) acc += dout[u * d + c];
    row[c] = acc;
  }
}

// An output element: the f32 value, or it rounded to bf16 (cast's bits).
__device__ inline void put(float* o, int64_t i, float v) { o[i] = v; }
__device__ inline void put(uint16_t* o, int64_t i, float v) { o[i] = to_bf16(v); }
// An input element as fp32.
__device__ inline float widen(float x) { return x; }
__device__ inline float widen(uint16_t h) { return from_bf16(h); }

// grid T; y: float or uint16_t (bf16)
template <typename Out>
__global__ void rmsnorm_fwd_k(const float* x, const float* w, float off, float eps, Out* y, float* rstd, int64_t d) {
  const int64_t t = blockIdx.x;
  const float* xr = x + t * d;
  double ss = 0;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) ss += double(xr[i]) * xr[i];
  ss = block_sum(ss);
  const float r = float(1.0 / sqrt(ss / double(d) + eps));
  if (threadIdx.x == 0) rstd[t] = r;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) put(y, t * d + i, xr[i] * r * (w[i] + off));
}

// grid T
__global__ void rmsnorm_bwd_dx_k(const float* x, const float* w, float off, const float* rstd, const float* dy,
                                 float* dx, bool acc, int64_t d) {
  const int64_t t = blockIdx.x;
  const float *xr = x + t * d, *dyr = dy + t * d;
  const float r = rstd[t];
  double dot = 0;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) dot += double(dyr[i]) * (w[i] + off) * xr[i];
  dot = block_sum(dot);
  const float c = float(dot / double(d)) * r * r;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float g = r * (dyr[i] * (w[i] + off) - xr[i] * c);
    dx[t * d + i] = acc ? dx[t * d + i] + g : g;
  }
}

// Column sums over T rows in a fixed order. The rows split into G groups of consecutive rows
// (grid.y, row_groups); in a block of (32 columns, kRowLanes lanes of rows), lane y sums its
// group's rows y, y + kRowLanes, ... in order (a warp reads 32 adjacent columns of a row), then
// lane 0 adds the lanes' sums in lane order. G = 1 adds that into the output; G > 1 writes it to
// partial (G, n) and add_groups_k adds the groups in group order. G depends on (T, n) alone, so a
// shape sums in one order on every run.
constexpr int kRowLanes = 32;
constexpr int64_t kGroupRows = 256;  // at least this many rows per group (8 per lane)
// G: enough groups for about kRowGroupBlocks blocks (kernels.h), never below kGroupRows rows each
inline int64_t row_groups(int64_t T, int64_t n) {
  const int64_t cols = (n + 31) / 32, most = cols < kRowGroupBlocks ? kRowGroupBlocks / cols : 1;
  const int64_t g = (T + kGroupRows - 1) / kGroupRows;
  return g < 1 ? 1 : g < most ? g : most;
}
// group blockIdx.y's rows [*t0, *t1) of T, in G = gridDim.y groups
__device__ inline void group_rows(int64_t T, int64_t* t0, int64_t* t1) {
  const int64_t span = (T + gridDim.y - 1) / gridDim.y, a = int64_t(blockIdx.y) * span;
  *t0 = a < T ? a : T, *t1 = a + span < T ? a + span : T;
}
// a block's column total: into out (G = 1) or its group's row of partial (G, n)
__device__ inline void put_group_sum(double r, float* out, double* partial, int64_t i, int64_t n) {
  if (partial) partial[int64_t(blockIdx.y) * n + i] = r;
  else out[i] += float(r);
}
__device__ inline double lanes_total(double s) {
  __shared__ double part[kRowLanes][33];  // here, not in the (template) kernels: simt garbles it per block
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  double r = 0;
  if (threadIdx.y == 0)
    for (int y = 0; y < kRowLanes; ++y) r += part[y][threadIdx.x];
  return r;  // lane 0's threads hold their column's total
}

// dw (d) += sum_t dy[t, i] x[t, i] rstd[t]; x, dy: (T, d); partial: (G, d) or null (G = 1)
// grid: (d / 32, G) blocks of (32, kRowLanes)
__global__ void rmsnorm_bwd_dw_k(const float* x, const float* rstd, const float* dy, float* dw, double* partial,
                                 int64_t T, int64_t d) {
  const int64_t i = int64_t(blockIdx.x) * 32 + threadIdx.x;
  int64_t t0, t1;
  group_rows(T, &t0, &t1);
  double s = 0;
  if (i < d)
    for (int64_t t = t0 + threadIdx.y; t < t1; t += kRowLanes) s += double(dy[t * d + i]) * x[t * d + i] * rstd[t];
  const double r = lanes_total(s);
  if (threadIdx.y == 0 && i < d) put_group_sum(r, dw, partial, i, d);
}

// out (n) += sum_g partial[g, i], groups in order; partial: (G, n); thread per column
__global__ void add_groups_k(const double* partial, int64_t G, float* out, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  double s = 0;
  for (int64_t g = 0; g < G; ++g) s += partial[g * n + i];
  out[i] += float(s);
}

// x: (T, H, D); thread per (t, i < R/2), pairs (i, i + R/2) (interleaved: (2i, 2i + 1)); heads in a
// loop; dims R.. untouched
__global__ void rope_k(float* x, const int32_t* pos, const float* inv_freq, float scaling, double sgn, int64_t T,
                       int64_t H, int64_t D, int64_t R, bool interleaved) {
  const int64_t half = R / 2, e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= T * half) return;
  const int64_t t = e / half, i = e % half;
  const float angle = float(pos[t]) * inv_freq[i];
  const float c = float(cos(double(angle)) * scaling), sn = float(sgn * sin(double(angle)) * scaling);
  const int64_t a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
  for (int64_t h = 0; h < H; ++h) {
    float* xr = x + (t * H + h) * D;
    const float x1 = xr[a], x2 = xr[b];
    xr[a] = x1 * c - x2 * sn;
    xr[b] = x2 * c + x1 * sn;
  }
}

__device__ inline float sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }
// GELU's tanh approximation (PyTorch's gelu(approximate='tanh')): 0.5 g (1 + t), t = tanh(b (g + k g^3))
constexpr float kGeluBeta = 0.7978845608028654f, kGeluKappa = 0.044715f;
__device__ inline float gelu_tanh(float g) { return 0.5f * g * (1.0f + tanhf(kGeluBeta * (g + kGeluKappa * g * g * g))); }
// its derivative: 0.5 (1 + t) + 0.5 g (1 - t^2) b (1 + 3 k g^2)
__device__ inline float gelu_tanh_grad(float g) {
  const float t = tanhf(kGeluBeta * (g + kGeluKappa * g * g * g));
  return 0.5f * (1.0f + t) + 0.5f * g * (1.0f - t * t) * kGeluBeta * (1.0f + 3.0f * kGeluKappa * g * g);
}

// out, dg, du: float or uint16_t (bf16); gelu: GeGLU, else SwiGLU
template <typename Out>
__global__ void glu_fwd_k(const float* g, const float* u, Out* out, bool gelu, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) put(out, i, (gelu ? gelu_tanh(g[i]) : g[i] * sigmoid(g[i])) * u[i]);
}

// thread per element of x, y: (T, n)
template <typename In, typename Out>
__global__ void dropout_k(const In* x, DropoutMask m, Out* y, bool accumulate, int64_t T, int64_t n) {
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= T * n) return;
  float v = 0.0f;  // (no fused multiply-add: the CPU's two roundings)
  if (m.kept(e / n, e % n)) {
    if constexpr (sizeof(In) == 2) v = __fmul_rn(from_bf16(x[e]), m.scale);
    else v = __fmul_rn(x[e], m.scale);
  }
  if constexpr (sizeof(Out) == 4) {
    if (accumulate) v = __fadd_rn(y[e], v);
  }
  put(y, e, v);
}

template <typename Out>
__global__ void glu_bwd_k(const float* g, const float* u, const float* dout, Out* dg, Out* du, bool gelu, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if (gelu) {
    put(du, i, dout[i] * gelu_tanh(g[i]));
    put(dg, i, dout[i] * u[i] * gelu_tanh_grad(g[i]));
    return;
  }
  const float s = sigmoid(g[i]);
  put(du, i, dout[i] * g[i] * s);
  put(dg, i, dout[i] * u[i] * s * (1.0f + g[i] * (1.0f - s)));
}

__global__ void add_f32_k(float* y, const float* x, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] += x[i];
}

__global__ void add_bf16_k(float* y, const __nv_bfloat16* x, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] += __bfloat162float(x[i]);
}


// x, y: (n)
__global__ void f32_to_bf16_k(const float* x, uint16_t* y, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = to_bf16(x[i]);
}
__global__ void bf16_to_f32_k(const uint16_t* x, float* y, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = from_bf16(x[i]);
}
__device__ inline void copy_bits(void* dst, const void* src, bool two_bytes) {
  if (two_bytes) *static_cast<uint16_t*>(dst) = *static_cast<const uint16_t*>(src);
  else *static_cast<uint32_t*>(dst) = *static_cast<const uint32_t*>(src);
}
// grid (x blocks, n pieces): each block's y its piece
__global__ void cast_pieces_k(void* x, bool x_bf16, CastPieces p, bool p_bf16, int64_t row_elems, bool to_pieces) {
  const int i = int(blockIdx.y);
  void* piece = p.data[i];
  const int64_t n = p.rows[i] * row_elems, x0 = p.row0[i] * row_elems;
  auto load = [](const void* a, bool bf16, int64_t j) {
    return bf16 ? from_bf16(static_cast<const uint16_t*>(a)[j]) : static_cast<const float*>(a)[j];
  };
  auto store = [](void* a, bool bf16, int64_t j, float v) {
    if (bf16) static_cast<uint16_t*>(a)[j] = to_bf16(v);
    else static_cast<float*>(a)[j] = v;
  };
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    if (x_bf16 == p_bf16 && (to_pieces || piece)) {  // one dtype: the bits as they are (as cast's copy)
      void* xe = static_cast<char*>(x) + (x0 + e) * (x_bf16 ? 2 : 4);
      void* pe = static_cast<char*>(piece) + e * (x_bf16 ? 2 : 4);
      copy_bits(to_pieces ? pe : xe, to_pieces ? xe : pe, x_bf16);
    } else if (to_pieces) {
      store(piece, p_bf16, e, load(x, x_bf16, x0 + e));
    } else {
      store(x, x_bf16, x0 + e, piece ? load(piece, p_bf16, e) : 0.0f);
    }
  }
}
__global__ void round_bf16_k(float* x, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = from_bf16(to_bf16(x[i]));
}

// x, y: float or uint16_t (bf16)
template <typename In, typename Out>
__global__ void scale_k(const In* x, float a, Out* y, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) put(y, i, __fmul_rn(widen(x[i]), a));
}

// grid: chunks of kSumChunk
__global__ void sum_squares_k(const float* x, int64_t n, double* partial) {
  const int64_t c0 = int64_t(blockIdx.x) * kSumChunk, c1 = c0 + kSumChunk < n ? c0 + kSumChunk : n;
  double s = 0;
  for (int64_t i = c0 + threadIdx.x; i < c1; i += blockDim.x) s += double(x[i]) * x[i];
  s = block_sum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void add_rows_k(float* y, const float* b, int64_t T, int64_t out) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < T * out) y[i] += b[i % out];
}

// db (out) += sum_t dy[t, o]; dy: (T, out); partial: (G, out) or null (G = 1)
// grid: (out / 32, G) blocks of (32, kRowLanes), as above
template <typename In>  // float, or uint16_t holding bf16
__global__ void column_sums_k(const In* dy, float* db, double* partial, int64_t T, int64_t out) {
  const int64_t o = int64_t(blockIdx.x) * 32 + threadIdx.x;
  int64_t t0, t1;
  group_rows(T, &t0, &t1);
  double s = 0;
  if (o < out)
    for (int64_t t = t0 + threadIdx.y; t < t1; t += kRowLanes) s += widen(dy[t * out + o]);
  const double r = lanes_total(s);
  if (threadIdx.y == 0 && o < out) put_group_sum(r, db, partial, o, out);
}

__global__ void adamw_k(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
                        float eps, float wd, float step_size, float inv_sqrt_bc2) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  // Each operation rounded as written (no FMA contraction): the same bits as the host's AdamW
  // (backend/cpu/cpu_optimizer.cpp), so the update may run on either side of --offload params.
  const float gi = g[i];
  const float mi = __fadd_rn(__fmul_rn(beta1, m[i]), __fmul_rn(__fsub_rn(1.0f, beta1), gi));
  const float vi = __fadd_rn(__fmul_rn(beta2, v[i]), __fmul_rn(__fmul_rn(__fsub_rn(1.0f, beta2), gi), gi));
  m[i] = mi, v[i] = vi;
  float pi = p[i];
  pi = __fsub_rn(pi, __fmul_rn(__fmul_rn(lr, wd), pi));
  pi = __fsub_rn(pi, __fdiv_rn(__fmul_rn(step_size, mi), __fadd_rn(__fmul_rn(__fsqrt_rn(vi), inv_sqrt_bc2), eps)));
  p[i] = pi;
}

__global__ void sgd_k(float* p, const float* g, float lr, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) p[i] = __fsub_rn(p[i], __fmul_rn(lr, g[i]));  // no FMA: the host's bits
}

}  // namespace

void embedding_fwd(const int32_t* ids, const float* table, float* out, int64_t T, int64_t d, cudaStream_t s) {
  if (T > 0) launch(embedding_fwd_k, unsigned(T), kThreads, 0, s, ids, table, out, d);
}
void embedding_bwd(const int32_t* ids, const float* dout, float* dtable, int64_t T, int64_t d, int32_t skip,
                   cudaStream_t s) {
  if (T > 0) launch(embedding_bwd_k, unsigned(T), kThreads, 0, s, ids, dout, dtable, T, d, skip);
}
void rmsnorm_fwd(const float* x, const float* w, float w_offset, float eps, void* y, bool y_bf16, float* rstd, int64_t T,
                 int64_t d, cudaStream_t s) {
  if (T <= 0) return;
  if (y_bf16)
    launch(rmsnorm_fwd_k<uint16_t>, unsigned(T), kThreads, 0, s, x, w, w_offset, eps, static_cast<uint16_t*>(y), rstd, d);
  else launch(rmsnorm_fwd_k<float>, unsigned(T), kThreads, 0, s, x, w, w_offset, eps, static_cast<float*>(y), rstd, d);
}
void rmsnorm_bwd(const float* x, const float* w, float w_offset, const float* rstd, const float* dy, float* dx,
                 bool dx_accumulate, float* dw, double* partial, int64_t T, int64_t d, cudaStream_t s) {
  if (T == 0) return;
  launch(rmsnorm_bwd_dx_k, unsigned(T), kThreads, 0, s, x, w, w_offset, rstd, dy, dx, dx_accumulate, d);
  const int64_t G = row_groups(T, d);
  double* part = G > 1 ? partial : nullptr;
  launch(rmsnorm_bwd_dw_k, dim3(blocks_for(d, 32), unsigned(G)), dim3(32, kRowLanes), 0, s, x, rstd, dy, dw, part, T,
         d);
  if (G > 1) launch(add_groups_k, blocks_for(d), kThreads, 0, s, part, G, dw, d);
}
void rope(float* x, const int32_t* pos, const float* inv_freq, float scaling, bool inverse, int64_t T, int64_t H,
          int64_t D, int64_t R, bool interleaved, cudaStream_t s) {
  if (T * (R / 2) > 0)
    launch(rope_k, blocks_for(T * (R / 2)), kThreads, 0, s, x, pos, inv_freq, scaling, inverse ? -1.0 : 1.0, T, H, D,
           R, interleaved);
}
void glu_fwd(const float* g, const float* u, void* out, bool out_bf16, bool gelu, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  if (out_bf16) launch(glu_fwd_k<uint16_t>, blocks_for(n), kThreads, 0, s, g, u, static_cast<uint16_t*>(out), gelu, n);
  else launch(glu_fwd_k<float>, blocks_for(n), kThreads, 0, s, g, u, static_cast<float*>(out), gelu, n);
}
void dropout(const void* x, bool x_bf16, const DropoutMask& m, void* y, bool y_bf16, bool accumulate, int64_t T,
             int64_t n, cudaStream_t s) {
  if (T * n <= 0) return;
  const unsigned b = blocks_for(T * n);
  const auto *xf = static_cast<const float*>(x);
  const auto *xh = static_cast<const uint16_t*>(x);
  auto *yf = static_cast<float*>(y);
  auto *yh = static_cast<uint16_t*>(y);
  if (x_bf16 && y_bf16) launch(dropout_k<uint16_t, uint16_t>, b, kThreads, 0, s, xh, m, yh, accumulate, T, n);
  else if (x_bf16) launch(dropout_k<uint16_t, float>, b, kThreads, 0, s, xh, m, yf, accumulate, T, n);
  else if (y_bf16) launch(dropout_k<float, uint16_t>, b, kThreads, 0, s, xf, m, yh, accumulate, T, n);
  else launch(dropout_k<float, float>, b, kThreads, 0, s, xf, m, yf, accumulate, T, n);
}
void glu_bwd(const float* g, const float* u, const float* dout, void* dg, void* du, bool d_bf16, bool gelu, int64_t n,
             cudaStream_t s) {
  if (n <= 0) return;
  if (d_bf16)
    launch(glu_bwd_k<uint16_t>, blocks_for(n), kThreads, 0, s, g, u, dout, static_cast<uint16_t*>(dg),
           static_cast<uint16_t*>(du), gelu, n);
  else
    launch(glu_bwd_k<float>, blocks_for(n), kThreads, 0, s, g, u, dout, static_cast<float*>(dg),
           static_cast<float*>(du), gelu, n);
}
void add(float* y, const void* x, bool x_bf16, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  if (x_bf16) launch(add_bf16_k, blocks_for(n), kThreads, 0, s, y, static_cast<const __nv_bfloat16*>(x), n);
  else launch(add_f32_k, blocks_for(n), kThreads, 0, s, y, static_cast<const float*>(x), n);
}
void cast(const void* x, bool x_bf16, void* y, bool y_bf16, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  if (x_bf16 == y_bf16) {
    if (x != y) about_to_submit(s), cudaMemcpyAsync(y, x, size_t(n) * (x_bf16 ? 2 : 4), cudaMemcpyDeviceToDevice, s);
  } else if (x_bf16) {
    launch(bf16_to_f32_k, blocks_for(n), kThreads, 0, s, static_cast<const uint16_t*>(x), static_cast<float*>(y), n);
  } else {
    launch(f32_to_bf16_k, blocks_for(n), kThreads, 0, s, static_cast<const float*>(x), static_cast<uint16_t*>(y), n);
  }
}

bool cast_pieces(void* x, bool x_bf16, const CastPieces& p, int n, bool p_bf16, int64_t row_elems, bool to_pieces,
                 cudaStream_t s) {
  int64_t most = 0;
  for (int i = 0; i < n; ++i) most = std::max(most, p.rows[i] * row_elems);
  if (n == 0 || most == 0) return false;
  // at most 64 blocks a piece (a 0.5B page's K, 128 x 2 x 64: 64; a 7B page's, 128 x 4 x 128: 4 strides)
  const unsigned blocks = unsigned(std::min<int64_t>(blocks_for(most), 64));
  launch(cast_pieces_k, dim3(blocks, unsigned(n)), kThreads, 0, s, x, x_bf16, p, p_bf16, row_elems, to_pieces);
  return true;
}

void round_bf16(float* x, int64_t n, cudaStream_t s) {
  if (n > 0) launch(round_bf16_k, blocks_for(n), kThreads, 0, s, x, n);
}

void scale(const void* x, bool x_bf16, float a, void* y, bool y_bf16, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  const auto *xf = static_cast<const float*>(x);
  const auto *xh = static_cast<const uint16_t*>(x);
  auto *yf = static_cast<float*>(y);
  auto *yh = static_cast<uint16_t*>(y);
  if (x_bf16 && y_bf16) launch(scale_k<uint16_t, uint16_t>, blocks_for(n), kThreads, 0, s, xh, a, yh, n);
  else if (x_bf16) launch(scale_k<uint16_t, float>, blocks_for(n), kThreads, 0, s, xh, a, yf, n);
  else if (y_bf16) launch(scale_k<float, uint16_t>, blocks_for(n), kThreads, 0, s, xf, a, yh, n);
  else launch(scale_k<float, float>, blocks_for(n), kThreads, 0, s, xf, a, yf, n);
}
void sum_squares_chunks(const float* x, int64_t n, double* partial, cudaStream_t s) {
  if (n > 0) launch(sum_squares_k, unsigned((n + kSumChunk - 1) / kSumChunk), 1024, 0, s, x, n, partial);
}
void add_rows(float* y, const float* b, int64_t T, int64_t out, cudaStream_t s) {
  if (T * out > 0) launch(add_rows_k, blocks_for(T * out), kThreads, 0, s, y, b, T, out);
}
void column_sums(const void* dy, bool dy_bf16, float* db, double* partial, int64_t T, int64_t out, cudaStream_t s) {
  if (out <= 0) return;
  const int64_t G = row_groups(T, out);
  double* part = G > 1 ? partial : nullptr;
  const dim3 grid(blocks_for(out, 32), unsigned(G)), lanes(32, kRowLanes);
  if (dy_bf16)
    launch(column_sums_k<uint16_t>, grid, lanes, 0, s, static_cast<const uint16_t*>(dy), db, part, T, out);
  else launch(column_sums_k<float>, grid, lanes, 0, s, static_cast<const float*>(dy), db, part, T, out);
  if (G > 1) launch(add_groups_k, blocks_for(out), kThreads, 0, s, part, G, db, out);
}
void adamw(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1, float beta2, float eps,
           float wd, float step_size, float inv_sqrt_bc2, cudaStream_t s) {
  if (n > 0)
    launch(adamw_k, blocks_for(n), kThreads, 0, s, p, g, m, v, n, lr, beta1, beta2, eps, wd, step_size, inv_sqrt_bc2);
}
void sgd(float* p, const float* g, float lr, int64_t n, cudaStream_t s) {
  if (n > 0) launch(sgd_k, blocks_for(n), kThreads, 0, s, p, g, lr, n);
}

}  // namespace oomb::cuda::k
