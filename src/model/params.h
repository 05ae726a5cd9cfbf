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

std::vector<ParamSpec> param_layout(const ModelConfig& c);
int64_t param_count(const ModelConfig& c);

struct LayerParams {
  Tensor attn_norm, wq, bq, wk, bk, wv, bv, wo, bo;
  Tensor q_norm, k_norm;  // Qwen3: (D) each; empty otherwise
  Tensor mlp_norm, wgate, bgate, wup, bup, wdown, bdown;
};

class Params {
 public:
  Params(const ModelConfig& c, Tier tier, Tag tag);
  const ModelConfig& config() const { return cfg_; }
  const std::vector<ParamSpec>& specs() const { return specs_; }
  Tensor& flat() { return flat_; }
  const Tensor& flat() const { return flat_; }
  Tensor view(const ParamSpec& s) const;
  Tensor get(const std::string& name) const;  // throws naming the parameter

  Tensor embed, final_norm, lm_head;  // lm_head aliases embed when embeddings are tied
  std::vector<LayerParams> layers;

 private:
  ModelConfig cfg_;
  std::vector<ParamSpec> specs_;
  Buffer buf_;
  Tensor flat_;
};

}  // namespace oomb
