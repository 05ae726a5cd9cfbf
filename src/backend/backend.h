// The op interface every backend implements. Model code calls only these ops.
// Shapes use T = tokens, d = hidden, H = query heads, G = kv heads, D = head dim, V = vocab.
// Ops check their inputs once, for every backend (op_checks.cpp), with errors that start with the op's name.
#pragma once
#include <memory>
#include <span>
#include <string_view>

#include "backend/dropout_mask.h"
#include "backend/stream_times.h"
#include "core/activation.h"
#include "core/tensor.h"

namespace oomb {

// One block of keys/values for attention (design notes: shared/DESIGN.md, section 3): `len` consecutive tokens whose
// sequence indices start at idx0. Blocks may come in any order; any subset is allowed.
struct KVBlock {
  Tensor k, v;    // (len, G, D), f32 or bf16 (both the same; read as fp32)
  Tensor dk, dv;  // (len, G, D) fp32 gradient accumulators (+=); backward only
  int64_t idx0 = 0;
  const int32_t* doc = nullptr;  // optional per-token document ids (len); null = one document
  // Per kv head group (sparse selection per group, --sparse-pages): bit g set = kv head g and its
  // query heads read this block; a clear bit masks the whole block for them. All set by default.
  uint64_t heads = ~uint64_t(0);
};

struct AttnArgs {
  float scale = 1.0f;              // softmax scale, usually 1/sqrt(D)
  int64_t q_idx0 = 0;              // sequence index of the first query (causal: key idx <= query idx)
  const int32_t* q_doc = nullptr;  // optional per-query document ids (T); keys of other documents masked
  int64_t window = 0;              // sliding window: > 0 masks keys window or more positions behind the query
  // Folding the blocks in over several calls (groups of pages streaming through the device): the
  // first call starts the state, the last one finishes it; on one backend's own kernels the calls
  // together give the bits of one call over all their blocks in the same order. Forward between
  // calls: o holds the unnormalized sum, lse the running max (in the kernel's own units: log2 on
  // CUDA's tensor cores, whose state cuDNN's route keeps too), run_sum (T, H) fp32 the running
  // denominator. Backward: dq is zeroed by the first call and accumulated by the others.
  bool first = true, last = true;
  Tensor run_sum;
  // --precision bf16: q, K, V, o and dout hold bf16 values, and a backend may take its products on
  // tensor cores (CUDA: P and dS rounded to bf16 too, as FlashAttention does; the CPU ignores it)
  bool bf16 = false;
  // Every call of this run on the backend's own attention kernels (CUDA: never cuDNN's): sparse
  // pages, whose calls are a query tile each over scattered chosen pages (cuDNN calls of a page)
  bool own_kernels = false;
  // --precision bf16, backward: optional bf16 copies of q and dout (T, H, D), their values (which
  // are bf16 already), for a backend whose kernels read q and dout as bf16: CUDA's tensor-core dK/dV
  // kernel streams them per query tile, and cuDNN's route reads them rather than casting its own.
  // Others ignore them.
  Tensor q16, dout16;
};

// RoPE parameters as transformers computes them: angle = pos * inv_freq (fp32), cos/sin scaled.
// dim: the dims of each head it turns, the first ones (0: all D); the others pass through untouched.
struct RopeTable {
  const float* inv_freq = nullptr;  // (dim/2)
  float attention_scaling = 1.0f;
  int64_t dim = 0;
  // which of the backend's kept copies holds it (CUDA keeps one per slot on the device): 0 the
  // configured RoPE, 1 the plain one of the layers that take no scaling (ModelConfig::rope_scaled)
  int slot = 0;
  // frequency i turns the pair (2i, 2i + 1) (GLM's interleaved RoPE) rather than (i, i + dim/2)
  bool interleaved = false;
  int64_t dims(int64_t D) const { return dim > 0 ? dim : D; }
  // the two dims frequency i of `half` turns
  int64_t first(int64_t i) const { return interleaved ? 2 * i : i; }
  int64_t second(int64_t i, int64_t half) const { return interleaved ? 2 * i + 1 : i + half; }
};

// Work runs on streams: every op on the compute stream; copies may also run on the copy streams.
// Each stream runs its work in order; events order one stream's work after another's. Copy: copies
// into the device's memory (and any other); CopyOut: copies out of it into the host's, beside them
// (a GPU's copy engines move both ways at once, PCIe being full duplex), so that a layer's gradients
// leaving do not queue behind the next layer's weights arriving, nor those behind them.
enum class Stream : uint8_t { Compute, Copy, CopyOut };
// OOMB_COPY_STREAMS=1: Stream::CopyOut's work runs on Stream::Copy (the single copy queue of
// before, for comparison: same results); 2 or unset: a stream each way. Read when a backend is made.
int copy_streams_from_env();

// A point in a stream's work, recorded by Backend::record. Opaque; made by Backend::new_event.
class Event {
 public:
  virtual ~Event() = default;
};

// What a backend's workspace depends on: the vocabulary, the longest chunk, the query heads and
// head dim (attention scratch), and the parameter count (the gradient norm's partial sums).
// With bf16 matmuls (--precision bf16) also the widths of the linear layers: the CPU widens bf16
// operands into fp32 scratch, CUDA rounds the loss tile's gradient into a bf16 tile.
struct WorkspaceShape {
  int64_t vocab = 0;
  int64_t chunk = 256;
  int64_t heads = 0, head_dim = 0, params = 0;
  bool bf16 = false;                      // the matmuls read bf16 operands
  int64_t hidden = 0, intermediate = 0;   // d, I (read when bf16)
  int64_t loss_rows = 0;  // tokens per chunk outside attention (the loss, the matmuls; --sp: chunk / P); 0: chunk
  int64_t scored() const { return loss_rows > 0 ? loss_rows : chunk; }
  int64_t kv_heads = 0;          // in attention (--sp: kv heads / P)
  int64_t head_chunks = 1;       // --sp-head-chunks K: attention calls take heads / K, kv heads / K
  bool dense_attention = false;  // some attention calls see every earlier key unmasked (no documents,
                                 // a layer without a window): CUDA may route them through cuDNN
  int64_t q_width = 0;  // H D of the q projection: every head (--sp: the token side's), read when bf16
  int64_t rope_tables = 1;  // RoPE tables a run turns by (2: some layers take the plain one and some not, RopeTable::slot)
  int64_t rope_dim = 0;     // the dims RoPE turns of each head (RopeTable::dim; 0: head_dim)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual Tier tier() const = 0;
  // Whether the ops compute on memory of tier t (an op's tensors must all be in such memory).
  virtual bool computes_on(Tier t) const { return t == tier(); }

