#include "model/frozen_base.h"

namespace oomb {

std::vector<ParamSpec> FrozenBase::rest_layout(const ModelConfig& c) {
  std::vector<ParamSpec> r;
  for (const ParamSpec& s : param_layout(c))
    if (s.shape.size() != 2 || s.name == "model.embed_tokens.weight") add_spec(r, s.name, s.shape);
  return r;
}

int64_t FrozenBase::device_bytes(const ModelConfig& c) {
  const std::vector<ParamSpec> r = rest_layout(c);
  return Bf16Weights::bytes(c) + (r.back().offset + r.back().numel()) * 4;
}

int64_t FrozenBase::staging_bytes(const ModelConfig& c) { return Bf16Weights::bytes(c); }

FrozenBase::FrozenBase(const ModelConfig& c, Tier device)
    : rest_(c, rest_layout(c), device, Tag::Weights),
      dev16_(c, device),
      host16_(c, Tier::Pinned),
      host_(make_cpu_backend()) {
  layers = rest_.layers;
  for (size_t l = 0; l < layers.size(); ++l) {
    const LayerParams& w = dev16_.layers[l];
    LayerParams& L = layers[l];
    L.wq = w.wq, L.wk = w.wk, L.wv = w.wv, L.wo = w.wo, L.wgate = w.wgate, L.wup = w.wup, L.wdown = w.wdown;
  }
  embed = rest_.embed, final_norm = rest_.final_norm, lm_head = dev16_.lm_head;
}

void FrozenBase::sync(Backend& be, const Params& masters) {
  OOMB_CHECK(host_addressable(masters.flat().tier), "frozen base: the masters must be in host memory");
  host16_.sync(*host_, masters);
  dev16_.copy_from(be, host16_);
  for (const ParamSpec& s : rest_.specs()) {
    const Tensor from = masters.get(s.name);
    be.copy(rest_.view(s).data, rest_.flat().tier, from.data, from.tier, from.bytes());
  }
}

}  // namespace oomb
