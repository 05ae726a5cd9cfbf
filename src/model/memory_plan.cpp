#include "model/memory_plan.h"

#include <algorithm>

#include "core/error.h"
#include "dist/grad_sync.h"
#include "dist/ulysses.h"
#include "model/activation_store.h"
#include "model/bf16_weights.h"
#include "model/chunk_inputs.h"
#include "model/layer.h"
#include "model/param_shards.h"
#include "model/rope.h"
#include "model/param_store.h"
#include "model/params.h"

namespace oomb {

int64_t MemoryPlan::total(Tier tier) const {
  int64_t s = 0;
  for (int64_t b : bytes[size_t(tier)])
    OOMB_CHECK(b >= 0 && !__builtin_add_overflow(s, b, &s), "memory plan: the {} bytes overflow 64 bits",
               tier_name(tier));
  return s;
}

int64_t MemoryPlan::total() const {
  int64_t s = 0;
  for (Tier t : kTiers)
    OOMB_CHECK(!__builtin_add_overflow(s, total(t), &s), "memory plan: the total bytes overflow 64 bits");
  return s;
}

// Every byte count of a plan is a sum of products of N or C with the model's dimensions. They are
// bounded here, in 128 bits, with margin (x64 for the counts of buffers and rounding), so that none
// of the 64-bit computations below (and in the pools they size) can wrap.
static void check_plan_size(const ModelConfig& c, int64_t N, int64_t C, int64_t P) {
  using i128 = __int128;
  const i128 limit = i128(1) << 62;
  const i128 width = i128(c.hidden) + c.intermediate + i128(c.heads) * (c.head_dim + 1) + i128(c.kv_heads) * c.head_dim;
  const i128 kv = (i128(N) + 4096) * c.layers * c.kv_heads * c.head_dim * 64;
  const i128 act = i128(C) * (c.layers + 3) * width * 64;
  OOMB_CHECK(N > 0 && C > 0, "memory plan: N = {} and C = {} must be positive", N, C);
  OOMB_CHECK(kv < limit, "--seq-len {}: the K/V pages of {} layers would take more than 2^62 bytes (the plan's "
             "sizes would overflow); no machine holds this", N, c.layers);
  OOMB_CHECK(act < limit, "--chunk-size {}: a chunk's activations would take more than 2^62 bytes (the plan's "
             "sizes would overflow)", C);
  OOMB_CHECK(i128(P) * 64 < limit, "memory plan: {} parameters overflow the plan's byte counts", P);
}

bool frozen_bf16(const ChunkPlan& plan) { return plan.lora.on() && plan.precision == DType::BF16; }

int64_t trainable_count(const ModelConfig& cfg, const ChunkPlan& plan) {
  return plan.lora.on() ? lora_param_count(cfg, plan.lora) : param_count(cfg);
}

WorkspaceShape workspace_shape(const ModelConfig& c, int64_t chunk, const LoraConfig& lora, DType precision,
                               int64_t sp) {
  const int64_t params = lora.on() ? lora_param_count(c, lora) : param_count(c);
  // bf16 adapters' operands fit the scratch the base's widest bf16 matmul takes (the CPU widens
  // x, w and dy: T (in + r) + r in <= T (d + X) + d X when r <= min(d, X))
  const int64_t widest = std::min(c.hidden, std::max(c.heads * c.head_dim, c.intermediate));
  OOMB_CHECK(precision != DType::BF16 || !lora.on() || lora.rank <= widest, "--lora-rank {} with --precision bf16: "
             "at most {} (the hidden size or the widest projection, whichever is smaller)", lora.rank, widest);
  WorkspaceShape s{c.vocab, chunk, c.heads / sp, c.head_dim, params, precision == DType::BF16, c.hidden,
                   c.intermediate, chunk / sp};
  s.kv_heads = c.kv_heads / sp;
  s.q_width = c.heads * c.head_dim;
  bool scaled = false, plain = false;  // (RopeTable::slot 0 and 1: the device keeps a copy of each used)
  for (int64_t l = 0; l < c.layers; ++l) (c.rope_scaled(l) ? scaled : plain) = true;
  s.rope_tables = std::max(1, int(scaled) + int(plain));
  s.rope_dim = rope_dim(c);
  return s;
}

WorkspaceShape workspace_shape(const ModelConfig& c, const ChunkPlan& plan) {
  WorkspaceShape s = workspace_shape(c, plan.chunk, plan.lora, plan.precision, plan.sp);
  // calls that see their keys unmasked but by causality (whole, or folding in page groups with
  // --offload kv): no sparse selection or documents, a layer without a window (AttnArgs::own_kernels
  // keeps sparse runs off cuDNN)
  const bool full_layer = c.layer_window.empty() ||
                          std::any_of(c.layer_window.begin(), c.layer_window.end(), [](int64_t w) { return w == 0; });
  s.dense_attention = !plan.sparse.on() && plan.doc_sep < 0 && full_layer;
  s.head_chunks = plan.head_chunks;
  // --offload params keeps the gradients in host memory (LoRA's adapters stay on the device), whose
  // norm the host sums: no device partials for it (Model::enable_grads, ParamStore::home)
  if (plan.offload_params && !plan.lora.on()) s.params = 0;
  return s;
}

ModelConfig attention_side(const ModelConfig& cfg, int64_t sp) {
  OOMB_CHECK(sp >= 1, "--sp: must be at least 1, got {}", sp);
  OOMB_CHECK(cfg.heads % sp == 0 && cfg.kv_heads % sp == 0, "--sp {}: each rank takes heads / {} and kv heads / "
             "{} in attention, but the model has {} heads and {} kv heads (use an --sp dividing both)", sp, sp, sp,
             cfg.heads, cfg.kv_heads);
  ModelConfig a = cfg;
  a.heads /= sp;
  a.kv_heads /= sp;
  return a;
}

ModelConfig attention_group(const ModelConfig& cfg, const ChunkPlan& plan) {
  const int64_t K = plan.head_chunks, P = plan.sp;
  OOMB_CHECK(K >= 1, "--sp-head-chunks: must be at least 1, got {}", K);
  const ModelConfig a = attention_side(cfg, P);
  if (K == 1) return a;
  OOMB_CHECK(P > 1, "--sp-head-chunks {}: needs --sp 2 or more (head chunks split the heads each Ulysses rank "
             "attends with)", K);
  OOMB_CHECK(a.kv_heads % K == 0, "--sp-head-chunks {}: each of the --sp {} ranks attends with {} kv heads ({} query "
             "heads), which do not split into {} groups of whole kv heads (use a K dividing {})", K, P, a.kv_heads,
             a.heads, K, a.kv_heads);
  OOMB_CHECK(!plan.sparse.on(), "--sp-head-chunks {} with --sparse-pages: not supported (the sparse choice is made "
             "per layer over every kv head group at once; use --sp-head-chunks 1)", K);
  return attention_side(cfg, P * K);
}

KVCacheOptions kv_cache_options(const ModelConfig& c, const ChunkPlan& p) {
  const int64_t K = p.head_chunks;
  OOMB_CHECK(K >= 1 && c.kv_heads % K == 0, "--sp-head-chunks {}: {} kv heads do not split into {} groups", K,
             c.kv_heads, K);
  KVCacheOptions o;
  o.kv = {c.layers * K, c.kv_heads / K, c.head_dim, p.page_size, p.kv_dtype};
  o.grad = {c.layers * K, c.kv_heads / K, c.head_dim, p.page_size, p.kv_grad_dtype};
  o.head_chunks = K;
  o.docs = p.doc_sep >= 0;
  o.offload = p.offload_kv;
  o.group = p.offload_group;
  o.chunk = p.chunk;
  for (const int64_t w : c.layer_window) o.windows.insert(o.windows.end(), size_t(K), w);  // each group: its layer's
  o.meta = p.sparse.on();
  o.score = p.sparse.score;
  o.sparse_pages = p.sparse.on() ? p.sparse.most_pages(c.kv_heads) : 0;
  o.layer_major = p.sweep == SweepOrder::Layer;
  return o;
}

int64_t saved_bytes(const ModelConfig& c, int64_t C, SweepOrder sweep, bool bf16) {
  const int64_t rows = (sweep == SweepOrder::Layer ? 3 : c.layers + 3) - (bf16 ? 1 : 0);
  return rows * int64_t(Arena::need(DType::F32, {C, c.hidden})) + int64_t(Arena::need(DType::F32, {C})) +
         int64_t(Arena::need(DType::F64, {C, 4}));  // the final norm's rstd, the loss's row statistics
}

// (the layer order keeps one layer's, where the layer works on it: f32)
DType saved_o_dtype(SweepOrder sweep, bool bf16) {
  return bf16 && sweep == SweepOrder::Chunk ? DType::BF16 : DType::F32;
}

int64_t saved_attention_bytes(const ModelConfig& c, int64_t C, SweepOrder sweep, bool bf16, int64_t groups,
                              bool kept) {
  if (kept) return 0;
  const int64_t layers = (sweep == SweepOrder::Layer ? 1 : c.layers) * groups;
  return layers * int64_t(Arena::need(saved_o_dtype(sweep, bf16), {C, c.heads, c.head_dim}) +
                          Arena::need(DType::F32, {C, c.heads}));
}

int64_t kept_attention_bytes(const ModelConfig& c, int64_t N, int64_t groups, bool bf16) {
  if (N <= 0) return 0;
  return c.layers * groups *
         int64_t(Arena::need(bf16 ? DType::BF16 : DType::F32, {N, c.heads, c.head_dim}) + Arena::need(DType::F32, {N, c.heads}));
}

int64_t loss_sums_bytes(const ModelConfig& cfg, const ChunkPlan& plan) {
  return recomputes_tied_head(cfg, plan) ? 32 : 16;
}

bool recomputes_tied_head(const ModelConfig& cfg, const ChunkPlan& plan) {
  return plan.sweep == SweepOrder::Layer && cfg.tie_word_embeddings &&
         (!plan.lora.on() || plan.lora.train_embeddings_norms);
}

void check_zero3(const ChunkPlan& p, Tier dev) {
  if (!zero3(p)) return;
  OOMB_CHECK(dev == Tier::Device, "--zero 3: needs a device (--device sim or cuda): each layer is gathered into the "
             "parameter store's device slots just in time");
  OOMB_CHECK(!p.lora.on(), "--zero 3 with LoRA: not supported yet (the frozen base would be sharded; use --zero 2)");
}

void check_offload_attention(const ChunkPlan& p, Tier dev) {
  if (!p.offload_attention) return;
  OOMB_CHECK(p.keep_attention > 0, "--offload attention: only with --keep-attention (it moves the kept attention "
             "outputs into pinned host memory)");
  OOMB_CHECK(dev == Tier::Device, "--offload attention: the backend has no device memory to offload from (use "
             "--device sim or cuda)");
  OOMB_CHECK(p.sweep == SweepOrder::Chunk, "--offload attention: only in the chunk order (--sweep chunk); the layer "
             "order keeps its attention outputs on the device");
}

void check_offload_params(const ModelConfig& cfg, const ChunkPlan& p) {
  if (!p.offload_params || !p.lora.on()) return;
  OOMB_CHECK(!p.lora.train_embeddings_norms || !cfg.tie_word_embeddings, "--offload params with "
             "--train-embeddings-norms on tied embeddings: not supported yet (the lm_head would stream the frozen "
             "base's table, not the trained one; an adapter from --lora with modules_to_save trains them too)");
  OOMB_CHECK(!zero3(p), "--zero 3 with LoRA: not supported yet (the frozen base would be sharded; use --zero 2)");
}

MemoryPlan plan_memory(const ModelConfig& cfg, const ChunkPlan& plan, int64_t N, const std::string& optimizer,
                       size_t workspace_bytes, Tier dev, size_t pinned_workspace_bytes) {
  check_zero3(plan, dev);
  check_offload_params(cfg, plan);
  check_offload_attention(plan, dev);
  const int64_t P = param_count(cfg), C = std::min(plan.chunk, N), sp = plan.sp;
  check_plan_size(cfg, N, C, P);
  ChunkPlan used = plan;
  used.chunk = C;
  const ModelConfig att = attention_side(cfg, sp);  // what this rank's attention and pages hold
  const ModelConfig grp = attention_group(cfg, plan);  // what one head group's attention holds
  const int64_t K = plan.head_chunks;
  MemoryPlan m;
  // the masters and what trains (LoRA: a set of its own beside the frozen base) where they live;
  // offloaded, the device's layer slots and head beside them; --precision bf16's copy on the device
  // (LoRA's trainable set, its gradients and moments stay in the backend's memory even when the
  // frozen base is offloaded)
  const int64_t Pt = trainable_count(cfg, plan);
  const Tier params_home = plan.offload_params ? Tier::Pinned : dev;
  const Tier train_home = plan.lora.on() ? dev : params_home;
  const bool frozen = frozen_bf16(plan);  // (LoRA, bf16: the base as it computes, once)
  m.at(params_home, Tag::Weights) = frozen ? layout_bytes(frozen_bf16_layout(cfg)) : P * 4;
  m.at(train_home, Tag::Weights) += plan.lora.on() ? Pt * 4 : 0;
  // a tied lm_head's bf16 copy of the (fp32) embedding, beside a resident frozen base
  if (frozen && cfg.tie_word_embeddings && !plan.offload_params) m.at(dev, Tag::Weights) += cfg.vocab * cfg.hidden * 2;
  m.at(train_home, Tag::Grads) = Pt * 4;
  const bool sharded = plan.zero > 0 && plan.ranks > 1;
  m.at(host_side(train_home), Tag::Optimizer) =  // (beside pinned masters: plain host memory)
      optimizer != "adamw" ? 0 : 2 * 4 * (sharded ? Shard::of(Pt, int(plan.rank), int(plan.ranks)).held() : Pt);
  const bool bf16 = plan.precision == DType::BF16;
  if (zero3(plan)) {  // this rank's shards of every range; the gathers' and reductions' staging
    const int64_t S = ParamShards::of(cfg, int(plan.rank), int(plan.ranks)).numel;
    m.at(params_home, Tag::Weights) = m.at(params_home, Tag::Grads) = S * 4;
    m.at(host_side(params_home), Tag::Optimizer) = optimizer != "adamw" ? 0 : 2 * 4 * S;
    m.at(Tier::Host, Tag::Workspace) += ParamStore::zero3_host_bytes(cfg, int(plan.ranks), dev, params_home);
  }
  const bool slots = plan.offload_params || zero3(plan);  // the parameter store's device slots
  if (bf16 && !slots && !frozen) m.at(dev, Tag::Weights) += Bf16Weights::bytes(cfg);
  if (bf16 && plan.lora.on()) m.at(dev, Tag::Weights) += Bf16Weights::adapter_bytes(cfg, plan.lora);
  if (slots) {  // (bf16: the slots and head hold images, cast into pinned host memory, or under
                // --zero 3 on the device from the gathered fp32 ranges)
    m.at(dev, Tag::Weights) += ParamStore::device_weight_bytes(cfg, bf16, zero3(plan));
    if (!plan.lora.on()) m.at(dev, Tag::Grads) += ParamStore::device_bytes(cfg, zero3(plan));  // (LoRA: the base has none)
    if (bf16 && !zero3(plan)) m.at(Tier::Pinned, Tag::Weights) += ParamStore::host_image_bytes(cfg, frozen);
    // an embedding on the host: its rows' staging (with gradients: theirs and their ids); none where
    // LoRA's trainable embedding stands in for it
    if (plan.offload_params && !(plan.lora.on() && plan.lora.train_embeddings_norms)) {
      const int64_t rows = C / sp;
      m.at(Tier::Pinned, Tag::Weights) += ParamStore::embed_staging_bytes(cfg, zero3(plan), rows, Tag::Weights);
      if (!plan.lora.on())
        for (Tag t : {Tag::Grads, Tag::Data})
          m.at(Tier::Pinned, t) += ParamStore::embed_staging_bytes(cfg, zero3(plan), rows, t);
    }
  }
  m.at(dev, Tag::Activations) =
      LayerPlan::bytes(cfg, C, plan.lora.rank, plan.precision == DType::BF16, sp, K) +
      saved_bytes(cfg, C / sp, plan.sweep, bf16) + saved_attention_bytes(grp, C, plan.sweep, bf16, K, plan.keep_attention > 0);
  // --keep-attention's store, where it lives; offloaded, two chunks' rows of it on the device
  m.at(kept_attention_home(plan, dev), Tag::Activations) += kept_attention_bytes(grp, plan.keep_attention, K, bf16);
  if (plan.offload_attention) m.at(dev, Tag::Activations) += 2 * kept_attention_bytes(grp, C, K, bf16);
  if (plan.sweep == SweepOrder::Layer) {  // every layer's output of this rank's rows, and their device slots
    const int64_t arrays = ActivationStore::arrays(cfg, recomputes_tied_head(cfg, plan));
    m.at(ActivationStore::home(dev), Tag::Activations) += ActivationStore::host_bytes(cfg, arrays, N / sp);
    m.at(dev, Tag::Activations) += ActivationStore::device_bytes(cfg, C / sp);
  }
  m.at(dev, Tag::Workspace) = int64_t(workspace_bytes);
  m.at(Tier::Pinned, Tag::Workspace) += int64_t(pinned_workspace_bytes);
  const int64_t exchanged = C / sp * cfg.heads * cfg.head_dim;  // one Ulysses all-to-all's elements
  const bool grads_comm = plan.device_comm && train_home == Tier::Device;  // (pinned gradients cross over MPI)
  m.at(Tier::Host, Tag::Workspace) += SeqParallel::host_bytes(exchanged, sp, dev, plan.device_comm, K) +
                                      GradSync::host_bytes(Pt, int(plan.ranks), plan.zero, train_home, grads_comm);
  m.at(dev, Tag::Workspace) += SeqParallel::device_bytes(exchanged, sp, plan.device_comm, K) +
                               GradSync::device_bytes(Pt, int(plan.ranks), plan.zero, grads_comm);
  const KVCacheOptions kvo = kv_cache_options(att, used);
  const KVCache::Bytes kv = KVCache::plan(kvo, N, C, true);
  const Tier home = plan.offload_kv ? Tier::Pinned : dev;
  m.at(dev, Tag::KV) += kv.device_kv;
  m.at(dev, Tag::KVGrad) += kv.device_kv_grad;
  if (plan.offload_kv) {
    m.at(home, Tag::KV) += kv.home_kv;
    m.at(home, Tag::KVGrad) += kv.home_kv_grad;
  }
  if (plan.sparse.on()) {  // page metadata (kept on the device), the page scores, the recorded choice
    m.at(dev, Tag::PageMeta) += PageMeta::bytes(kvo.kv, N, kvo.score);
    const SparseSelector::Bytes sb = SparseSelector::plan(plan.sparse, kvo.kv, N, C, true, dev);
    m.at(dev, Tag::PageMeta) += sb.backend;
    m.at(Tier::Host, Tag::PageMeta) += sb.host;
  }
  // the host copy a model loads through, and a save (--out, a checkpoint's weights) downloads into:
  // the masters in the model's host layout where they live on a device (pinned or host masters load
  // in place; --zero 3's gathers are not counted), and beside it LoRA's trainable set or, before
  // it, a frozen bf16 base's conversion buffer
  if (dev == Tier::Device && !plan.offload_params && !zero3(plan))
    m.at(Tier::Host, Tag::IO) = frozen ? layout_bytes(frozen_bf16_layout(cfg)) : P * 4;
  int64_t widest = 0;  // a frozen bf16 base loads each bf16 matrix through an fp32 buffer of the largest
  if (frozen)
    for (const ParamSpec& s : frozen_bf16_layout(cfg))
      if (s.dtype == DType::BF16) widest = std::max(widest, s.numel());
  // (the buffer goes before LoRA's set is made)
  m.at(Tier::Host, Tag::IO) += std::max(widest * 4, plan.lora.on() ? Pt * 4 : 0);
  const bool docs = plan.doc_sep >= 0;
  // the chunk inputs, every page's document ids, and the (2) f64 loss sums read once per step
  m.at(dev, Tag::Data) = int64_t(ChunkInputs::device_bytes(C, docs)) + kv.device_data + loss_sums_bytes(cfg, plan);
  if (dev != Tier::Host) {
    m.at(Tier::Pinned, Tag::Data) += int64_t(ChunkInputs::staging_bytes(C, docs, dev));
    if (docs) m.at(Tier::Pinned, Tag::Data) += kv.device_data;  // the documents' pinned host mirror
  }
  return m;
}

}  // namespace oomb