  // The ops. Each checks its inputs here, once for every backend (op_checks.cpp: shapes, dtypes,
  // tiers; errors start with the op's name), then calls the backend's do_ op (protected, below),
  // which checks only its own limits (grid sizes, shared memory).

  // y (T, out) = x (T, in) . w^T (out, in) [+ b (out)].  x and w: both f32 or both bf16 (a bf16
  // GEMM with fp32 accumulation); y, b f32.
  void linear_fwd(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y);
  // dx (T, in) = dy . w (or += when dx_accumulate);  dw += dy^T . x;  db += sum_t dy.  Null = skip.
  // x, w, dy: all f32 or all bf16; dx, dw, db f32 (weight gradients accumulate in fp32, beta = 1).
  void linear_bwd(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, bool dx_accumulate,
                  Tensor* dw, Tensor* db);

  // out (T, d) = table[ids];  ids: (T) i32
  void embedding_fwd(const Tensor& ids, const Tensor& table, Tensor& out);
  // dtable[ids[t]] += dout[t], except where ids[t] == skip (transformers' padding_idx; -1: none)
  void embedding_bwd(const Tensor& ids, const Tensor& dout, Tensor& dtable, int64_t skip = -1);

  // y (T, d) = x * rstd * (w + w_offset);  rstd: (T) saved for backward.  y f32, or bf16: each value
  // rounded to nearest even (cast's bits), for a matmul that reads bf16 (--precision bf16). w_offset:
  // 0, or Gemma 3's 1 (its norms scale by 1 + w, in f32)
  void rmsnorm_fwd(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd, float w_offset = 0.0f);
  // dx (T, d) = ... (or += when dx_accumulate);  dw += ... (the same for w as for w + w_offset)
  void rmsnorm_bwd(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy, Tensor& dx,
                   bool dx_accumulate, Tensor& dw, float w_offset = 0.0f);

