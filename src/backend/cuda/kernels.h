// Launchers of oomb's own CUDA kernels: plain pointers (row-major, fp32 unless named), one stream.
// Shapes as the Backend ops state them: T tokens, d hidden, H/G query/kv heads, D head dim, V vocab.
// Every kernel is deterministic: no atomics; each output element has one writer, reductions run
// in a fixed order. This header is C++17 (nvcc) and plain C++ (the backend) alike.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/dropout_mask.h"

namespace oomb::cuda::k {

// out (T, d) = table[ids];  dtable[ids[t]] += dout[t], tokens in order per row
void embedding_fwd(const int32_t* ids, const float* table, float* out, int64_t T, int64_t d, cudaStream_t s);
void embedding_bwd(const int32_t* ids, const float* dout, float* dtable, int64_t T, int64_t d, int32_t skip,
                   cudaStream_t s);

// y (T, d) = x * rstd * (w + w_offset) (f32, or bf16 when y_bf16: rounded to nearest even);  rstd (T)
void rmsnorm_fwd(const float* x, const float* w, float w_offset, float eps, void* y, bool y_bf16, float* rstd, int64_t T,
                 int64_t d, cudaStream_t s);
// dx (T, d) = (or +=) rstd (dy w' - x rstd^2 mean(dy w' x)), w' = w + w_offset;  dw (d) += sum_t dy x rstd (fp64 in a
// fixed order: groups of rows (grid.y), in each 32 lanes of rows each in order, then the lanes in
// order, then the groups in order). partial: kRowGroupBytes of device memory, the groups' sums.
void rmsnorm_bwd(const float* x, const float* w, float w_offset, const float* rstd, const float* dy, float* dx,
                 bool dx_accumulate, float* dw, double* partial, int64_t T, int64_t d, cudaStream_t s);
// The column sums' grid: up to about kRowGroupBlocks blocks (4 per SM of an H100's 132) where T
// allows. Groups G > 1 only where G * ceil(d / 32) <= kRowGroupBlocks: (G, d) fp64 fit kRowGroupBytes.
constexpr int64_t kRowGroupBlocks = 512;
constexpr size_t kRowGroupBytes = size_t(kRowGroupBlocks) * 32 * 8;

// x (T, H, D): each head's first R dims rotated in place at pos (T), pairs (i, i + R/2) or (interleaved)
// (2i, 2i + 1); inv_freq (R/2) in device memory; inverse: the transpose
void rope(float* x, const int32_t* pos, const float* inv_freq, float scaling, bool inverse, int64_t T, int64_t H,
          int64_t D, int64_t R, bool interleaved, cudaStream_t s);

// out = act(g) * u, act silu or (gelu) GELU's tanh approximation;  backward: dg, du.  out, and dg with
// du: f32, or bf16 (rounded to nearest even)
void glu_fwd(const float* g, const float* u, void* out, bool out_bf16, bool gelu, int64_t n, cudaStream_t s);
void glu_bwd(const float* g, const float* u, const float* dout, void* dg, void* du, bool d_bf16, bool gelu, int64_t n,
             cudaStream_t s);

// y (T, n) = x where m keeps it, times m.scale, else 0 (or y += that: accumulate, y f32). x, y
// f32 or bf16 (y rounded to nearest even)
void dropout(const void* x, bool x_bf16, const DropoutMask& m, void* y, bool y_bf16, bool accumulate, int64_t T,
             int64_t n, cudaStream_t s);

// y += x (x f32, or bf16 when x_bf16)
void add(float* y, const void* x, bool x_bf16, int64_t n, cudaStream_t s);
// y (n) = a x in fp32, x and y f32 or bf16 (y rounded to nearest even); y may be x
void scale(const void* x, bool x_bf16, float a, void* y, bool y_bf16, int64_t n, cudaStream_t s);
// y (n) = x converted between f32 and bf16 (round to nearest even; same dtype: a copy)
void cast(const void* x, bool x_bf16, void* y, bool y_bf16, int64_t n, cudaStream_t s);
// x (rows, row_elems) converted to or from pieces: piece i holds rows [row0[i], row0[i] + rows[i])
// at data[i] (null: rows of zeros, from pieces only); up to kCastPieces pieces a launch; one dtype
// both sides: the bits copied. Returns whether it launched (not for pieces of no rows)
constexpr int kCastPieces = 64;
struct CastPieces {
  void* data[kCastPieces];
  int64_t row0[kCastPieces], rows[kCastPieces];
};
bool cast_pieces(void* x, bool x_bf16, const CastPieces& p, int n, bool p_bf16, int64_t row_elems, bool to_pieces,
                 cudaStream_t s);
// x (n) rounded in place to bf16 values, kept in f32
void round_bf16(float* x, int64_t n, cudaStream_t s);
// partial[c] = sum of x[i]^2 over chunk c of 65536 elements, in fp64 (the caller sums them in order)
void sum_squares_chunks(const float* x, int64_t n, double* partial, cudaStream_t s);
constexpr int64_t kSumChunk = 1 << 16;
// y (T, out) += b (out) on every row
void add_rows(float* y, const float* b, int64_t T, int64_t out, cudaStream_t s);
// db (out) += sum_t dy (T, out), dy f32 or bf16 (dy_bf16), summed in fp64 as rmsnorm_bwd's dw
// (partial: the same kRowGroupBytes)
void column_sums(const void* dy, bool dy_bf16, float* db, double* partial, int64_t T, int64_t out, cudaStream_t s);

// AdamW with the CPU backend's formula; step_size = lr / bc1, inv_sqrt_bc2 = 1 / sqrt(bc2)
void adamw(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1, float beta2, float eps,
           float wd, float step_size, float inv_sqrt_bc2, cudaStream_t s);
void sgd(float* p, const float* g, float lr, int64_t n, cudaStream_t s);

// The loss over vocabulary tiles (Backend::lm_head_xent_stats, _loss, _grad). logits: (n, ld), the
// Vt columns of vocabulary tile [v0, v0 + Vt); stats: (n, 4) f64 per row {max, sum of exp(logit -
// max), target logit, argmax}. xent_stats merges the tile into stats (v0 = 0 starts them);
// xent_loss: acc (2) += {sum of lse - target logit, hits} over rows with a target, in row order
// (one thread); xent_grad: the tile in place -> (softmax - onehot(y)) * scale, rows y < 0 zero.
void xent_stats(const float* logits, int64_t ld, const int32_t* targets, int64_t v0, int64_t Vt, int64_t n,
                double* stats, cudaStream_t s);
void xent_loss(const double* stats, const int32_t* targets, int64_t n, double* acc, cudaStream_t s);
void xent_grad(float* logits, int64_t ld, const int32_t* targets, int64_t v0, int64_t Vt, int64_t n,
               const double* stats, float scale, cudaStream_t s);

// Attention over a device table of KV blocks.
struct AttnBlock {
  const void* k;     // (len, G, D) f32, or bf16 when kv_bf16
  const void* v;     // (len, G, D), k's dtype
  void* dk;          // (len, G, D) f32, or bf16 when grad_bf16; backward only
  void* dv;
  const int32_t* doc;  // (len) or null
  int64_t idx0;        // sequence index of the block's first token
  int64_t len;
  int32_t grad_bf16;   // per block: earlier pages may hold bf16 gradients, the chunk's own are f32
  int32_t kv_bf16;     // per block: pages may hold bf16 K/V (--kv-dtype bf16), read as fp32
  uint64_t heads;      // bit g: kv head g reads the block (sparse selection per group); KVBlock::heads
};
struct AttnParams {
  const AttnBlock* blocks;  // device memory
  int64_t n_blocks, max_len;
  int64_t T, H, G, D;
  float scale;
  int64_t q_idx0;
  const int32_t* q_doc;  // (T) or null
  int64_t window = 0;    // sliding window (> 0): keys at qi - window or before are masked
  // a fold over several calls (AttnArgs): forward keeps o unnormalized, lse the running max and
  // run_sum (T, H) the running denominator between calls; backward's dq accumulates after the first
  int32_t first = 1, last = 1;
  float* run_sum = nullptr;
  // backward: bf16 copies of q and dout (T, H, D) (AttnArgs::q16, dout16), read in their place by
  // the tensor-core dk, dv kernel and by cuDNN's route; null: they read (or cast) q and dout
  const void* q16 = nullptr;
  const void* do16 = nullptr;
};
// Whether p's bf16 copies of q and dout can be read in place, by cp.async: both given, D % 8 == 0
// and 16-byte aligned rows
inline bool reads_q16(const AttnParams& p) {
  auto aligned = [](const void* x) { return (reinterpret_cast<uintptr_t>(x) & 15) == 0; };
  return p.q16 && p.do16 && p.D % 8 == 0 && aligned(p.q16) && aligned(p.do16);
}
// q, o: (T, H, D); lse: (T, H), natural log, -inf for a query that sees no key
void attention_fwd(const AttnParams& p, const float* q, float* o, float* lse, cudaStream_t s);
// dsum (T, H) = rowsum(dout * o), a workspace the caller owns; then dq, and every block's dk, dv +=
void attention_bwd(const AttnParams& p, const float* q, const float* o, const float* lse, const float* dout,
                   float* dq, float* dsum, cudaStream_t s);
constexpr int64_t kMaxHeadDim = 256;
// dsum (T, H) = rowsum(dout * o), the backward's first step (both variants)
void attention_dsum(const AttnParams& p, const float* o, const float* dout, float* dsum, cudaStream_t s);
// The same ops on tensor cores (kernels_attention_mma_fwd.cu, _bwd.cu: the path under --precision bf16): q, K,
// V and dout read as bf16, P and dS rounded to bf16 for their products, fp32 statistics and sums.
// Deterministic too, but a different summation order and those roundings: not the bits of the
// reference kernels above. A fold's state between calls: lse holds the running max in log2 units.
// Head dims up to kMaxMmaHeadDim, even; attention_mma_unsupported: null when p is supported, else why not.
constexpr int64_t kMaxMmaHeadDim = 128;
const char* attention_mma_unsupported(const AttnParams& p);
void attention_fwd_mma(const AttnParams& p, const float* q, float* o, float* lse, cudaStream_t s);
// parts: what the backward runs, both by default (the lab times them apart): kBwdDq, dsum and the
// dq kernel (S, dP, dQ: 1.5 forwards' products); kBwdDkdv, the dk, dv kernel (S, dP again, dV, dK:
// 2 forwards'), which reads dsum
enum BwdParts : int { kBwdDq = 1, kBwdDkdv = 2, kBwdAll = 3 };
void attention_bwd_mma(const AttnParams& p, const float* q, const float* o, const float* lse, const float* dout,
                       float* dq, float* dsum, cudaStream_t s, int parts = kBwdAll);

// Sparse attention's page metadata: k (T, G, D) f32 of tokens [t0, t0 + T) folded into means
// (pages, G, D) bf16, the mean key of each page over its rows so far (Backend::page_key_means).
void page_key_means(const float* k, int64_t t0, int64_t page_size, uint16_t* means, int64_t T, int64_t G, int64_t D,
                    cudaStream_t s);
// scores (tiles, S, pages) f32 from q (T, H, D) and means (pages, G, D) bf16 (Backend::page_scores);
// the tile's summed queries live in shared memory (G x D floats when S = 1, else D)
void page_scores(const float* q, int64_t tile, const uint16_t* means, float* scores, int64_t T, int64_t H, int64_t G,
                 int64_t D, int64_t pages, int64_t S, cudaStream_t s);
// Quest's metadata: k (T, G, D) f32 folded into minmax (pages, 2, G, D) bf16, each page's
// per-dimension min (rounded down) and max (rounded up) over its rows so far (Backend::page_key_minmax).
void page_key_minmax(const float* k, int64_t t0, int64_t page_size, uint16_t* minmax, int64_t T, int64_t G, int64_t D,
                     cudaStream_t s);
// scores (tiles, S, pages) f32 of Quest's bound from q (T, H, D) and minmax (Backend::page_quest_scores);
// the tile's summed positive and other parts of q in shared memory (2 x G x D floats when S = 1, else 2 x D)
void page_quest_scores(const float* q, int64_t tile, const uint16_t* minmax, float* scores, int64_t T, int64_t H,
                       int64_t G, int64_t D, int64_t pages, int64_t S, cudaStream_t s);
// chosen (tiles, S, K) int32: each row's top K of scores (tiles, S, pages) f32 over [first, pages),
// ascending (Backend::page_topk); a block per row, 32 ints of shared memory
void page_topk(const float* scores, int64_t tiles, int64_t S, int64_t pages, int64_t first, int32_t* chosen, int64_t K,
               cudaStream_t s);

}  // namespace oomb::cuda::k
