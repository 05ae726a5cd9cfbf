// A decoder-only model (Llama / Qwen2 / Mistral) trained chunk-recurrently (design notes:
// shared/DESIGN.md, section 2), and the chunk schedule that runs it. Its parts, each with one
// job: the parameters (model/params) and where they live (model/param_store), the KV cache with its residency (kv/kv_cache), the chunk
// inputs (model/chunk_inputs), one layer's math (model/layer) and the memory plan
// (model/memory_plan). The schedule:
//   forward sweep, chunks in order: every layer attends over its earlier pages and writes its
//     K/V into pages (the last layer stops once its K/V exist);
//   backward sweep, chunks in reverse: a recompute sweep over the layers keeps each layer's input
//     and its attention output and LSE; the loss; then each layer from the top recomputes its
//     internals except attention, runs its backward (dK/dV of every page read accumulate in place
//     into gradient pages; the chunk's own dK/dV start from its gradient pages), and frees the
//     pages no earlier chunk reads.
// Each pass announces the order in which layers read their pages (KVCache::begin_pass) and their
// weights (ParamStore::begin_pass), which is what the offloaded cache and store prefetch on. One chunk of C = N tokens is full-sequence training.
// With --sweep layer (ChunkPlan::sweep) a training step runs layer by layer instead, with the same
// bits (train/layer_sweep.cpp); evaluation and generation always run the chunk order.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "kv/kv_cache.h"
#include "model/activation_store.h"
#include "model/chunk_inputs.h"
#include "model/kept_attention_offload.h"
#include "hf/config.h"
#include "model/bf16_weights.h"
#include "model/layer.h"
#include "model/memory_plan.h"
#include "model/param_store.h"
#include "model/params.h"

namespace oomb {

struct LossStats {
  double loss_sum = 0;  // summed cross-entropy over counted targets
  int64_t targets = 0;  // targets counted (ids >= 0)
  int64_t correct = 0;  // argmax hits
};

class Model {
 public:
  // sp: the group of plan.sp ranks sharing each sequence (--sp; dist/ulysses.h): each rank embeds,
  // projects and scores C/P of every chunk's tokens, attends with H/P heads over all of them, and
  // its pages hold G/P kv heads; the loss sums are summed over the group, so every rank returns the
  // sequence's loss. Null: one rank. world: every rank (plan.ranks of them), needed by --zero 3
  // (plan.zero): the masters, gradients and moments are this rank's shards (model/param_shards.h),
  // each layer gathered just in time by the parameter store.
  Model(const ModelConfig& cfg, Backend& be, const ChunkPlan& plan, Comm* sp = nullptr, Comm* world = nullptr);
  ~Model();
  const ModelConfig& config() const { return cfg_; }
  const ChunkPlan& plan() const { return plan_; }
  // The fp32 masters: in the backend's memory, or in pinned host memory with --offload params
  // (ChunkPlan::offload_params), where gradients and the optimizer's moments live too. With LoRA
  // under --precision bf16 (frozen_bf16), the frozen base in its mixed layout: bf16 matrices.
  Params& params() {  // (writable: what is made from the base is made again before the next pass)
    base_dirty_ = true;
    return params_;
  }
  // What the optimizer updates: params(), or with LoRA (plan.lora) the adapters' set (model/lora.h),
  // whose layout grads() then has too (the frozen base has no gradients).
  Params& trainable() { return train_ ? *train_ : params_; }
  Params& grads() { return *grads_; }
  Backend& backend() { return be_; }
  void enable_grads();  // allocates the gradient buffer (tag grads), zeroed
  void zero_grads();    // every gradient := 0 (between steps)
  const ParamStore& store() const { return store_; }
  ParamStore& store() { return store_; }
  bool sharded() const { return world_ != nullptr; }  // --zero 3: params() and grads() are this rank's shards
  // Parameters from / to host memory (load and save through them when the masters are on a device).
  // --zero 3: upload takes this rank's shards of the whole model; download gathers every rank's
  // (collective: every rank calls it).
  // host: laid out as host_layout() (the whole model: param_layout, or a frozen bf16 base's).
  std::vector<ParamSpec> host_layout() const;
  void upload_params(const Params& host);
  void download_params(Params& host) const;
  void upload_trainable(const Params& host);  // LoRA's set (with LoRA off: upload_params)
  void download_trainable(Params& host) const;