  // x: (T, H, D) rotated in place at positions pos: (T) i32 (rotate-half layout, as in HF Llama: pairs
  // (i, i + R/2) for i < R/2, R = rope.dims(D); dims R.. unchanged, as Phi-3's partial rotation)
  void rope_fwd(Tensor& x, const Tensor& pos, const RopeTable& rope);
  // dx: (T, H, D) in place: the transpose rotation
  void rope_bwd(Tensor& dx, const Tensor& pos, const RopeTable& rope);

  // out = act(gate) * up;  all (T, I); act silu (SwiGLU) or gelu_tanh (GeGLU: 0.5 g (1 + tanh(sqrt(2/pi)
  // (g + 0.044715 g^3)))).  out f32, or bf16 (rounded as rmsnorm_fwd's y); dgate and dup likewise, both
  // of one dtype
  void glu_fwd(const Tensor& gate, const Tensor& up, Tensor& out, Act act = Act::Silu);
  void glu_bwd(const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor& dgate, Tensor& dup,
               Act act = Act::Silu);

  // Causal GQA attention over KV blocks, online softmax. q, o: (T, H, D); lse: (T, H) fp32
  void attention_fwd(const Tensor& q, std::span<const KVBlock> blocks, const AttnArgs& a, Tensor& o,
                     Tensor& lse);
  // dq (T, H, D) = ...;  every block's dk, dv += its contribution (in place)
  void attention_bwd(const Tensor& q, const Tensor& o, const Tensor& lse, const Tensor& dout,
                     std::span<const KVBlock> blocks, const AttnArgs& a, Tensor& dq);

  // Sparse attention's page metadata (--sparse-pages). k: (T, G, D) f32, the keys (after RoPE) of
  // tokens [t0, t0 + T); means: (pages, G, D) bf16 with pages > (t0 + T - 1) / page_size: the mean
  // key of page p per kv head over the page's rows written so far. Rows of page p before t0 keep
  // their weight: means[p] = (means[p] * r + sum of the new rows) / (r + n), r = rows before t0.
  void page_key_means(const Tensor& k, int64_t t0, int64_t page_size, Tensor& means);
  // scores (tiles, S, pages) f32 against means (pages, G, D) bf16, q (T, H, D) f32 cut into tiles
  // of `tile` rows (the last may be shorter); S = G (per kv head group) or 1 (shared by every head):
  //   scores[i][s][p] = sum over tile i's queries t, heads h of group s (all heads when S = 1) of
  //                     q[t, h] . means[p, h / (H / G)]
  void page_scores(const Tensor& q, int64_t tile, const Tensor& means, Tensor& scores);
  // Quest's metadata (--sparse-score quest): minmax (pages, 2, G, D) bf16, [p][0] the per-dimension
  // min and [p][1] the max of page p's keys written so far, min rounded down to bf16 and max up (so
  // they bound every key). Rows of page p before t0 keep theirs: a page with none starts afresh.
  void page_key_minmax(const Tensor& k, int64_t t0, int64_t page_size, Tensor& minmax);
  // scores (tiles, S, pages) f32 of Quest's upper bound against minmax (pages, 2, G, D) bf16:
  //   scores[i][s][p] = sum over tile i's queries t, heads h of group s (all when S = 1), dims d of
  //                     max(q[t,h,d] * min[p,g,d], q[t,h,d] * max[p,g,d]),  g = h / (H / G)
  // computed as sum_d (sum of q's positive parts) * max + (sum of its negative parts) * min (the
  // same since min <= max), so a tile costs what the mean score costs.
  void page_quest_scores(const Tensor& q, int64_t tile, const Tensor& minmax, Tensor& scores);
  // chosen (tiles, S, K) int32: per row of scores (tiles, S, pages) f32 the K pages of [first, pages)
  // scoring highest (score descending, ties to the lower page, NaN counting as -inf, -0 as +0),
  // in ascending page order; with fewer than K candidates, all of them, then -1.
  void page_topk(const Tensor& scores, int64_t first, Tensor& chosen);

