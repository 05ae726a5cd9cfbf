#include "train/model.h"

#include "model/param_shards.h"
#include "model/rope.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

namespace oomb {

static KVCacheOptions checked_options(const ModelConfig& cfg, const ChunkPlan& plan) {
  OOMB_CHECK(plan.chunk > 0, "--chunk-size: must be positive, got {}", plan.chunk);
  OOMB_CHECK(plan.page_size > 0, "--page-size: must be positive, got {}", plan.page_size);
  return kv_cache_options(cfg, plan);
}

// --sp P: a chunk's tokens and the model's heads split between the P ranks.
static ModelConfig checked_sp(const ModelConfig& cfg, const ChunkPlan& plan, const Comm* sp) {
  OOMB_CHECK(plan.sp == (sp ? sp->size() : 1), "model: --sp {} but a group of {} ranks", plan.sp,
             sp ? sp->size() : 1);
  OOMB_CHECK(plan.chunk % plan.sp == 0, "--chunk-size {}: not divisible by --sp {} (each rank takes C / {} of "
             "every chunk's tokens)", plan.chunk, plan.sp, plan.sp);
  OOMB_CHECK(plan.sp == 1 || !plan.sparse.shared, "--sparse-shared with --sp {}: the shared choice sums over every "
             "head, which the ranks split; use per-group selection (drop --sparse-shared)", plan.sp);
  attention_group(cfg, plan);  // --sp-head-chunks: K splits the rank's kv heads (else a clear error)
  return attention_side(cfg, plan.sp);
}

// --zero 3 on several ranks: every rank's communicator, and the layout of this rank's shards.
static Comm* checked_zero3(const ModelConfig& cfg, const ChunkPlan& plan, Tier dev, Comm* world) {
  check_zero3(plan, dev);
  check_offload_params(cfg, plan);
  if (!zero3(plan)) return nullptr;
  OOMB_CHECK(world && world->size() == plan.ranks && world->rank() == plan.rank,
             "model: --zero 3 needs the world of {} ranks", plan.ranks);
  return world;
}

// --keep-attention's store: with --offload attention, only with a device and the chunk order.
static const ChunkPlan& checked_keep(const ChunkPlan& plan, Tier dev) {
  check_offload_attention(plan, dev);
  return plan;
}

// The whole model's layout (host_layout), and the masters' (under --zero 3 this rank's shards).
static std::vector<ParamSpec> whole_layout(const ModelConfig& cfg, const ChunkPlan& plan) {
  return frozen_bf16(plan) ? frozen_bf16_layout(cfg) : param_layout(cfg);
}
static std::vector<ParamSpec> master_layout(const ModelConfig& cfg, const ChunkPlan& plan) {
  return zero3(plan) ? ParamShards::of(cfg, int(plan.rank), int(plan.ranks)).layout(cfg) : whole_layout(cfg, plan);
}

Model::Model(const ModelConfig& cfg, Backend& be, const ChunkPlan& plan, Comm* sp, Comm* world)
    : cfg_(cfg),
      be_(be),
      plan_(plan),
      att_cfg_(checked_sp(cfg, plan, sp)),
      world_(checked_zero3(cfg, plan, be.tier(), world)),
      params_(cfg, master_layout(cfg, plan), ParamStore::home(be, plan.offload_params), Tag::Weights),
      store_(cfg, be, plan.offload_params, plan.precision == DType::BF16, world_, plan.chunk / plan.sp),
      cache_(checked_options(att_cfg_, plan), be),
      inputs_(plan.chunk, plan.doc_sep, cfg.vocab, be),
      saved_(be.tier(), Tag::Activations,
             size_t(saved_bytes(cfg, plan.chunk / plan.sp, plan.sweep, plan.precision == DType::BF16))),
      saved_attn_(be.tier(), Tag::Activations,
                  size_t(saved_attention_bytes(attention_group(cfg, plan), plan.chunk, plan.sweep,
                                                plan.precision == DType::BF16, plan.head_chunks,
                                                plan.keep_attention > 0))),
      kept_attn_(kept_attention_home(checked_keep(plan, be.tier()), be.tier()), Tag::Activations,
                 size_t(kept_attention_bytes(attention_group(cfg, plan), plan.keep_attention, plan.head_chunks,
                                             plan.precision == DType::BF16))),
      layer_plan_(cfg, plan.chunk, be.tier(), plan.lora.rank, plan.precision == DType::BF16, plan.sp,
                  plan.head_chunks),
      sums_(be.tier(), Tag::Data, size_t(loss_sums_bytes(cfg, plan))) {
  inv_freq_ = rope_inv_freq(cfg, &attention_scaling_);
  inv_freq_plain_ = rope_inv_freq_plain(cfg);
  rope_switch_ = rope_switch_length(cfg);
  const int64_t C = plan.chunk, Cl = C / plan.sp;
  if (plan.sp > 1) {
    sp_ = std::make_unique<SeqParallel>(*sp, be, Cl * cfg.heads * cfg.head_dim, plan.head_chunks);
    sp_rank_ = sp->rank();
  }
  const bool layer_order = plan.sweep == SweepOrder::Layer;
  // the layer order keeps layer inputs in host memory: here only h_0 and a scratch, alternating
  for (int64_t l = 0; l <= cfg.layers; ++l) {
    const Tensor t = layer_order && l >= 2 ? h_[size_t(l % 2)] : saved_.take(DType::F32, {Cl, cfg.hidden});
    h_.push_back(t);
  }
  if (!layer_order) dh_ = saved_.take(DType::F32, {Cl, cfg.hidden});
  if (plan.precision != DType::BF16) hnorm_ = saved_.take(DType::F32, {Cl, cfg.hidden});  // (bf16: final_norm)
  rstd_final_ = saved_.take(DType::F32, {Cl});
  xent_stats_ = saved_.take(DType::F64, {Cl, 4});
  const int64_t K = plan.head_chunks, Hg = att_cfg_.heads / K;  // head groups, each one's heads
  // layer l / K's head group l % K (--keep-attention: none, the layers work in the store's rows)
  for (int64_t l = 0; plan.keep_attention == 0 && l < cfg.layers * K; ++l) {
    const bool fresh = !layer_order || l < K;
    const DType o_dtype = saved_o_dtype(plan.sweep, plan.precision == DType::BF16);
    const Tensor o = fresh ? saved_attn_.take(o_dtype, {C, Hg, cfg.head_dim}) : att_o_[size_t(l % K)];
    const Tensor lse = fresh ? saved_attn_.take(DType::F32, {C, Hg}) : att_lse_[size_t(l % K)];
    att_o_.push_back(o);
    att_lse_.push_back(lse);
  }
  OOMB_CHECK(plan.keep_attention >= 0, "--keep-attention: {} tokens", plan.keep_attention);
  for (int64_t l = 0; plan.keep_attention > 0 && l < cfg.layers * K; ++l) {
    const DType o16 = plan.precision == DType::BF16 ? DType::BF16 : DType::F32;  // (bf16: o holds bf16 values)
    kept_o_.push_back(kept_attn_.take(o16, {plan.keep_attention, Hg, cfg.head_dim}));
    kept_lse_.push_back(kept_attn_.take(DType::F32, {plan.keep_attention, Hg}));
  }
  if (plan.keep_attention > 0) kept_chunk_o_.resize(size_t(K)), kept_chunk_lse_.resize(size_t(K));
  if (plan.offload_attention) kept_home_ = std::make_unique<KeptAttentionOffload>(be, kept_o_, kept_lse_, C);
  sums_t_ = Tensor(sums_.data(), DType::F64, {2}, be.tier());
  tied_head_ = recomputes_tied_head(cfg, plan);
  if (tied_head_) pass_sums_ = Tensor(sums_.as<double>() + 2, DType::F64, {2}, be.tier());
  // (--sp: this rank's rows of every chunk, C / P of each)
  if (layer_order) acts_ = std::make_unique<ActivationStore>(cfg, be, Cl, ActivationStore::arrays(cfg, tied_head_));
  for (int64_t l = 0; l < cfg.layers; ++l) bottom_up_.push_back(l), top_down_.push_back(cfg.layers - 1 - l);
  for (const int64_t l : bottom_up_)  // the cache's layers in the same orders: each layer's head groups
    for (int64_t j = 0; j < K; ++j) cache_up_.push_back(l * K + j);
  for (const int64_t l : top_down_)
    for (int64_t j = 0; j < K; ++j) cache_down_.push_back(l * K + j);
  OOMB_CHECK(plan.precision == DType::F32 || plan.precision == DType::BF16, "--precision: {} is not one of fp32, "
             "bf16", dtype_name(plan.precision));
  layers_ = params_.layers;
  embed_ = params_.embed, final_norm_ = params_.final_norm, lm_head_ = params_.lm_head;
  if (frozen_bf16(plan)) {  // the base as it computes (bf16 matrices, fp32 rest); a tied lm_head's bf16 copy
    if (cfg.tie_word_embeddings && !plan.offload_params) {
      tied16_ = Buffer(be.tier(), Tag::Weights, size_t(cfg.vocab * cfg.hidden) * 2);
      lm_head_ = Tensor(tied16_.data(), DType::BF16, {cfg.vocab, cfg.hidden}, be.tier());
    }
  } else if (plan.precision == DType::BF16 && !plan.offload_params && !world_) {  // the matmuls read the matrices' bf16 copy
    w16_ = std::make_unique<Bf16Weights>(cfg, be.tier());
    for (size_t l = 0; l < layers_.size(); ++l) {
      const LayerParams& w = w16_->layers[l];
      LayerParams& L = layers_[l];
      L.wq = w.wq, L.wk = w.wk, L.wv = w.wv, L.wo = w.wo, L.wgate = w.wgate, L.wup = w.wup, L.wdown = w.wdown;
    }
    lm_head_ = w16_->lm_head;
  }
  if (plan.lora.on()) {
    check_lora(plan.lora);
    train_ = std::make_unique<Params>(cfg, lora_layout(cfg, plan.lora), be.tier(), Tag::Weights);
    layers_ = lora_layers(layers_, *train_, cfg, plan.lora);
    if (!train_->embed.empty()) embed_ = train_->embed;
    if (!train_->final_norm.empty()) final_norm_ = train_->final_norm;
    const bool bf16 = plan.precision == DType::BF16;
    if (cfg.tie_word_embeddings && !bf16) lm_head_ = embed_;
    OOMB_CHECK(!(bf16 && !train_->embed.empty() && cfg.tie_word_embeddings), "--precision bf16 with "
               "--train-embeddings-norms on tied embeddings: not supported yet");
    if (bf16) {  // the adapters' GEMMs read their bf16 copy too (PEFT under autocast)
      a16_ = std::make_unique<Bf16Weights>(cfg, plan.lora, be.tier());
      for (size_t l = 0; l < layers_.size(); ++l)
        for (int t = 0; t < kLoraTargets; ++t)
          if (!a16_->layers[l].lora[t].a.empty()) layers_[l].lora[t] = a16_->layers[l].lora[t];
    }
  }
  if (plan.sparse.on()) sparse_ = std::make_unique<SparseSelector>(plan.sparse, cache_.options().kv, be);
  store_.bind(params_, {layers_, embed_, final_norm_, lm_head_, plan.lora.on() && plan.lora.train_embeddings_norms});
}

bool Model::sync_compute_weights() {
  const bool changed = !train_ || base_dirty_;  // (full fine-tuning: every optimizer step)
  if (w16_) w16_->sync(be_, params_);
  if (tied16_.data() != nullptr && base_dirty_) be_.cast(params_.embed, lm_head_);
  base_dirty_ = false;
  if (a16_) a16_->sync(be_, *train_);
  return changed;
}

Model::~Model() { be_.synchronize(); }

void Model::enable_grads() {
  if (grads_) return;
  if (!train_) {
    grads_ = std::make_unique<Params>(cfg_, master_layout(cfg_, plan_), ParamStore::home(be_, plan_.offload_params),
                                      Tag::Grads);
    grad_layers_ = grads_->layers;
  } else {
    grads_ = std::make_unique<Params>(cfg_, train_->specs(), be_.tier(), Tag::Grads);
    grad_layers_ = lora_layers({}, *grads_, cfg_, plan_.lora);
  }
  store_.bind_grads(*grads_, {grad_layers_, grads_->embed, grads_->final_norm, grads_->lm_head});
}

void Model::zero_grads() { store_.zero_grads(); }

LossStats Model::forward_backward(const ChunkReader& read, int64_t N, float weight, int64_t per) {
  OOMB_CHECK(grads_ != nullptr, "model: forward_backward needs enable_grads() first");
  OOMB_CHECK(per >= 0, "model: forward_backward's target count must not be negative, got {}", per);
  return run(read, N, weight, per, true);
}

LossStats Model::evaluate(const ChunkReader& read, int64_t N) { return run(read, N, 1.0f, 0, false); }

LossStats Model::evaluate(const ChunkReader& read, int64_t N, const ChunkObserver& after_chunk) {
  return run(read, N, 1.0f, 0, false, after_chunk);
}

float Model::loss_scale(float weight, int64_t per, int64_t targets) {
  OOMB_CHECK(per > 0 || targets > 0, "model: the sequence has no targets to train on");
  return weight / float(per > 0 ? per : targets);
}

static ChunkReader array_reader(const int32_t* ids, const int32_t* targets) {
  return [=](int64_t t0, int64_t n, int32_t* i, int32_t* t) {
    std::memcpy(i, ids + t0, size_t(n) * 4);
    std::memcpy(t, targets + t0, size_t(n) * 4);
  };
}

LossStats Model::forward_backward(const int32_t* ids, const int32_t* targets, int64_t N, float weight) {
  return forward_backward(array_reader(ids, targets), N, weight);
}

LossStats Model::evaluate(const int32_t* ids, const int32_t* targets, int64_t N) {
  return evaluate(array_reader(ids, targets), N);
}

std::vector<ParamSpec> Model::host_layout() const { return whole_layout(cfg_, plan_); }

// A host copy of the masters (not --zero 3's): laid out as they are.
static void check_host_copy(const Params& host, const Params& masters) {
  OOMB_CHECK(host.flat().bytes() == masters.flat().bytes() && host.mixed() == masters.mixed(),
             "model: parameters of another layout{}", masters.mixed() ? " (a frozen bf16 base: lay the host's out as "
             "host_layout())" : "");
}

void Model::upload_params(const Params& host) {
  if (world_) {  // (shards on the device: packed on the host first)
    OOMB_CHECK(host.flat().numel() == param_count(cfg_), "model: parameters of another shape");
    const Tensor& p = params_.flat();
    Buffer stage(Tier::Host, Tag::IO, p.tier == Tier::Device ? p.bytes() : 0);
    float* packed = p.tier == Tier::Device ? stage.as<float>() : p.f();
    ParamShards::of(cfg_, world_->rank(), world_->size()).pack(host.flat().f(), packed);
    if (p.tier == Tier::Device) be_.copy(p.data, p.tier, packed, Tier::Host, p.bytes());
    return;
  }
  check_host_copy(host, params_);
  base_dirty_ = true;
  be_.copy(params_.flat().data, params_.flat().tier, host.flat().data, Tier::Host, params_.flat().bytes());
}

void Model::download_params(Params& host) const {
  if (world_) {  // (shards on the device: copied to the host first)
    OOMB_CHECK(host.flat().numel() == param_count(cfg_), "model: parameters of another shape");
    const Tensor& p = params_.flat();
    Buffer stage(Tier::Host, Tag::IO, p.tier == Tier::Device ? p.bytes() : 0);
    if (p.tier == Tier::Device) be_.copy(stage.data(), Tier::Host, p.data, p.tier, p.bytes());
    return ParamShards::gather(cfg_, *world_, p.tier == Tier::Device ? stage.as<float>() : p.f(), host.flat().f());
  }
  check_host_copy(host, params_);
  be_.copy(host.flat().data, Tier::Host, params_.flat().data, params_.flat().tier, params_.flat().bytes());
}

void Model::upload_trainable(const Params& host) {
  if (!train_) return upload_params(host);
  OOMB_CHECK(host.flat().numel() == train_->flat().numel(), "model: a LoRA set of another shape");
  be_.copy(train_->flat().data, be_.tier(), host.flat().data, Tier::Host, train_->flat().bytes());
}

void Model::download_trainable(Params& host) const {
  if (!train_) return download_params(host);
  OOMB_CHECK(host.flat().numel() == train_->flat().numel(), "model: a LoRA set of another shape");
  be_.copy(host.flat().data, Tier::Host, train_->flat().data, be_.tier(), train_->flat().bytes());
}

// The layer's view of the chunk: when it attends, the blocks of every page before the chunk
// (partial pages cut at its first token) and, when with_grads, the gradient pages they
// accumulate into; with_grads also starts the chunk's own dK/dV from its gradient pages.
// Sparse: the chunk's query tiles read their chosen pages, chosen now (the forward sweep) or
// recalled from the forward sweep's record. The forward sweep also writes the chunk's K/V.
LayerCtx Model::layer_ctx(int64_t l, ChunkSpan c, bool attends, bool with_grads, bool forward_sweep) {
  AttnArgs attn;
  attn.scale = attention_scale(cfg_);
  attn.q_idx0 = c.begin;
  attn.q_doc = inputs_.doc();
  attn.window = size_t(l) < cfg_.layer_window.size() ? cfg_.layer_window[size_t(l)] : 0;
  attn.bf16 = plan_.precision == DType::BF16;
  // every call on the backend's own kernels where calls are per query tile over chosen pages (the
  // plan's dense_attention is the same predicate)
  attn.own_kernels = plan_.sparse.on();
  // (OLMo 3's and Gemma 3's sliding layers: the plain RoPE, of their own theta)
  const RopeTable rope = cfg_.rope_scaled(l)
                             ? RopeTable{inv_freq_.data(), attention_scaling_, rope_dim(cfg_), 0, cfg_.rope_interleaved()}
                             : RopeTable{inv_freq_plain_.data(), 1.0f, rope_dim(cfg_), 1, cfg_.rope_interleaved()};
  LayerCtx ctx{cfg_, be_, rope, mine(inputs_.pos(c.size()), c.size()), attn};
  ctx.sp = sp_.get();
  if (attends && sparse_ && c.begin > 0) {
    ctx.sparse = sparse_.get();
    ctx.sparse_cache = &cache_;
    ctx.sparse_choose = forward_sweep;
  } else if (attends) {
    ctx.pages = &cache_;
  }
  if (with_grads) ctx.cache = &cache_;
  if (forward_sweep) ctx.kv_write = &cache_;
  ctx.layer = l;
  ctx.head_chunks = plan_.head_chunks;
  ctx.kv_bf16 = plan_.kv_dtype == DType::BF16 || plan_.precision == DType::BF16;
  ctx.bf16 = plan_.precision == DType::BF16;
  if (training_ && plan_.lora.dropout > 0) {
    ctx.lora_dropout = plan_.lora.dropout;
    ctx.dropout_key = dropout_key_;
    ctx.tok0 = c.begin + sp_rank_ * local(c.size());
  }
  return ctx;
}

// Layer l's saved attention output and LSE (one per head group) for chunk c: the chunk buffers
// (att_o_), or while keeping (--keep-attention) chunk c's rows of the store itself, where the
// forward sweep's attention writes them and every later pass reads them (each head group's
// (n, H/K, D): all n tokens of the chunk, this rank's heads).
void Model::keep_attention(LayerBuffers& buf, int64_t l, ChunkSpan c) {
  const int64_t n = c.size();
  const size_t at = size_t(l * plan_.head_chunks);
  if (!keeping_) {
    OOMB_CHECK(at < att_o_.size(), "model: layer {}'s attention output has no buffer (a model planned for "
               "--keep-attention keeps them only while training)", l);
    return buf.keep_attention_in(&att_o_[at], &att_lse_[at], n);
  }
  for (size_t j = 0; j < kept_chunk_o_.size(); ++j) {  // (offloaded: the chunk's rows in their device slot)
    kept_chunk_o_[j] = kept_home_ ? kept_home_->o(at + j, c) : kept_o_[at + j].rows(c.begin, n);
    kept_chunk_lse_[j] = kept_home_ ? kept_home_->lse(at + j, c) : kept_lse_[at + j].rows(c.begin, n);
  }
  buf.keep_attention_in(kept_chunk_o_.data(), kept_chunk_lse_.data(), n);
}

// Layer l's K/V and gradient pages (every head group's) from first_page on.
void Model::release_pages(int64_t l, int64_t first_page) {
  for (int64_t j = 0; j < plan_.head_chunks; ++j) cache_.release_from(l * plan_.head_chunks + j, first_page);
}

// Embedding and every layer of chunk c, keeping each layer's input in h_.
//   Forward: attention over the earlier pages, K/V written into pages.
//   ForwardKVOnlyLast: the same, but the last layer stops once its K/V are written.
//   Recompute: nothing written; each layer's attention output and LSE kept for its backward.
//   RecomputeKept: nothing written, no layer attends: their outputs are the forward sweep's. Below
//     the top only h_{l+1} is made (LayerPass::OutputOnly): the recompute before each backward
//     makes their internals again; the top layer's (SavedAttention) stay for its backward.
void Model::forward_layers(ChunkSpan c, Sweep sweep) {
  const int64_t n = c.size(), L = cfg_.layers;
  const bool write = sweep == Sweep::Forward || sweep == Sweep::ForwardKVOnlyLast;
  const int64_t attending = sweep == Sweep::ForwardKVOnlyLast ? L - 1 : sweep == Sweep::RecomputeKept ? 0 : L;
  auto rest = [&](int64_t l) {  // the pass of a layer that does not attend
    if (sweep != Sweep::RecomputeKept) return LayerPass::KVOnly;
    return l + 1 < L ? LayerPass::OutputOnly : LayerPass::SavedAttention;
  };
  if (!sparse_)  // sparse attention reads the pages it chose, layer by layer
    cache_.begin_pass(std::span<const int64_t>(cache_up_).first(size_t(attending * plan_.head_chunks)), c.begin,
                      false);
  OOMB_CHECK(n % plan_.sp == 0, "--sp {}: a chunk of {} tokens does not split evenly (--seq-len and --chunk-size "
             "must be multiples of --sp)", plan_.sp, n);
  const int64_t t = local(n);  // this rank's tokens (all of them with one rank)
  LayerBuffers buf = layer_plan_.view(n);
  Tensor h0 = h_[0].rows(0, t);
  store_.begin_pass(bottom_up_, false);
  embed(n, h0);
  for (int64_t l = 0; l < L; ++l) {
    const size_t li = size_t(l);
    const LayerCtx ctx = layer_ctx(l, c, l < attending, false, write);
    if (!write || keeping_) keep_attention(buf, l, c);  // (the forward sweep's are kept only to keep them)
    Tensor h_out = h_[li + 1].rows(0, t);
    layer_forward(ctx, store_.acquire(l), h_[li].rows(0, t), h_out, buf,
                  l < attending ? LayerPass::Full : rest(l));  // (writes the K/V when `write`)
    store_.release(l);
  }
}

void Model::embed(int64_t n, Tensor& h0) {
  store_.embed_fwd(mine(inputs_.ids(n), n), my_host_ids(n), h0);
  if (cfg_.embed_scale() != 1.0) be_.scale(h0, float(cfg_.embed_scale()));
}

void Model::embed_bwd(int64_t n, Tensor& dh) {
  if (cfg_.embed_scale() != 1.0) be_.scale(dh, float(cfg_.embed_scale()));
  store_.embed_bwd(mine(inputs_.ids(n), n), my_host_ids(n), dh);
}

// rstd_final and the final RMSNorm of the last layer's output h (n, d), the lm_head's input,
// returned: into hnorm (n, d), or with --precision bf16 written in bf16 (rounded as a cast rounds)
// into the layer plan's matmul scratch (free between the layers' passes; no hnorm then). Granite's
// logits_scaling divides it in place (the logits, linear in it, so divided; bf16: rounded again,
// exact for the powers of two Granite's files give).
Tensor Model::final_norm(const Tensor& h) {
  const int64_t n = h.dim(0);
  const bool bf16 = plan_.precision == DType::BF16;
  Tensor hn = bf16 ? Tensor(layer_plan_.view(n).x16.data, DType::BF16, {n, cfg_.hidden}, be_.tier())
                  : hnorm_.rows(0, n);
  Tensor rstd = rstd_final_.rows(0, n);
  be_.rmsnorm_fwd(h, store_.final_norm(), float(cfg_.rms_norm_eps), hn, rstd, cfg_.norm_offset());
  if (cfg_.logits_scaling != 1.0) be_.scale(hn, float(1.0 / cfg_.logits_scaling), hn);
  return hn;
}

void Model::final_norm_bwd(const Tensor& h, Tensor& dhn, Tensor& dh, LayerBuffers& buf) {
  const int64_t n = h.dim(0);
  if (cfg_.logits_scaling != 1.0) be_.scale(dhn, float(1.0 / cfg_.logits_scaling));
  // (under LoRA a frozen final norm's gradient goes to scratch)
  be_.rmsnorm_bwd(h, store_.final_norm(), rstd_final_.rows(0, n), dhn, dh, false,
                  norm_grad(store_.grad_final_norm(), store_.final_norm(), buf), cfg_.norm_offset());
}

void Model::head_loss(const Tensor& hn, const Tensor& targets, float scale, Tensor* dh, bool dw, Tensor& sums) {
  const int64_t K = store_.head_tiles();
  Tensor stats = xent_stats_.rows(0, hn.dim(0));
  store_.begin_head(false, false);
  for (int64_t j = 0; j < K; ++j) {
    be_.lm_head_xent_stats(hn, store_.head_tile(j), store_.head_tile_v0(j), targets, stats);
    store_.release_head_tile(j);
  }
  be_.lm_head_xent_loss(stats, targets, sums);
  dw = dw && store_.head_has_grad();  // (under LoRA a frozen lm_head has no gradient)
  if (!dh && !dw) return;
  store_.begin_head(true, dw);
  for (int64_t j = K - 1; j >= 0; --j) {
    const Tensor& w = store_.head_tile(j);
    be_.lm_head_xent_grad(hn, w, store_.head_tile_v0(j), targets, stats, scale, dh, j != K - 1,
                          dw ? &store_.head_grad_tile(j) : nullptr);
    store_.release_head_tile(j);
  }
}

void Model::head_logits(const Tensor& hn, float* out) {
  const int64_t n = hn.dim(0), V = cfg_.vocab;
  store_.begin_head(false, false);
  for (int64_t j = 0; j < store_.head_tiles(); ++j) {
    const Tensor& w = store_.head_tile(j);
    const int64_t v0 = store_.head_tile_v0(j), Vt = w.dim(0);
    Tensor l(logits_tile_.data(), DType::F32, {n, Vt}, be_.tier());
    be_.linear_fwd(hn, w, nullptr, l);
    // the tile's rows into theirs of out (n, V): one strided copy, one wait
    be_.copy_rows(out + v0, size_t(V) * 4, Tier::Host, l.data, size_t(Vt) * 4, be_.tier(), size_t(Vt) * 4, size_t(n));
    store_.release_head_tile(j);
  }
}

// The one readback of a sequence: its loss and hits.
void Model::read_sums(LossStats& st) {
  double s[2];
  if (sp_) sp_->sum_to_host(sums_.data(), s, 2);  // every rank scored its own tokens
  else be_.copy(s, Tier::Host, sums_.data(), be_.tier(), sizeof s);
  st.loss_sum = s[0];
  st.correct = int64_t(s[1]);
}

void Model::use_rope_for(int64_t length) {
  if (rope_switch_ == 0 || (length > rope_switch_) == rope_long_) return;
  inv_freq_ = rope_inv_freq(cfg_, &attention_scaling_, length);
  rope_long_ = length > rope_switch_;
}

int64_t Model::rope_length(const ChunkReader& read, int64_t N) const {
  if (rope_switch_ == 0 || plan_.doc_sep < 0) return N;
  const int64_t C = plan_.chunk;
  std::vector<int32_t> ids(size_t(std::min(C, N))), targets(ids.size());
  int64_t longest = 0, start = 0;  // a document starts at 0 and after each separator
  for (int64_t t0 = 0; t0 < N; t0 += C) {
    const int64_t n = std::min(C, N - t0);
    read(t0, n, ids.data(), targets.data());
    for (int64_t i = 0; i < n; ++i) {
      longest = std::max(longest, t0 + i - start + 1);
      if (ids[size_t(i)] == plan_.doc_sep) start = t0 + i + 1;
    }
  }
  return longest;
}

void Model::logits(const int32_t* ids, int64_t N, float* out) {
  OOMB_CHECK(N > 0, "model: sequence length must be positive, got {}", N);
  OOMB_CHECK(!sp_, "logits: not with --sp (each rank holds only its tokens' logits)");
  const bool changed = sync_compute_weights();
  const int64_t C = plan_.chunk, V = cfg_.vocab;
  logits_tile_ = Buffer(be_.tier(), Tag::Workspace, size_t(C * lm_head_vocab_tile(V)) * 4);
  std::vector<int32_t> none(size_t(N), -1);
  const ChunkReader read = array_reader(ids, none.data());
  use_rope_for(rope_length(read, N));
  cache_.begin_sequence(N, std::min(C, N), false);
  if (sparse_) sparse_->begin_sequence(N, C, false);
  inputs_.begin_sequence();
  store_.begin_sequence(false, changed);
  for (int64_t t = 0; t < chunk_count(N, C); ++t) {
    const ChunkSpan c = chunk_span(N, C, t);
    const int64_t n = c.size();
    inputs_.load(read, c, true, cache_.docs());
    forward_layers(c, Sweep::Forward);
    head_logits(final_norm(h_.back().rows(0, n)), out + c.begin * V);
  }
  store_.end_sequence();
  cache_.clear();
  logits_tile_.reset();
}

void Model::begin_decode(int64_t max_tokens) {
  OOMB_CHECK(max_tokens > 0, "generate: the sequence must hold at least one token, got {}", max_tokens);
  OOMB_CHECK(plan_.doc_sep < 0, "generate: --doc-mask does not apply to generation");
  OOMB_CHECK(!sp_, "generate: not with --sp");
  const bool changed = sync_compute_weights();
  cache_.begin_sequence(max_tokens, std::min(plan_.chunk, max_tokens), false);
  if (sparse_) sparse_->begin_sequence(max_tokens, plan_.chunk, false);
  inputs_.begin_sequence();
  store_.begin_sequence(false, changed);
  if (logits_tile_.bytes() == 0) logits_tile_ = Buffer(be_.tier(), Tag::Workspace, size_t(lm_head_vocab_tile(cfg_.vocab)) * 4);
  decoded_ = 0;
  decode_max_ = max_tokens;
  decode_ids_.clear();
}

void Model::decode(const int32_t* ids, int64_t n, float* out) {
  OOMB_CHECK(decode_max_ > 0, "generate: begin_decode first");
  OOMB_CHECK(n > 0 && n <= plan_.chunk, "generate: {} tokens at once, expected 1 to the chunk size {}", n,
             plan_.chunk);
  OOMB_CHECK(decoded_ + n <= decode_max_, "generate: {} tokens exceed the {} the sequence was begun with",
             decoded_ + n, decode_max_);
  if (redecode_at_switch() && decoded_ > 0 && decoded_ <= rope_switch_ && decoded_ + n > rope_switch_) {
    // Phi-3's longrope: past the switch every position takes the long factors, the cached ones too
    std::vector<int32_t> all = std::move(decode_ids_);
    all.insert(all.end(), ids, ids + n);
    const int64_t max_tokens = decode_max_, C = plan_.chunk, total = int64_t(all.size());
    end_decode();
    begin_decode(max_tokens);
    use_rope_for(total);
    for (int64_t i = 0; i < total; i += C) decode_step(all.data() + i, std::min(C, total - i), out);
    decode_ids_.clear();  // (past the switch: never needed again)
    return;
  }
  use_rope_for(decoded_ + n);
  decode_step(ids, n, out);
}

void Model::decode_step(const int32_t* ids, int64_t n, float* out) {
  if (redecode_at_switch() && decoded_ + n <= rope_switch_) decode_ids_.insert(decode_ids_.end(), ids, ids + n);
  const ChunkSpan c{decoded_, decoded_ + n};
  const ChunkReader read = [&](int64_t t0, int64_t k, int32_t* i, int32_t* t) {
    std::memcpy(i, ids + (t0 - c.begin), size_t(k) * 4);
    std::fill_n(t, k, -1);  // no targets: generation computes no loss
  };
  inputs_.load(read, c, true, cache_.docs());
  forward_layers(c, Sweep::Forward);  // every layer's K/V of these tokens go into the pages
  head_logits(final_norm(h_.back().rows(0, n)).rows(n - 1, 1), out);
  decoded_ += n;
}

void Model::end_decode() {
  store_.end_sequence();
  cache_.clear();
  decoded_ = decode_max_ = 0;
}

LossStats Model::run(const ChunkReader& read, int64_t N, float weight, int64_t per, bool backward,
                     const ChunkObserver& after_chunk) {
  OOMB_CHECK(N > 0, "model: sequence length must be positive, got {}", N);
  // --keep-attention: while training, every chunk's attention outputs stay for its backward
  struct Unset {
    bool &a, &b;
    ~Unset() { a = b = false; }
  } unset{keeping_, training_};
  keeping_ = backward && plan_.keep_attention > 0;
  training_ = backward;
  use_rope_for(rope_length(read, N));
  OOMB_CHECK(!keeping_ || N <= plan_.keep_attention, "--keep-attention: the model keeps attention outputs for "
             "sequences of up to {} tokens (its --seq-len), got {}", plan_.keep_attention, N);
  if (backward && acts_) return run_layer_major(read, N, weight, per);
  const int64_t C = plan_.chunk, T = chunk_count(N, C), P = plan_.page_size, L = cfg_.layers;
  const bool changed = sync_compute_weights();
  cache_.begin_sequence(N, std::min(C, N), backward);
  if (sparse_) sparse_->begin_sequence(N, C, backward);
  inputs_.begin_sequence();
  store_.begin_sequence(backward, changed);
  be_.zero(sums_t_);
  LossStats st;
  const bool homing = keeping_ && kept_home_;  // --offload attention: the kept rows pass through device slots
  if (homing) {
    chunks_up_.resize(size_t(T));
    std::iota(chunks_up_.begin(), chunks_up_.end(), int64_t(0));
    chunks_down_.assign(chunks_up_.rbegin(), chunks_up_.rend());
    kept_home_->begin_pass(N, chunks_up_, true);
  }

  // Forward sweep: fill the K/V pages chunk by chunk (with the loss too when only evaluating).
  for (int64_t t = 0; t < T; ++t) {
    const ChunkSpan c = chunk_span(N, C, t);
    const int64_t n = c.size();
    st.targets += inputs_.load(read, c, true, cache_.docs());
    // sparse: the last layer attends too, so that its choice is made (and recorded) here, from
    // the page metadata as the forward sweep sees it
    // (keeping, the last layer attends too: its output is kept for the backward)
    forward_layers(c, backward && !sparse_ && !keeping_ ? Sweep::ForwardKVOnlyLast : Sweep::Forward);
    if (homing) kept_home_->next();
    if (!backward) {
      head_loss(final_norm(h_.back().rows(0, local(n))), mine(inputs_.targets(n), n), 1.0f, nullptr, false, sums_t_);
      if (after_chunk) {
        read_sums(st);
        after_chunk(c, st);
      }
    }
  }
  if (!backward) {
    read_sums(st);
    store_.end_sequence();
  cache_.clear();
    return st;
  }
  const float scale = loss_scale(weight, per, st.targets);

  // Backward sweep, chunks in reverse.
  if (homing) kept_home_->begin_pass(N, chunks_down_, false);
  for (int64_t t = T - 1; t >= 0; --t) {
    const ChunkSpan c = chunk_span(N, C, t);
    const int64_t n = c.size();
    inputs_.load(read, c, false, cache_.docs());
    // keeps each layer's input, attention output and LSE (keeping: attends to nothing, the outputs are kept)
    forward_layers(c, keeping_ ? Sweep::RecomputeKept : Sweep::Recompute);
    LayerBuffers buf = layer_plan_.view(n);
    const int64_t tn = local(n);  // this rank's tokens
    const Tensor hn = final_norm(h_.back().rows(0, tn));
    Tensor dh = dh_.rows(0, tn), dhn = buf.g.da;  // (tn, d) scratch, free until the layers' backward
    head_loss(hn, mine(inputs_.targets(n), n), scale, &dhn, true, sums_t_);
    final_norm_bwd(h_.back().rows(0, tn), dhn, dh, buf);
    const int64_t first_free = (c.begin + P - 1) / P;  // pages starting at or after the chunk
    if (!sparse_) cache_.begin_pass(cache_down_, c.begin, true);
    store_.begin_pass(top_down_, true);
    for (int64_t l = L - 1; l >= 0; --l) {
      const size_t li = size_t(l);
      const LayerCtx ctx = layer_ctx(l, c, true, true, false);
      Tensor h_in = h_[li].rows(0, tn), h_out = h_[li + 1].rows(0, tn);
      keep_attention(buf, l, c);
      // recompute the internals but attention (the top layer's are still there)
      const LayerParams& p = store_.acquire(l);
      if (l + 1 < L) layer_forward(ctx, p, h_in, h_out, buf, LayerPass::SavedAttention);
      layer_backward(ctx, p, store_.grads_of(l), h_in, dh, buf);
      store_.release(l);
      // no remaining (earlier) chunk reads these tokens' K/V or their gradients
      release_pages(l, first_free);
    }
    embed_bwd(n, dh);
    cache_.docs().release_from(first_free);
    if (homing) kept_home_->next();
  }
  read_sums(st);
  store_.end_sequence();
  cache_.clear();
  return st;
}

}  // namespace oomb