  // One sequence of N tokens. Grads accumulate weight / per * d(summed cross-entropy)/dparam: per
  // = 0 divides by the sequence's own targets (its mean loss), per > 0 by a count the caller chose
  // (the trainer: every target of the step, so that windows holding fewer targets weigh less). The
  // host waits for the device once, at the end, for the loss.
  LossStats forward_backward(const ChunkReader& read, int64_t N, float weight, int64_t per = 0);
  // --lora-dropout: the masks of the sequences forward_backward trains from now on (the trainer
  // sets dropout_window_key(--seed, the window) before each; backend/dropout_mask.h). Default 0.
  void set_dropout_key(uint64_t key) { dropout_key_ = key; }
  LossStats evaluate(const ChunkReader& read, int64_t N);
  // The same, calling after_chunk after every chunk with the chunk and the sums of the sequence so
  // far (one host wait per chunk: oomb eval's loss by position).
  using ChunkObserver = std::function<void(ChunkSpan c, const LossStats& so_far)>;
  LossStats evaluate(const ChunkReader& read, int64_t N, const ChunkObserver& after_chunk);
  // Logits of every position of a sequence of N tokens: out (N, V), host memory, fp32.
  void logits(const int32_t* ids, int64_t N, float* out);
  // The same over whole arrays (tests, small inputs).
  LossStats forward_backward(const int32_t* ids, const int32_t* targets, int64_t N, float weight);
  LossStats evaluate(const int32_t* ids, const int32_t* targets, int64_t N);

  // Incremental decoding (oomb generate): the K/V of a growing sequence of at most max_tokens stay
  // in the cache between calls. decode appends tokens [length(), length() + n) (n <= C) and writes
  // the logits of the last one to out (V), host memory, fp32. Under longrope the tokens past its
  // switch length take the long factors; on Phi-3 the sequence that first grows past it is decoded
  // again from its start with them (transformers' Phi3ForCausalLM drops its cache there; its other
  // models keep the cached keys of the short factors, and so does oomb).
  void begin_decode(int64_t max_tokens);
  void decode(const int32_t* ids, int64_t n, float* out);
  int64_t decoded() const { return decoded_; }
  void end_decode();

  const KVCache& kv_cache() const { return cache_; }
  // The layer order's host arrays (null in the chunk order): their traffic (tests, benchmarks).
  const ActivationStore* activations() const { return acts_.get(); }
  // --offload attention's slots (null without it): their traffic (tests, benchmarks).
  const KeptAttentionOffload* kept_attention_offload() const { return kept_home_.get(); }
  // Tests only: "tied-head" adds a tied embedding's lm_head gradient in the layer order's loss pass
  // (as a plain layer order would) instead of beside the embedding's; "reduce-once": --zero 3's
  // layer order reduces a layer's gradients once for every chunk (ParamStore::reduce_chunk skipped);
  // to show that the tests see it.
  static void layer_sweep_fault_for_test(const char* which);
  // Sparse attention's selector (null when dense): the choices of the last sequence (tests).
  const SparseSelector* sparse() const { return sparse_.get(); }
  const PagedKV& kv() const { return cache_.kv(); }
  const PagedKV& kv_grad() const { return cache_.kv_grad(); }