  // lm_head + cross-entropy over vocabulary tiles: w is rows [v0, v0 + Vt) of the lm_head (V, d),
  // so the tiles need not be in memory together; each call tiles its tokens too (never more than
  // 256 x Vt logits). h: (T, d), w: (Vt, d), targets: (T) i32 (< 0 = ignored; every id < V,
  // checked by the caller). h and w both f32, or both bf16 (then the logits' gradient is rounded to
  // bf16 before the two backward matmuls); logits, softmax and loss fp32, sums of exp fp64.
  // stats: (T, 4) f64 per row {max logit, sum of exp(logit - max), target logit, argmax id}.
  // Pass 1, every tile in ascending v0 (v0 = 0 starts the rows afresh): logits (T, Vt) = h . w^T
  // merged into stats (the argmax's ties go to the lower id).
  void lm_head_xent_stats(const Tensor& h, const Tensor& w, int64_t v0, const Tensor& targets, Tensor& stats);
  // sums: (2) f64 += {sum over rows with a target of lse - target logit, argmax hits}, rows in
  // order; lse = max + log(sum). The host reads it once per step.
  void lm_head_xent_loss(const Tensor& stats, const Tensor& targets, Tensor& sums);
  // Pass 2, per tile after pass 1: dl (T, Vt) = scale * (exp(logits - lse) - onehot(targets));
  // dh (T, d) = dl . w (+= when dh_accumulate: every tile but the first);  dw (Vt, d) += dl^T . h.
  void lm_head_xent_grad(const Tensor& h, const Tensor& w, int64_t v0, const Tensor& targets, const Tensor& stats,
                         float scale, Tensor* dh, bool dh_accumulate, Tensor* dw);
  // The three over the whole w (V, d) in tiles of lm_head_vocab_tile(V): pass 1, the loss, pass 2
  // (if dh or dw) with the tiles in reverse. stats: (T, 4) f64 in this backend's memory.
  void lm_head_xent_acc(const Tensor& h, const Tensor& w, const Tensor& targets, float scale, Tensor* dh,
                        Tensor* dw, Tensor& sums, Tensor& stats);
  // The same, returning the loss and hits at once (a host sync; tests and one-off calls).
  double lm_head_xent(const Tensor& h, const Tensor& w, const Tensor& targets, float scale, Tensor* dh, Tensor* dw,
                      int64_t* correct);
  // Bytes of workspace (tag workspace) the backend holds at its peak for a model of this shape:
  // the loss tile (min(256, chunk) x lm_head_vocab_tile(V) logits) and the backend's own scratch.
  virtual size_t workspace_bytes(const WorkspaceShape& s) const = 0;
  // Bytes of pinned host memory (tag workspace) the backend holds for itself (staging).
  virtual size_t pinned_workspace_bytes() const { return 0; }

  // Memory. copy: bytes between this backend's memory and the host's, either way or within one,
  // in order with the ops; the host may read or reuse its side once it returns. fill_zero: this
  // backend's memory.
  virtual void copy(void* dst, Tier dst_tier, const void* src, Tier src_tier, size_t bytes) = 0;
  virtual void fill_zero(void* dst, size_t bytes) = 0;

