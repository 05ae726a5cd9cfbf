// The parameters of a model as one flat fp32 buffer, in Hugging Face names and order.
// The same layout serves weights, gradients and optimizer moments.
#pragma once
#include <string>
#include <vector>

#include "core/tensor.h"
#include "hf/config.h"

namespace oomb {

struct ParamSpec {
  std::string name;            // HF name, e.g. "model.layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> shape;  // HF shape, e.g. (out, in)
  int64_t offset = 0;          // in elements, within the flat buffer
  int64_t numel() const;
};

// Appends a tensor to a layout, right after the last one.
void add_spec(std::vector<ParamSpec>& layout, std::string name, std::vector<int64_t> shape);
std::vector<ParamSpec> param_layout(const ModelConfig& c);
int64_t param_count(const ModelConfig& c);
// A fingerprint of host parameters' values (16 hex digits, FNV-1a 64 over the count and 256 evenly
// spaced blocks of 1024 floats: every value up to 256K): a LoRA checkpoint keeps its frozen base's,
// so a resumed run finds another base without the base in the checkpoint.
class Params;
std::string params_fingerprint(const Params& host);

// LoRA's slots of a layer (model/lora.h), by target: q, k, v, o, gate, up, down.
inline constexpr int kLoraTargets = 7;
struct LoraPair {
  Tensor a, b;  // A (r, in), B (out, r); empty: the linear is not adapted
};

struct LayerParams {
  Tensor attn_norm, wq, bq, wk, bk, wv, bv, wo, bo;
  Tensor q_norm, k_norm;  // Qwen3: (D) each; empty otherwise
  Tensor mlp_norm, wgate, bgate, wup, bup, wdown, bdown;
  LoraPair lora[kLoraTargets];  // adapters (weights, or their gradients in a gradient set)
  float lora_scale = 0.0f;
};

class Params {
 public:
  Params(const ModelConfig& c, Tier tier, Tag tag);
  // Any layout (LoRA's trainable set, model/lora.h): the named views (embed, norms, layers' tensors)
  // are bound where the layout holds them and empty otherwise.
  Params(const ModelConfig& c, std::vector<ParamSpec> specs, Tier tier, Tag tag);
  const ModelConfig& config() const { return cfg_; }
  const std::vector<ParamSpec>& specs() const { return specs_; }
  Tensor& flat() { return flat_; }
  const Tensor& flat() const { return flat_; }
  Tensor view(const ParamSpec& s) const;
  Tensor get(const std::string& name) const;  // throws naming the parameter
  Tensor find(const std::string& name) const;  // empty when the layout has no such tensor

  Tensor embed, final_norm, lm_head;  // lm_head aliases embed when embeddings are tied
  std::vector<LayerParams> layers;

 private:
  ModelConfig cfg_;
  std::vector<ParamSpec> specs_;
  Buffer buf_;
  Tensor flat_;
};

}  // namespace oomb
