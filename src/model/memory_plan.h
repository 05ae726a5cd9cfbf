// How a run is laid out (ChunkPlan) and the memory it takes at its peak, by (tier, tag), as the
// accountant counts it (MemoryPlan). The same functions size the allocations.
#pragma once
#include <array>
#include <string>

#include "backend/backend.h"
#include "kv/kv_cache.h"
#include "kv/sparse_select.h"
#include "hf/config.h"
#include "model/lora.h"

namespace oomb {

// The order of a training step's work (--sweep): chunk by chunk through every layer (each pass
// over a chunk streams every layer's weights), or layer by layer over every chunk, each layer's
// outputs for every chunk kept in host memory (model/activation_store; each layer's weights cross
// once per pass). Both give the same bits (train/layer_sweep.cpp).
enum class SweepOrder { Chunk, Layer };

struct ChunkPlan {
  int64_t chunk = 0;                  // C, tokens per chunk
  int64_t page_size = 128;            // P, tokens per KV page
  DType kv_grad_dtype = DType::F32;   // gradient pages: f32, or bf16 (half the bytes)
  // --doc-mask: the token that ends each packed document (-1: off). A token after it starts a new
  // document: attention stays within documents, positions restart at 0, and the separator's
  // own target (the next document's first token) is not trained.
  int32_t doc_sep = -1;
  // K/V pages: f32, or bf16 (half the kv bytes). With bf16 every layer rounds its K (after RoPE)
  // and V to bf16 before attention, its own chunk's too, so chunked training still equals
  // full-sequence training; gradients pass the rounding straight through. Under precision bf16 K
  // and V are rounded either way, so bf16 pages give f32 pages' bits (the CLI's --kv-dtype auto).
  DType kv_dtype = DType::F32;
  // --offload kv: K/V and gradient pages in pinned host memory, streamed through the device in
  // groups of offload_group pages (0: the default, KVCache::group_for).
  bool offload_kv = false;
  int64_t offload_group = 0;
  // --sparse-pages K (and --sparse-tile, --sink-pages, --sparse-shared): page-sparse attention
  // (kv/sparse_select); off by default.
  SparseOptions sparse;
  // --offload params: master weights and gradients in pinned host memory, optimizer moments in
  // host memory (only the host's update touches them); the device holds two layer slots and the
  // head (ParamStore).
  bool offload_params = false;
  // LoRA (--lora-rank > 0): the base frozen (no gradients, no moments); adapters train
  LoraConfig lora;
  // --precision bf16: every matmul reads bf16 tensors (the weight matrices' bf16 copy,
  // model/bf16_weights, tag weights, and LoRA's adapters' likewise; activations and gradients cast
  // where they feed a matmul; K/V, q, the attention output and its gradient rounded to bf16 values)
  // and accumulates in fp32; norms, softmax, LSE, loss, the residual stream, master weights,
  // moments and gradient accumulation stay fp32. With --offload params the layers' bf16 images
  // cross to the device (ParamStore), the fp32 masters stay on the host; with LoRA the frozen base
  // has no fp32 masters: its matrices are held in bf16 only (frozen_bf16).
  DType precision = DType::F32;
  // --sweep chunk or layer (--sweep auto is resolved to one of them before a plan is made)
  SweepOrder sweep = SweepOrder::Chunk;
  // --keep-attention: every layer's attention output and LSE kept on the device for the whole
  // sequence of up to keep_attention tokens (0: off; tag activations), so that no layer attends again
  // before its backward: a step's attention forwards drop from 2 L - 1 to L passes in the chunk
  // order (2 L to L in the layer order or with sparse pages), against kept_attention_bytes (the
  // output in bf16 under --precision bf16, whose outputs hold bf16 values). The same bits.
  int64_t keep_attention = 0;
  // --offload attention (with --keep-attention, in the chunk order): that store in pinned host
  // memory, each chunk's rows passing through two chunks' worth of device slots
  // (model/kept_attention_offload); the same bits.
  bool offload_attention = false;
  // --sp P: the ranks sharing each chunk (Ulysses, dist/ulysses.h); the plan is one rank's. Each
  // holds C/P tokens outside attention and H/P heads (G/P kv heads: its K/V and gradient pages) in it.
  int64_t sp = 1;
  // --sp-head-chunks K: around attention each rank takes its H/P heads in K groups of whole kv heads
  // (G/P divisible by K), one group's all-to-all, attention and all-to-all back at a time, through
  // buffers of H/(P K) heads (Untied Ulysses); its pages of layer l and group j are the cache's
  // layer l K + j. The bits of K = 1.
  int64_t head_chunks = 1;
  // --dp, --zero: this rank among `ranks` (sp x dp); with zero >= 1 its optimizer holds its shard's
  // moments only (dist/grad_sync.h), and the gradient collectives stage through host memory.
  int64_t ranks = 1, rank = 0;
  int zero = 0;
  // the tensors cross ranks over a group on device memory (NCCL): device staging, none on the host
  bool device_comm = false;
};

// Attention forward passes per chunk a training step runs without --keep-attention: 2 L - 1 in the
// chunk order (the forward sweep's top layer writes its K/V only), 2 L in the layer order or with
// sparse pages (every layer attends in the forward sweep); with it, L.
inline int64_t recomputed_attention_passes(const ModelConfig& cfg, const ChunkPlan& p) {
  return p.sweep == SweepOrder::Layer || p.sparse.on() ? 2 * cfg.layers : 2 * cfg.layers - 1;
}

// --zero 3 on several ranks: masters, gradients and moments sharded per parameter range
// (model/param_shards.h), layers gathered just in time into the parameter store's device slots
// (model/param_store.h); the shards in pinned memory with --offload params (the moments' in host
// memory), else in device memory.
// Needs a device (backend tier `dev`) and full fine-tuning; check_zero3 refuses anything else.
inline bool zero3(const ChunkPlan& p) { return p.zero == 3 && p.ranks > 1; }
void check_zero3(const ChunkPlan& p, Tier dev);
// --offload params with LoRA streams the frozen base (with --train-embeddings-norms, an untied
// one: the trainable embedding and norms stay resident); refuses what it cannot take, naming the flags.
void check_offload_params(const ModelConfig& cfg, const ChunkPlan& p);

// --offload attention: needs --keep-attention, the chunk order and a device (backend tier `dev`);
// refuses anything else, naming the flags.
void check_offload_attention(const ChunkPlan& p, Tier dev);
// Where --keep-attention's store lives: the backend's memory, or pinned with --offload attention.
inline Tier kept_attention_home(const ChunkPlan& p, Tier dev) { return p.offload_attention ? Tier::Pinned : dev; }

// What one rank of --sp P sees inside attention: the model with H/P heads and G/P kv heads.
ModelConfig attention_side(const ModelConfig& cfg, int64_t sp);
// What one head group of --sp-head-chunks K attends with: H/(P K) heads and G/(P K) kv heads.
// Refuses a K that does not split G/P into whole kv heads, K > 1 without --sp, and sparse
// attention with K > 1, naming the flags and the numbers.
ModelConfig attention_group(const ModelConfig& cfg, const ChunkPlan& plan);

// The layer order computes the lm_head's gradient again beside the embedding's when the two are
// one tensor (a tied embedding that trains), so that the additions come in the chunk order's order.
bool recomputes_tied_head(const ModelConfig& cfg, const ChunkPlan& plan);
// The (2) f64 loss sums a sequence adds into (tag data), and a second pair for the loss pass whose
// sums the recomputed head adds instead.
int64_t loss_sums_bytes(const ModelConfig& cfg, const ChunkPlan& plan);

// LoRA with --precision bf16: the frozen base is held once, as the layers compute with it (bf16
// matrices, fp32 rest: model/params.h's frozen_bf16_layout), where parameters live (the backend's
// memory, or pinned with --offload params); loading rounds it to bf16 (exact for a bf16 checkpoint).
bool frozen_bf16(const ChunkPlan& plan);

// Parameters the optimizer updates: every one, or LoRA's trainable set.
int64_t trainable_count(const ModelConfig& cfg, const ChunkPlan& plan);

struct MemoryPlan {
  std::array<std::array<int64_t, kNumTags>, kNumTiers> bytes{};
  int64_t& at(Tier tier, Tag tag) { return bytes[size_t(tier)][size_t(tag)]; }
  int64_t get(Tier tier, Tag tag) const { return bytes[size_t(tier)][size_t(tag)]; }
  int64_t total(Tier tier) const;
  int64_t total() const;  // every tier
};

// What the backend's workspace depends on, for a model and chunks of at most `chunk` tokens, with
// fp32 or bf16 matmuls (--precision), on one of sp ranks sharing each chunk (--sp).
WorkspaceShape workspace_shape(const ModelConfig& cfg, int64_t chunk, const LoraConfig& lora = {},
                               DType precision = DType::F32, int64_t sp = 1);
// The same for a plan: its chunk, LoRA, precision and sp.
WorkspaceShape workspace_shape(const ModelConfig& cfg, const ChunkPlan& plan);

// The KV cache's options for a model and plan. cfg: the heads the pages hold (attention_side's,
// or the whole model's); with --sp-head-chunks K the cache has K layers of cfg's kv heads / K per
// model layer.
KVCacheOptions kv_cache_options(const ModelConfig& cfg, const ChunkPlan& plan);

// Bytes per (tier, tag) that a Model with this plan on a backend of `backend_tier` allocates for
// sequences of N tokens, at their peak, and (tag io, host) the copy `oomb train` loads the model
// through and saves it from: the masters in their host layout where they live on a device, and
// LoRA's trainable set. Not counted there: a bf16 or f16 file's conversion buffer while it loads
// (at most 16 MiB, hf/safetensors), a resume's two pieces of the AdamW moments on the device (at
// most 128 MiB), --zero 3's gathers.
// workspace_bytes: Backend::workspace_bytes (in backend_tier); pinned_workspace_bytes: the backend's
// pinned staging (Backend::pinned_workspace_bytes).
MemoryPlan plan_memory(const ModelConfig& cfg, const ChunkPlan& plan, int64_t N, const std::string& optimizer,
                       size_t workspace_bytes, Tier backend_tier = Tier::Host, size_t pinned_workspace_bytes = 0);

// Per chunk of C tokens (tag activations): each layer's input h_0..h_L, dh, the final norm's
// output and rstd (bf16: no output here, the norm writes the lm_head's bf16 operand into the layer
// plan's scratch); and each layer's attention output and LSE, kept from the recompute sweep. The
// layer order keeps two layer inputs (h_0 and a scratch output; the rest is in host memory), no dh,
// and one layer's attention output.
// (--sp P: saved_bytes of C/P tokens, saved_attention_bytes of attention_group(cfg, plan): one
// (C, H/(P K), D) and (C, H/(P K)) per layer and head group, `groups` = K of them.) bf16: the
// chunk order keeps the attention outputs in bf16 (they hold bf16 values; saved_o_dtype). kept
// (--keep-attention): no attention output buffers at all, the layers work in the store's rows.
int64_t saved_bytes(const ModelConfig& cfg, int64_t C, SweepOrder sweep, bool bf16);
DType saved_o_dtype(SweepOrder sweep, bool bf16);
int64_t saved_attention_bytes(const ModelConfig& cfg, int64_t C, SweepOrder sweep, bool bf16, int64_t groups,
                              bool kept);
// --keep-attention's store (tag activations, in place of saved_attention_bytes' chunk buffers):
// every layer's and head group's attention output (N, H, D), bf16 or f32, and LSE (N, H) f32, of
// attention_group(cfg, plan)'s heads. Each pass addresses chunk c's rows of it directly.
int64_t kept_attention_bytes(const ModelConfig& cfg, int64_t N, int64_t groups, bool bf16);
// With --offload attention the store is in pinned memory (kept_attention_home) and the device holds
// two chunks' rows of it: 2 kept_attention_bytes(cfg, C, groups, bf16).

}  // namespace oomb