  // Asynchronous memory work, in order on stream s: between this backend's memory and pinned
  // host memory (or within either). Neither side may be touched until an event recorded after it
  // has been waited for. A backend without streams (the CPU) does it at once.
  virtual void copy_async(void* dst, Tier dst_tier, const void* src, Tier src_tier, size_t bytes, Stream s) {
    copy(dst, dst_tier, src, src_tier, bytes);
  }
  virtual void fill_zero_async(void* dst, size_t bytes, Stream s) { fill_zero(dst, bytes); }
  // rows x width bytes: row i from src + i spitch (tier st) to dst + i dpitch (tier dt), on the
  // compute stream; as copy(), the host may read or reuse its side once it returns
  virtual void copy_rows(void* dst, size_t dpitch, Tier dt, const void* src, size_t spitch, Tier st, size_t width,
                         size_t rows) {
    for (size_t i = 0; i < rows; ++i)
      copy(static_cast<char*>(dst) + i * dpitch, dt, static_cast<const char*>(src) + i * spitch, st, width);
  }
  // The CUDA stream (cudaStream_t) behind s, for a library that issues work on it (NCCL); null on a
  // backend without one.
  virtual void* native_stream(Stream s) { return nullptr; }
  virtual std::unique_ptr<Event> new_event() { return std::make_unique<Event>(); }
  virtual void record(Event& e, Stream s) {}             // e marks the work issued on s so far
  virtual void wait(Stream s, const Event& e) {}         // later work on s waits for e (no host wait)
  virtual void synchronize(const Event& e) {}            // the host waits for e
  virtual void synchronize() {}                          // the host waits for every stream
  // The host's waits so far, where a backend counts them (the simulated device and CUDA; -1
  // elsewhere). drains: the host waited for everything issued (synchronize(), copy() / copy_rows()
  // between the device's memory and the host's, which a GPU must finish before returning, or
  // sum_squares() of device values); event_waits: for one event (synchronize(e): a bounded
  // run-ahead, as double-buffered staging takes).
  struct HostWaits {
    int64_t drains = -1, event_waits = -1;
  };
  virtual HostWaits host_waits() const { return {}; }
  // How the streams spent the time since the last call (stream_times.h), where the backend
  // measures it (CUDA with OOMB_CUDA_TIMELINE=1; .on false elsewhere). Waits for the work it covers.
  virtual StreamTimes take_stream_times() { return {}; }
  // dst = src converted (f32 <-> bf16, round to nearest even; same dtype: a copy); equal numel.
  void cast(const Tensor& src, Tensor& dst);
  // Rows converted as cast() converts them, between x (T, ...) and pieces elsewhere in this
  // backend's memory (a chunk's K or V and the pages holding it): piece i holds x's next `rows`
  // rows, in dtype `dtype`; the pieces' rows sum to T. cast_to_pieces: x -> pieces.
  // cast_from_pieces: pieces -> x, where a piece with no data gives rows of zeros. A GPU does it in
  // one launch, where cast() per piece takes one each (a chunk of 4096 tokens, pages of 128: 32).
  struct RowPiece {
    void* data;
    int64_t rows;
  };
  void cast_to_pieces(const Tensor& x, std::span<const RowPiece> pieces, DType dtype);
  void cast_from_pieces(std::span<const RowPiece> pieces, DType dtype, Tensor& x);
  // x (f32) rounded in place to the nearest bf16 value (ties to even), kept in f32.
  void round_bf16(Tensor& x);

  // Elementwise and reductions over fp32 tensors.
  void add(Tensor& y, const Tensor& x);  // y += x; x f32 or bf16 (read as fp32)
  void zero(Tensor& y);
  void scale(Tensor& y, float s);
  // y = s x, computed in fp32; x and y f32 or bf16 (y rounded as cast rounds) of one size, y may be x
  void scale(const Tensor& x, float s, Tensor& y);
  double sum_squares(const Tensor& x);
  // y (T, n) = x where the mask keeps it, times m.scale, else 0 (LoRA's dropout; row t is sequence
  // position m.row0 + t), or y += that when accumulate. x f32 or bf16 (read as fp32); y f32, or
  // bf16 (rounded as cast rounds; not accumulated).
  void dropout(const Tensor& x, const DropoutMask& m, Tensor& y, bool accumulate);

  // Optimizer updates over flat fp32 tensors of equal length.
  struct AdamW {
    float lr, beta1, beta2, eps, weight_decay;
    int64_t step;  // 1-based, for bias correction
  };
  void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamW& a);
  void sgd_step(Tensor& param, const Tensor& grad, float lr);