 private:
  // RecomputeKept: the recompute of --keep-attention, whose layers attend to nothing (their
  // attention outputs are kept from the forward sweep)
  enum class Sweep { Forward, ForwardKVOnlyLast, Recompute, RecomputeKept };
  LossStats run(const ChunkReader& read, int64_t N, float weight, int64_t per, bool backward,
                const ChunkObserver& after_chunk = {});
  LossStats run_layer_major(const ChunkReader& read, int64_t N, float weight, int64_t per);  // train/layer_sweep.cpp
  // The loss gradient's scale per target (forward_backward's weight / per, with `targets` counted).
  static float loss_scale(float weight, int64_t per, int64_t targets);
  LayerCtx layer_ctx(int64_t layer, ChunkSpan c, bool attends, bool with_grads, bool forward_sweep);
  void keep_attention(LayerBuffers& buf, int64_t layer, ChunkSpan c);
  void release_pages(int64_t layer, int64_t first_page);
  void forward_layers(ChunkSpan c, Sweep sweep);
  // h0 (this rank's rows of the loaded chunk of n tokens) = the embedding's rows of their ids, times
  // Granite's embedding_multiplier; embed_bwd, its backward from dh0 (dh scaled so in place first)
  void embed(int64_t n, Tensor& h0);
  void embed_bwd(int64_t n, Tensor& dh);
  // The lm_head's input: the final RMSNorm of h (n, d), divided by Granite's logits_scaling (so the
  // logits are); final_norm_bwd, its backward from dhn (that input's gradient, scaled in place) into
  // dh, the final norm's weight gradient accumulated
  Tensor final_norm(const Tensor& h);
  void final_norm_bwd(const Tensor& h, Tensor& dhn, Tensor& dh, LayerBuffers& buf);
  // The fused loss of hn (n, d) against the lm_head's vocabulary tiles (the param store's): the
  // tiles ascending into the rows' statistics, the loss into sums, then (dh or dw) the tiles
  // descending for dh (n, d) and the lm_head's gradient.
  void head_loss(const Tensor& hn, const Tensor& targets, float scale, Tensor* dh, bool dw, Tensor& sums);
  // logits (n, V) of hn (n, d) tile by tile, row r to out + r * V (host memory)
  void head_logits(const Tensor& hn, float* out);
  void read_sums(LossStats& st);

