#include "model/lora.h"

#include <cmath>
#include <optional>
#include <random>

#include "core/error.h"
#include "hf/fused_projections.h"

namespace oomb {

namespace {

// The base linear target t adapts in layer l: model.layers.L.self_attn.q_proj.weight, ...
std::string base_weight(int64_t layer, int target) {
  return "model.layers." + std::to_string(layer) + (target < kGate ? ".self_attn." : ".mlp.") +
         kLoraModules[target] + ".weight";
}

// Where target t's base linear lives in the files: a fused linear's rows, or nothing (itself)
std::optional<FusedPart> fused_of(const ModelConfig& cfg, int64_t layer, int target) {
  return fused_part(cfg, base_weight(layer, target));
}

}  // namespace

std::string lora_name(const ModelConfig& cfg, int64_t layer, int target, bool b) {
  const auto f = fused_of(cfg, layer, target);
  const std::string w = f ? f->fused : base_weight(layer, target);
  return "base_model.model." + w.substr(0, w.size() - 7) + (b ? ".lora_B.weight" : ".lora_A.weight");  // - ".weight"
}

int lora_module(const ModelConfig& cfg, int target) {
  const auto f = fused_of(cfg, 0, target);
  if (!f) return target;
  for (int t = 0; t < kLoraTargets; ++t)
    if (f->parts.front() == base_weight(0, t)) return t;
  fail("lora_module: {}'s first part {} is no LoRA target", f->fused, f->parts.front());
}

std::vector<int64_t> lora_shape(const ModelConfig& cfg, const LoraConfig& c, int target, bool b) {
  const int64_t d = cfg.hidden, qd = cfg.heads * cfg.head_dim, kd = cfg.kv_heads * cfg.head_dim,
                I = cfg.intermediate;
  //                      q   k   v   o   gate up  down
  const int64_t in[] = {d, d, d, qd, d, d, I}, out[] = {qd, kd, kd, d, I, I, d};
  const auto f = fused_of(cfg, 0, target);
  return b ? std::vector<int64_t>{f ? f->fused_rows : out[target], c.rank} : std::vector<int64_t>{c.rank, in[target]};
}

std::vector<ParamSpec> lora_layout(const ModelConfig& cfg, const LoraConfig& c) {
  for (int t = 0; t < kLoraTargets; ++t)  // a fused linear is adapted whole: PEFT adapts modules
    OOMB_CHECK(c.targets[t] == c.targets[lora_module(cfg, t)], "LoRA on {}: {} and {} are one linear in its files "
               "({}), which PEFT adapts as one module: adapt both or neither (--lora-targets qkv_proj / gate_up_proj "
               "name the whole)", cfg.architecture, kLoraModules[lora_module(cfg, t)], kLoraModules[t],
               fused_of(cfg, 0, t)->fused);
  std::vector<ParamSpec> s;
  auto add = [&](std::string name, std::vector<int64_t> shape) { add_spec(s, std::move(name), std::move(shape)); };
  for (int64_t l = 0; l < cfg.layers; ++l)
    for (int t = 0; t < kLoraTargets; ++t)
      if (c.targets[t] && lora_module(cfg, t) == t) {  // (a fused linear's other parts share its adapter)
        add(lora_name(cfg, l, t, false), lora_shape(cfg, c, t, false));
        add(lora_name(cfg, l, t, true), lora_shape(cfg, c, t, true));
      }
  if (c.train_embeddings_norms)
    for (const ParamSpec& p : param_layout(cfg)) {
      const bool norm = p.name.find("norm.weight") != std::string::npos || p.name.find("layernorm") != std::string::npos;
      if (norm || p.name == "model.embed_tokens.weight") add(p.name, p.shape);
    }
  return s;
}

LoraPair lora_pair(const std::function<Tensor(const std::string&)>& get, const ModelConfig& cfg, int64_t layer,
                   int target) {
  LoraPair p{get(lora_name(cfg, layer, target, false)), get(lora_name(cfg, layer, target, true))};
  if (const auto f = fused_of(cfg, layer, target)) p.b = p.b.rows(f->row0, f->rows);
  return p;
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
      if (c.targets[t]) L.lora[t] = lora_pair([&](const std::string& n) { return trainable.get(n); }, cfg, l, t);
    L.lora_scale = c.scale();
    const LayerParams& T = trainable.layers[size_t(l)];  // the norms, where they train
    for (auto [dst, src] : {std::pair{&L.attn_norm, &T.attn_norm}, {&L.mlp_norm, &T.mlp_norm},
                            {&L.q_norm, &T.q_norm}, {&L.k_norm, &T.k_norm}, {&L.attn_post_norm, &T.attn_post_norm},
                            {&L.mlp_post_norm, &T.mlp_post_norm}})
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