 protected:
  // An op's span: begin_op() once its inputs are checked, end_op() once its do_ op has returned or
  // thrown (OpScope, in every op); ops may nest. A timeline's start and end (CUDA).
  virtual void begin_op() {}
  virtual void end_op() noexcept {}
  struct OpScope {
    Backend& be;
    explicit OpScope(Backend& b) : be(b) { be.begin_op(); }
    ~OpScope() { be.end_op(); }
    OpScope(const OpScope&) = delete;
    OpScope& operator=(const OpScope&) = delete;
  };
  // The ops as each backend computes them, called with inputs already checked (see above).
  virtual void do_linear_fwd(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) = 0;
  virtual void do_linear_bwd(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, bool dx_accumulate,
                             Tensor* dw, Tensor* db) = 0;
  virtual void do_embedding_fwd(const Tensor& ids, const Tensor& table, Tensor& out) = 0;
  virtual void do_embedding_bwd(const Tensor& ids, const Tensor& dout, Tensor& dtable, int64_t skip) = 0;
  virtual void do_rmsnorm_fwd(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd,
                              float w_offset) = 0;
  virtual void do_rmsnorm_bwd(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy, Tensor& dx,
                              bool dx_accumulate, Tensor& dw, float w_offset) = 0;
  virtual void do_rope_fwd(Tensor& x, const Tensor& pos, const RopeTable& rope) = 0;
  virtual void do_rope_bwd(Tensor& dx, const Tensor& pos, const RopeTable& rope) = 0;
  virtual void do_glu_fwd(const Tensor& gate, const Tensor& up, Tensor& out, Act act) = 0;
  virtual void do_glu_bwd(const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor& dgate, Tensor& dup,
                          Act act) = 0;
  virtual void do_attention_fwd(const Tensor& q, std::span<const KVBlock> blocks, const AttnArgs& a, Tensor& o,
                                Tensor& lse) = 0;
  virtual void do_attention_bwd(const Tensor& q, const Tensor& o, const Tensor& lse, const Tensor& dout,
                                std::span<const KVBlock> blocks, const AttnArgs& a, Tensor& dq) = 0;
  virtual void do_page_key_means(const Tensor& k, int64_t t0, int64_t page_size, Tensor& means) = 0;
  virtual void do_page_scores(const Tensor& q, int64_t tile, const Tensor& means, Tensor& scores) = 0;
  virtual void do_page_key_minmax(const Tensor& k, int64_t t0, int64_t page_size, Tensor& minmax) = 0;
  virtual void do_page_quest_scores(const Tensor& q, int64_t tile, const Tensor& minmax, Tensor& scores) = 0;
  virtual void do_page_topk(const Tensor& scores, int64_t first, Tensor& chosen) = 0;
  virtual void do_lm_head_xent_stats(const Tensor& h, const Tensor& w, int64_t v0, const Tensor& targets,
                                     Tensor& stats) = 0;
  virtual void do_lm_head_xent_loss(const Tensor& stats, const Tensor& targets, Tensor& sums) = 0;
  virtual void do_lm_head_xent_grad(const Tensor& h, const Tensor& w, int64_t v0, const Tensor& targets,
                                    const Tensor& stats, float scale, Tensor* dh, bool dh_accumulate, Tensor* dw) = 0;
  virtual void do_cast(const Tensor& src, Tensor& dst) = 0;
  // to_pieces: x -> pieces, else pieces -> x. By default a do_cast (or a fill_zero) per piece.
  virtual void do_cast_pieces(const Tensor& x, std::span<const RowPiece> pieces, DType dtype, bool to_pieces);
  virtual void do_round_bf16(Tensor& x) = 0;
  virtual void do_add(Tensor& y, const Tensor& x) = 0;
  virtual void do_zero(Tensor& y) = 0;
  virtual void do_scale(const Tensor& x, float s, Tensor& y) = 0;
  virtual double do_sum_squares(const Tensor& x) = 0;
  virtual void do_dropout(const Tensor& x, const DropoutMask& m, Tensor& y, bool accumulate) = 0;
  virtual void do_adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamW& a) = 0;
  virtual void do_sgd_step(Tensor& param, const Tensor& grad, float lr) = 0;
};

