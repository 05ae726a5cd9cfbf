// One decoder layer (attention + gated MLP, each branch's input normalized, or with OLMo 2 its output, or
// with Gemma 3 both):
// forward, and backward from its saved input.
// Buffers for T tokens are planned once (LayerPlan); nothing is allocated per call.
#pragma once
#include <functional>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "dist/ulysses.h"
#include "kv/kv_cache.h"
#include "kv/sparse_select.h"
#include "hf/config.h"
#include "model/params.h"

namespace oomb {

// Per-layer activations of one pass over T tokens (recomputed in backward from the layer input).
// With sequence parallelism (--sp P) a rank holds t = T/P of the tokens with every head outside
// attention (the token side: (t, d), (t, H, D)), and every token with H/P heads inside it (the
// attention side: q, o, lse, k, v and their gradients, (T, H/P, D)); P = 1: t = T, one side. With
// --sp-head-chunks K the attention side holds one head group at a time: H/(P K) heads, G/(P K) kv
// heads (below, H and G on the attention side are those of one group).
// (*: only matmuls read it: bf16 under --precision bf16, written so by its op, rounded as a cast
// rounds; f32 otherwise.)
struct LayerActs {
  // (OLMo 2 / 3, no ModelConfig::pre_norm: a and b are h_in's and hmid's copies the matmuls read, bf16
  // under --precision bf16, else not allocated (the matmuls read h_in and hmid); rstd1 and rstd2 are
  // the norms' of y1 and y2, o_proj's and down's outputs (t, d) before them. Gemma 3, both: a and b
  // as Llama's, rstd3 and rstd4 those of y1 and y2.)
  Tensor a, rstd1;       // attn-norm output (t, d)*, its rstd (t)
  Tensor q, o, lse;      // attention side: (T, H, D) after RoPE, attention output (T, H, D), (T, H)
  Tensor hmid;           // h + attention (T, d)
  Tensor b, rstd2;       // mlp-norm output (T, d)*, (T)
  Tensor gate, up, act;  // (T, I); act*
  // q/k norms: q and k before their norm (T, H, D), (T, G, D) and the rows' rstd: Qwen3's per head
  // (T*H), (T*G), OLMo 2's per token (the first T of each)
  Tensor q_raw, k_raw, rstd_q, rstd_k;
  Tensor y1, y2;  // OLMo 2, Gemma 3, GLM-4 (ModelConfig::post_norm): o_proj's and down's outputs before their norms (T, d)
  Tensor rstd3, rstd4;  // Gemma 3, GLM-4: their norms' rstd (T)
};
struct LayerGradScratch {
  Tensor dq, dattn;         // (T, H, D)
  Tensor dq_raw, dk_raw;    // (T, H, D), (T, G, D): through the q/k norms (Qwen3, OLMo 2 / 3)
  Tensor da, db;            // (T, d) (db: not without pre_norm, whose branch input gradient goes into dh)
  Tensor dgate, dup, dact;  // (T, I); dgate*, dup*
};

struct LayerBuffers;
// A norm's weight gradient g, or, where the norm is frozen (LoRA: g empty), scratch nobody reads,
// shaped as the norm's weight w.
Tensor& norm_grad(Tensor& g, const Tensor& w, LayerBuffers& b);

struct LayerBuffers {
  LayerActs acts;
  LayerGradScratch g;
  Tensor k, v;    // (T, G, D) this chunk's K (after RoPE) and V
  Tensor dk, dv;  // (T, G, D) their gradients
  Tensor run_sum;  // (T, H) attention's running denominator while groups of pages fold in
  // LoRA (rank r > 0 only): x A^T scaled (T, r), its gradient (T, r), the adapter's output
  // (T * widest out, viewed as (T, out)), and where frozen norms' weight gradients go (unread)
  Tensor lora_u, lora_du, lora_z, discard, discard_as;
  // --precision bf16: (T, max(d, H D, I)) bf16 each (dy16 at least (T, 2 H D): attention's
  // backward takes its copies of q and dO there): a matmul's input and its output's gradient,
  // cast for the GEMM (viewed (T, width) of the tensor cast); with LoRA also (T, r) bf16: the
  // adapter's inner product x A^T (forward) or its gradient (backward), cast for its second GEMM
  Tensor x16, dy16, lora_u16;
  // While attention runs (under --precision bf16, whose K/V hold bf16 values whatever the pages'
  // dtype): bf16 copies of k and v in x16 that attention reads for the chunk's own keys
  // (layer.cpp: own_kv16); empty otherwise
  Tensor k16, v16;
  // While attention's backward runs (under --precision bf16, whose q and dO hold bf16 values):
  // bf16 copies of q and dO in dy16, handed to attention beside them (layer.cpp: qdo16); empty
  // otherwise
  Tensor q16, do16;
  // The token side of what crosses the all-to-all (P > 1; P = 1: the same tensors as the
  // attention side's): q, o, dO (t, H, D), k, v (t, G, D); dq, dk, dv reuse q's, k's, v's memory.
  Tensor q_loc, o_loc, dattn_loc, k_loc, v_loc, dq_loc, dk_loc, dv_loc;
  LayerBuffers first(int64_t T, int64_t P = 1) const;  // views of the first T tokens (T/P on the token side)
  // The attention output and LSE kept elsewhere (the model's saved attention): o[j], lse[j] of
  // head group j < K, (C, H, D) and (C, H) each, of which the first T rows are used. acts.o and
  // acts.lse become group 0's (and with one rank the token side's o too: the same tensor); the
  // layer takes group j's as it reaches it (keep_group).
  // A bf16 o kept (--precision bf16's chunk order, or its --keep-attention store in either order:
  // o holds bf16 values) is kept_o16 instead, and acts.o stays the plan's own f32 o, where
  // attention works: the layer casts it out and back.
  void keep_attention_in(const Tensor* o, const Tensor* lse, int64_t T) {
    if (o[0].dtype == DType::F32 && o_loc.data == acts.o.data) o_loc = o[0].rows(0, T);
    kept_o = o, kept_lse = lse;
    keep_group(0);
  }
  void keep_group(int64_t j) {
    if (!kept_o) return;
    const Tensor o = kept_o[j].rows(0, acts.q.dim(0));
    (o.dtype == DType::BF16 ? kept_o16 : acts.o) = o;
    acts.lse = kept_lse[j].rows(0, acts.q.dim(0));
  }
  const Tensor *kept_o = nullptr, *kept_lse = nullptr;
  Tensor kept_o16;
};

// The static plan for chunks of up to T tokens, all tagged activations: it does not grow with the
// sequence (earlier tokens' K/V live in pages, tagged kv and kv_grad).
class LayerPlan {
 public:
  // sp: the ranks sharing each chunk (P; T divisible by P, the heads and kv heads too); head_chunks:
  // K, the attention side sized for one group of H/(P K) heads (G/(P K) kv heads).
  LayerPlan(const ModelConfig& c, int64_t T, Tier tier, int64_t lora_rank = 0, bool bf16 = false, int64_t sp = 1,
            int64_t head_chunks = 1);
  static int64_t bytes(const ModelConfig& c, int64_t T, int64_t lora_rank = 0, bool bf16 = false, int64_t sp = 1,
                       int64_t head_chunks = 1);
  LayerBuffers view(int64_t T) const { return all_.first(T, sp_); }

