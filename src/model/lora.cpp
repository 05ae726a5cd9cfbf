#include "model/lora.h"

#include <cmath>
#include <random>

#include "core/error.h"

namespace oomb {

std::string lora_name(int64_t layer, int target, bool b) {
  const bool attn = target < 4;
  return "base_model.model.model.layers." + std::to_string(layer) + (attn ? ".self_attn." : ".mlp.") +
         kLoraModules[target] + (b ? ".lora_B.weight" : ".lora_A.weight");
}

std::vector<int64_t> lora_shape(const ModelConfig& cfg, const LoraConfig& c, int target, bool b) {
  const int64_t d = cfg.hidden, qd = cfg.heads * cfg.head_dim, kd = cfg.kv_heads * cfg.head_dim,
                I = cfg.intermediate;
  //                      q   k   v   o   gate up  down
  const int64_t in[] = {d, d, d, qd, d, d, I}, out[] = {qd, kd, kd, d, I, I, d};
  return b ? std::vector<int64_t>{out[target], c.rank} : std::vector<int64_t>{c.rank, in[target]};
}

std::vector<ParamSpec> lora_layout(const ModelConfig& cfg, const LoraConfig& c) {
  if (cfg.fused_projections())
    for (int t = 0; t < kLoraTargets; ++t)
      OOMB_CHECK(!c.targets[t] || t == 3 || t == 6, "LoRA target {} on {}: Phi-3 fuses q, k and v into qkv_proj and "
                 "gate and up into gate_up_proj, which oomb does not adapt; use --lora-targets o,down",
                 kLoraModules[t], cfg.architecture);
  std::vector<ParamSpec> s;
  auto add = [&](std::string name, std::vector<int64_t> shape) { add_spec(s, std::move(name), std::move(shape)); };
  for (int64_t l = 0; l < cfg.layers; ++l)
    for (int t = 0; t < kLoraTargets; ++t)
      if (c.targets[t]) {
        add(lora_name(l, t, false), lora_shape(cfg, c, t, false));
        add(lora_name(l, t, true), lora_shape(cfg, c, t, true));
      }
  if (c.train_embeddings_norms)
    for (const ParamSpec& p : param_layout(cfg)) {
      const bool norm = p.name.find("norm.weight") != std::string::npos || p.name.find("layernorm") != std::string::npos;
      if (norm || p.name == "model.embed_tokens.weight") add(p.name, p.shape);
    }
  return s;
}

int64_t lora_param_count(const ModelConfig& cfg, const LoraConfig& c) {
  const auto s = lora_layout(cfg, c);
  return s.empty() ? 0 : s.back().offset + s.back().numel();
}

std::vector<LayerParams> lora_layers(const std::vector<LayerParams>& base, const Params& trainable,
                                     const ModelConfig& cfg, const LoraConfig& c) {
  std::vector<LayerParams> r = base;
  r.resize(size_t(cfg.layers));
  for (int64_t l = 0; l < cfg.layers; ++l) {
    LayerParams& L = r[size_t(l)];
    for (int t = 0; t < kLoraTargets; ++t)
      if (c.targets[t]) L.lora[t] = {trainable.get(lora_name(l, t, false)), trainable.get(lora_name(l, t, true))};
    L.lora_scale = c.scale();
    const LayerParams& T = trainable.layers[size_t(l)];  // the norms, where they train
    for (auto [dst, src] : {std::pair{&L.attn_norm, &T.attn_norm}, {&L.mlp_norm, &T.mlp_norm},
                            {&L.q_norm, &T.q_norm}, {&L.k_norm, &T.k_norm}})
      if (!src->empty() || base.empty()) *dst = *src;
  }
  return r;
}

void init_lora(Params& trainable, const Params& base, uint64_t seed) {
  OOMB_CHECK(trainable.flat().tier != Tier::Device && base.flat().tier != Tier::Device,
             "init_lora: host parameters (plain or pinned)");
  std::mt19937_64 rng(seed);
  for (const ParamSpec& s : trainable.specs()) {
    Tensor t = trainable.view(s);
    float* p = t.f();
    if (s.name.ends_with(".lora_A.weight")) {  // kaiming_uniform(a = sqrt(5)): U(-1/sqrt(in), 1/sqrt(in))
      const float bound = float(1.0 / std::sqrt(double(s.shape[1])));
      std::uniform_real_distribution<float> u(-bound, bound);
      for (int64_t i = 0; i < s.numel(); ++i) p[i] = u(rng);
    } else if (s.name.ends_with(".lora_B.weight")) {
      for (int64_t i = 0; i < s.numel(); ++i) p[i] = 0.0f;
    } else {  // a trainable base tensor starts from the base's values
      const Tensor from = base.get(s.name);
      std::copy(from.f(), from.f() + s.numel(), p);
    }
  }
}

}  // namespace oomb
