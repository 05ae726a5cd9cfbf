#include "model/memory_plan.h"

#include "model/chunk_inputs.h"
#include "model/layer.h"
#include "model/params.h"

namespace oomb {

int64_t MemoryPlan::total(Tier tier) const {
  int64_t s = 0;
  for (int64_t b : bytes[size_t(tier)]) s += b;
  return s;
}

int64_t MemoryPlan::total() const {
  int64_t s = 0;
  for (Tier t : kTiers) s += total(t);
  return s;
}

KVCacheOptions kv_cache_options(const ModelConfig& c, const ChunkPlan& p) {
  KVCacheOptions o;
  o.kv = {c.layers, c.kv_heads, c.head_dim, p.page_size, p.kv_dtype};
  o.grad = {c.layers, c.kv_heads, c.head_dim, p.page_size, p.kv_grad_dtype};
  o.docs = p.doc_sep >= 0;
  o.offload = p.offload_kv;
  o.group = p.offload_group;
  o.chunk = p.chunk;
  o.windows = c.layer_window;
  return o;
}

int64_t saved_bytes(const ModelConfig& c, int64_t C) {
  return (c.layers + 3) * int64_t(Arena::need(DType::F32, {C, c.hidden})) + int64_t(Arena::need(DType::F32, {C}));
}

int64_t saved_attention_bytes(const ModelConfig& c, int64_t C) {
  return c.layers * int64_t(Arena::need(DType::F32, {C, c.heads, c.head_dim}) + Arena::need(DType::F32, {C, c.heads}));
}

MemoryPlan plan_memory(const ModelConfig& cfg, const ChunkPlan& plan, int64_t N, const std::string& optimizer,
                       size_t workspace_bytes, Tier dev) {
  const int64_t P = param_count(cfg), C = std::min(plan.chunk, N);
  ChunkPlan used = plan;
  used.chunk = C;
  MemoryPlan m;
  m.at(dev, Tag::Weights) = P * 4;
  m.at(dev, Tag::Grads) = P * 4;
  m.at(dev, Tag::Optimizer) = optimizer == "adamw" ? 2 * P * 4 : 0;
  m.at(dev, Tag::Activations) = LayerPlan::bytes(cfg, C) + saved_bytes(cfg, C) + saved_attention_bytes(cfg, C);
  m.at(dev, Tag::Workspace) = int64_t(workspace_bytes);
  const KVCacheOptions kvo = kv_cache_options(cfg, used);
  const KVCache::Bytes kv = KVCache::plan(kvo, N, C, true);
  const Tier home = plan.offload_kv ? Tier::Pinned : dev;
  m.at(dev, Tag::KV) += kv.device_kv;
  m.at(dev, Tag::KVGrad) += kv.device_kv_grad;
  if (plan.offload_kv) {
    m.at(home, Tag::KV) += kv.home_kv;
    m.at(home, Tag::KVGrad) += kv.home_kv_grad;
  }
  const bool docs = plan.doc_sep >= 0;
  // the chunk inputs, every page's document ids, and the (2) f64 loss sums read once per step
  m.at(dev, Tag::Data) = int64_t(ChunkInputs::device_bytes(C, docs)) + kv.device_data + 16;
  if (dev != Tier::Host) {
    m.at(Tier::Pinned, Tag::Data) += int64_t(ChunkInputs::staging_bytes(C, docs, dev));
    if (docs) m.at(Tier::Host, Tag::Data) += kv.device_data;  // the documents' host mirror
  }
  return m;
}

}  // namespace oomb
