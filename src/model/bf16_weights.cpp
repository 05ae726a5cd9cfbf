#include "model/bf16_weights.h"

namespace oomb {

// The masters' layout order; a matrix is what a matmul reads: 2-D, and the embedding only when
// the lm_head shares it (LoRA's layout: its adapters; a trainable embedding is looked up, not
// multiplied). Slots' data pointers are byte offsets from 0 until the buffer exists.
std::vector<Bf16Weights::Slot> Bf16Weights::layout(const std::vector<ParamSpec>& specs, bool tied, int64_t* bytes) {
  std::vector<Slot> slots;
  int64_t at = 0;
  for (const ParamSpec& s : specs) {
    const bool embed = s.name == "model.embed_tokens.weight";
    if (s.shape.size() != 2 || (embed && !tied)) continue;
    Tensor t(reinterpret_cast<void*>(at), DType::BF16, {s.shape[0], s.shape[1]});
    slots.push_back({s, t});
    at = align256(at + int64_t(t.bytes()));
  }
  *bytes = at;
  return slots;
}

int64_t Bf16Weights::bytes(const ModelConfig& c) {
  int64_t n = 0;
  layout(param_layout(c), c.tie_word_embeddings, &n);
  return n;
}

int64_t Bf16Weights::adapter_bytes(const ModelConfig& c, const LoraConfig& lora) {
  int64_t n = 0;
  layout(lora_layout(c, lora), false, &n);
  return n;
}

void Bf16Weights::allocate(Tier tier, int64_t bytes) {
  buf_ = Buffer(tier, Tag::Weights, size_t(bytes));
  for (Slot& s : slots_) {
    s.copy.data = buf_.as<char>() + reinterpret_cast<intptr_t>(s.copy.data);
    s.copy.tier = tier;
  }
}

Tensor Bf16Weights::get(const std::string& name) const {
  for (const Slot& s : slots_)
    if (s.master.name == name) return s.copy;
  fail("bf16 weights: no copy of '{}'", name);
}

Bf16Weights::Bf16Weights(const ModelConfig& c, Tier tier) {
  int64_t n = 0;
  slots_ = layout(param_layout(c), c.tie_word_embeddings, &n);
  allocate(tier, n);
  lm_head = get(c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
  layers.resize(size_t(c.layers));
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerParams& L = layers[size_t(l)];
    L.wq = get(p + "self_attn.q_proj.weight");
    L.wk = get(p + "self_attn.k_proj.weight");
    L.wv = get(p + "self_attn.v_proj.weight");
    L.wo = get(p + "self_attn.o_proj.weight");
    L.wgate = get(p + "mlp.gate_proj.weight");
    L.wup = get(p + "mlp.up_proj.weight");
    L.wdown = get(p + "mlp.down_proj.weight");
  }
}

Bf16Weights::Bf16Weights(const ModelConfig& c, const LoraConfig& lora, Tier tier) {
  int64_t n = 0;
  slots_ = layout(lora_layout(c, lora), false, &n);
  allocate(tier, n);
  layers.resize(size_t(c.layers));
  for (int64_t l = 0; l < c.layers; ++l)
    for (int t = 0; t < kLoraTargets; ++t)
      if (lora.targets[t])
        layers[size_t(l)].lora[t] = lora_pair([&](const std::string& n) { return get(n); }, c, l, t);
}

void Bf16Weights::sync(Backend& be, const Params& masters) {
  for (Slot& s : slots_) be.cast(masters.view(s.master), s.copy);
}

}  // namespace oomb