 private:
  Arena arena_;
  LayerBuffers all_;
  int64_t sp_ = 1;
};

struct LayerCtx {
  const ModelConfig& cfg;
  Backend& be;
  RopeTable rope;
  Tensor pos;  // (t) i32 RoPE positions of the token side's tokens
  AttnArgs attn;  // attn.q_idx0: sequence index of the chunk's first token (attention side: every token)
  // The cache whose pages of earlier tokens attention reads (KVCache::prefix of layer `layer`, or
  // with head groups of its cache layer layer K + j), in groups; in backward their dk/dv are
  // accumulated into. Null: no earlier tokens.
  KVCache* pages = nullptr;
  // The cache whose gradient pages hold what later chunks contributed to this chunk's dK/dV: the
  // backward starts from them (null: from zero, as in full-sequence training).
  KVCache* cache = nullptr;
  // The cache the chunk's K/V go into (the forward sweep), each head group's once attention has
  // read them (null: not written).
  KVCache* kv_write = nullptr;
  int64_t layer = 0;
  // --sp-head-chunks K: attention over this rank's heads in K groups, group j's pages the cache's
  // layer layer K + j
  int64_t head_chunks = 1;
  // Sparse attention (--sparse-pages): the selector and the cache its chosen pages come from
  // (null: every earlier page, through `prefix`). choose: the forward sweep chooses (and records)
  // from this chunk's queries; otherwise the recorded choice is read back.
  SparseSelector* sparse = nullptr;
  KVCache* sparse_cache = nullptr;
  bool sparse_choose = false;
  int64_t block = 64;  // tokens per block of the chunk's own K/V handed to attention
  bool kv_bf16 = false;  // round K (after RoPE) and V to bf16 values (bf16 K/V pages)
  bool bf16 = false;     // --precision bf16: the base's matmuls read bf16 tensors (ChunkPlan)
  SeqParallel* sp = nullptr;  // --sp P > 1: the all-to-all between the token and attention sides
  // --lora-dropout while training (0: none; evaluation and generation): p, the sequence's window
  // key (backend/dropout_mask.h) and the sequence position of the token side's first token
  double lora_dropout = 0;
  uint64_t dropout_key = 0;
  int64_t tok0 = 0;
};

// How much of the layer a forward pass runs: all of it; only until K/V exist (the forward sweep's
// last layer); all but attention, whose output plan.acts.o and lse already hold, or where a bf16 o
// is kept (bf16's chunk order; --keep-attention's bf16 store in either order) kept_o16 and lse (the
// recompute before a layer's backward, from the recompute sweep's saved attention, or with
// --keep-attention the forward sweep's); or only what h_out needs from
// that output (OutputOnly: no q, k, v, RoPE or their all-to-alls; --keep-attention's recompute
// sweep below the top layer, whose internals the recompute before each backward makes again).
enum class LayerPass { Full, KVOnly, SavedAttention, OutputOnly };

// h_out (T, d) = layer(h_in); fills plan.acts, plan.k, plan.v (with head groups: the last group's
// q, k, v; the token side's q_loc, k_loc, v_loc hold every head).
void layer_forward(const LayerCtx& ctx, const LayerParams& p, const Tensor& h_in, Tensor& h_out, LayerBuffers& plan,
                   LayerPass pass = LayerPass::Full);
// dh: (T, d), in = dL/dh_out, out = dL/dh_in. Needs plan.acts of the same h_in. Grads accumulate into g.
void layer_backward(const LayerCtx& ctx, const LayerParams& p, LayerParams& g, const Tensor& h_in, Tensor& dh,
                    LayerBuffers& plan);

}  // namespace oomb