  ModelConfig cfg_;
  Backend& be_;
  ChunkPlan plan_;
  ModelConfig att_cfg_;  // attention_side(cfg_, plan_.sp): this rank's heads and kv heads
  Comm* world_ = nullptr;             // --zero 3 only
  std::unique_ptr<SeqParallel> sp_;  // --sp P > 1: the all-to-all; null with one rank
  int64_t sp_rank_ = 0;
  // this rank's rows of a chunk of n tokens (its token side): [sp_rank_ n / P, (sp_rank_ + 1) n / P)
  int64_t local(int64_t n) const { return n / plan_.sp; }
  Tensor mine(const Tensor& t, int64_t n) const { return t.rows(sp_rank_ * local(n), local(n)); }
  const int32_t* my_host_ids(int64_t n) const { return inputs_.host_ids() + sp_rank_ * local(n); }
  Params params_;
  std::unique_ptr<Params> train_;  // LoRA's trainable set (tag weights); null without LoRA
  // --precision bf16: the weight matrices' bf16 copy (parameters resident; offloaded, the store
  // holds it), and with LoRA the adapters' (a16_)
  std::unique_ptr<Bf16Weights> w16_, a16_;
  // LoRA with --precision bf16 (frozen_bf16), resident and tied: the lm_head's bf16 copy of the
  // embedding, made again when the base may have changed (base_dirty_)
  Buffer tied16_;
  bool base_dirty_ = true;
  // w16_ from params_, a16_ from train_ (before each pass: the optimizer moved them); whether the
  // masters may have changed since the last pass (false only for a frozen base left alone)
  bool sync_compute_weights();
  std::unique_ptr<Params> grads_;
  // the tensors the sweeps compute with: params_', or with LoRA the base's with adapters bound and
  // trainable norms / embedding from train_; and the gradients' per-layer views
  std::vector<LayerParams> layers_, grad_layers_;
  Tensor embed_, final_norm_, lm_head_;
  ParamStore store_;     // hands the sweeps those views, or with --offload params the device's slots
  std::vector<float> inv_freq_;
  float attention_scaling_ = 1.0f;
  std::vector<float> inv_freq_plain_;  // the layers that take no scaling (ModelConfig::rope_scaled): rope_theta's alone
  // longrope (model/rope.h): sequences longer than rope_switch_ take the long factors' table
  int64_t rope_switch_ = 0;
  bool rope_long_ = false;
  void use_rope_for(int64_t length);
  // The length transformers picks LongRoPE's table by, max(position_ids) + 1: N, or with --doc-mask
  // (positions restarting per document) the sequence's longest document (read through `read`).
  int64_t rope_length(const ChunkReader& read, int64_t N) const;
  KVCache cache_;        // K/V, KV-gradient and document pages (tags kv, kv_grad, data)
  std::unique_ptr<SparseSelector> sparse_;  // --sparse-pages: the choice of pages (tag page_meta)
  ChunkInputs inputs_;   // ids, targets, positions, documents of one chunk (tag data)
  Arena saved_;          // one chunk's layer inputs h_0..h_L, dh, final norm (tag activations)
  Arena saved_attn_;     // one chunk's attention output and LSE per layer (tag activations; empty under --keep-attention)
  // --keep-attention's store: layers x head groups of (N, H, D) (bf16 under --precision bf16) and
  // (N, H) (tag activations; kept_attention_bytes)
  Arena kept_attn_;
  LayerPlan layer_plan_;
  Buffer sums_;          // (2) f64: loss and hits of the sequence so far (tag data)
  Tensor dh_, hnorm_, rstd_final_, sums_t_;
  Tensor xent_stats_;  // (C / P, 4) f64: the loss's per-row statistics
  std::vector<Tensor> h_;               // layers + 1 of (C, d) (the layer order: two, alternating)
  // layers x head groups of (C, H, D) and (C, H), layer l's group j at l K + j (the layer order: one
  // layer's, at every l); none under --keep-attention (the store's rows stand in)
  std::vector<Tensor> att_o_, att_lse_;
  std::vector<Tensor> kept_o_, kept_lse_;  // --keep-attention's store (kept_attn_), as att_o_
  std::vector<Tensor> kept_chunk_o_, kept_chunk_lse_;  // one chunk's rows of a layer's, each head group's
  // --offload attention: the store (kept_attn_) in pinned memory, chunks' rows through device slots
  std::unique_ptr<KeptAttentionOffload> kept_home_;
  bool keeping_ = false;  // this run keeps every chunk's attention output (--keep-attention, training)
  bool training_ = false;  // this run trains (forward_backward): --lora-dropout drops
  uint64_t dropout_key_ = 0;  // set_dropout_key's
  // the layer order: the host arrays, the chunks in order and reversed (--offload attention's passes
  // take them too), the loss pass's sums when
  // the tied head's are added later (tied_head_)
  std::unique_ptr<ActivationStore> acts_;
  std::vector<int64_t> chunks_up_, chunks_down_;
  Tensor pass_sums_;
  bool tied_head_ = false;
  std::vector<int64_t> bottom_up_, top_down_;  // layer orders of the passes
  std::vector<int64_t> cache_up_, cache_down_;  // the same over the cache's layers (K head groups per layer)
  int64_t decoded_ = 0, decode_max_ = 0;      // incremental decoding: tokens so far, capacity
  // Phi-3's longrope: the tokens so far (at most the switch length), decoded again when the table changes
  std::vector<int32_t> decode_ids_;
  bool redecode_at_switch() const { return rope_switch_ > 0 && cfg_.arch == Arch::Phi3; }
  void decode_step(const int32_t* ids, int64_t n, float* out);
  Buffer logits_tile_;  // logits of one vocabulary tile: (C, Vt) in logits(), (1, Vt) decoding (tag workspace)
};

}  // namespace oomb