// Rows of the lm_head in one loss tile (a function of the vocabulary only, so that every run of a
// model, its lm_head on the device or streamed in from host memory, sums in the same order):
// ceil(V / k) rounded up to 64 rows, k = ceil(V / 8192) tiles. 8192 rows of a 7B model's
// d = 3584 are 117 MB fp32 (the lm_head is 2.18 GB), and a 256-token tile's GEMMs against them
// (256 x 8192 x d) are still large enough to keep a GPU's tensor cores busy.
int64_t lm_head_vocab_tile(int64_t vocab);
std::unique_ptr<Backend> make_cpu_backend();
// The workspace (device bytes) the CUDA backend holds, for plans made without a GPU: the loss
// tile, cuBLASLt's workspace, the attention's block tables and backward row sums,
// the gradient norm's partial sums and the RoPE table.
size_t cuda_workspace_bytes(const WorkspaceShape& s);
// CUDA's dense attention through cuDNN (cuda/cudnn_attention.h) under --precision bf16: its buffers
// for the shape's chunks (0 unless s.bf16 and s.dense_attention), and cuDNN's own workspace in them:
// for T queries over runs of at most T keys, H heads over G kv heads of dim D (its deterministic
// backward's bf16 dS for a block of queries, at most kCudnnDsBytes; and with GQA its per-head dk, dv)
size_t cudnn_attention_bytes(const WorkspaceShape& s);
size_t cudnn_attention_workspace(int64_t T, int64_t H, int64_t G, int64_t D);
// The most queries of a chunk of T that one cuDNN call takes: its backward's bf16 dS, (queries, H,
// keys), grows with both, so the chunk's queries go in equal blocks that keep it, as cuDNN pads
// it, within kCudnnDsBytes over runs of at most T keys (a multiple of 128, or T itself);
// OOMB_CUDNN_QUERY_BLOCK sets it (fewer queries a call: less memory, smaller calls)
constexpr size_t kCudnnDsBytes = size_t(256) << 20;
int64_t cudnn_query_block(int64_t T, int64_t H);
// The fewest queries a call must have to take that route (its runs are as long as the call's
// queries: decoding and short chunks keep oomb's kernels): OOMB_CUDNN_MIN_QUERIES, default 128
int64_t cudnn_min_queries();
// OOMB_CUDA_ATTENTION, under --precision bf16: unset or "auto" (cuDNN's fused attention where a call
// is dense and cuDNN takes it, else oomb's tensor-core kernels), "cudnn" (the same, but a call
// cuDNN cannot take is an error), "mma" (oomb's tensor-core kernels), or "reference" (the fp32
// kernels, to compare or to debug); another value is an error naming the variable
enum class CudaAttention { Auto, Cudnn, Mma, Reference };
CudaAttention cuda_attention_mode();
// Whether dense attention goes through cuDNN (OOMB_CUDA_ATTENTION auto or cudnn, and the library
// loads): what `oomb plan --device cuda` assumes
bool cudnn_attention_planned();
// What a CUDA run's attention runs on, for the train banner: cuDNN's fused attention and for what,
// or oomb's kernels and why (OOMB_CUDA_ATTENTION, --precision, whether cuDNN loads)
std::string cuda_attention_summary(bool bf16);
size_t cuda_pinned_workspace_bytes();  // the block tables' pinned staging
// The simulated device (--device sim): the CPU kernels on memory accounted in tier device, with a
// copy engine thread for each copy stream (its own queue and events, ordered like CUDA streams).
// capacity: bytes of device memory (0 = unlimited). copy_delay_us: a delay before every
// asynchronous copy, so that a missing wait gives a wrong answer rather than passing by luck
// (default: OOMB_SIM_COPY_DELAY_US); copy_out_delay_us: Stream::CopyOut's instead (default: the
// same), so that a test can make the copies out lag those in. Either may be kHoldCopies (sim_hold.h):
// each copy held until something waits for it.
std::unique_ptr<Backend> make_sim_backend(int64_t capacity = 0, int64_t copy_delay_us = -1,
                                          int64_t copy_out_delay_us = -1);
// Null when the build has no CUDA backend or no GPU is visible; `why` says which.
std::unique_ptr<Backend> make_cuda_backend(std::string* why);
// --device cpu|sim|cuda (errors name the flag): sim with --device-memory device_memory; cuda on GPU
// local_rank mod the GPUs visible (one per rank of a node under mpirun).
std::unique_ptr<Backend> make_backend(const std::string& device, int64_t device_memory = 0, int local_rank = 0);

}  // namespace oomb
