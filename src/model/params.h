// The parameters of a model as one flat fp32 buffer, in Hugging Face names and order.
// The same layout serves weights, gradients and optimizer moments.
// A frozen bf16 base (LoRA with --precision bf16: frozen_bf16_layout) is the one mixed layout: the
// matrices the matmuls read in bf16 and the rest fp32, each tensor from a 256-byte boundary, so the
// base is held once, as it computes (no fp32 masters beside a bf16 copy).
#pragma once
#include <string>
#include <vector>

#include "core/tensor.h"
#include "hf/config.h"

namespace oomb {

struct ParamSpec {
  std::string name;            // HF name, e.g. "model.layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> shape;  // HF shape, e.g. (out, in)
  int64_t offset = 0;          // in elements, within the flat buffer (-1 in a mixed layout)
  DType dtype = DType::F32;    // a mixed layout's bf16 matrices: BF16
  int64_t at = -1;             // a mixed layout: the byte offset (256-byte aligned); -1 otherwise
  int64_t numel() const;
};

// Appends a tensor to a layout, right after the last one.
void add_spec(std::vector<ParamSpec>& layout, std::string name, std::vector<int64_t> shape);
std::vector<ParamSpec> param_layout(const ModelConfig& c);
int64_t param_count(const ModelConfig& c);
// The frozen bf16 base: param_layout's tensors in its order, each from a 256-byte boundary, bf16
// where a matmul reads the tensor (every 2-D one but the embedding, which is looked up; a tied
// lm_head is the embedding), fp32 otherwise. A layer's tensors sit as ParamStore's layer image
// places them (model/param_store.h), from a 256-byte boundary, so the layer is its own image.
std::vector<ParamSpec> frozen_bf16_layout(const ModelConfig& c);
int64_t layout_bytes(const std::vector<ParamSpec>& specs);  // the buffer a layout takes
// n rounded up to the 256-byte boundary a bf16 matrix starts on (cuBLASLt's fastest kernels want
// aligned operands)
inline int64_t align256(int64_t n) { return (n + 255) / 256 * 256; }
// A fingerprint of host parameters' values (16 hex digits, FNV-1a 64 over the count and 256 evenly
// spaced blocks of 1024 floats: every value up to 256K; a mixed layout's values widened to fp32 in
// the flat order, so a frozen bf16 base loaded from a bf16 checkpoint has its fp32 masters'): a LoRA
// checkpoint keeps its frozen base's, so a resumed run finds another base without the base in the
// checkpoint.
class Params;
std::string params_fingerprint(const Params& host);
// The name of p's first tensor (layout order) holding a non-finite value, or "": tensors in device
// memory through be's sum_squares, the rest read here (f32 or bf16). To name the culprit of a
// non-finite loss or gradient norm, not on a step's path.
class Backend;
std::string first_nonfinite(const Params& p, Backend& be);

// LoRA's slots of a layer (model/lora.h), by target: q, k, v, o, gate, up, down.
inline constexpr int kLoraTargets = 7;
enum LoraSlot { kQ, kK, kV, kO, kGate, kUp, kDown };
struct LoraPair {
  Tensor a, b;  // A (r, in), B (out, r); empty: the linear is not adapted
};

struct LayerParams {
  Tensor attn_norm, wq, bq, wk, bk, wv, bv, wo, bo;
  Tensor q_norm, k_norm;  // Qwen3: (D) each; OLMo 2 / 3: (H D), (G D); empty otherwise
  Tensor mlp_norm, wgate, bgate, wup, bup, wdown, bdown;
  Tensor attn_post_norm, mlp_post_norm;  // Gemma 3, GLM-4: the norms of the branches' outputs (d); empty otherwise
  LoraPair lora[kLoraTargets];  // adapters (weights, or their gradients in a gradient set)
  float lora_scale = 0.0f;
};

class Params {
 public:
  Params(const ModelConfig& c, Tier tier, Tag tag);
  // Any layout (LoRA's trainable set, model/lora.h; the frozen bf16 base): the named views (embed,
  // norms, layers' tensors) are bound where the layout holds them and empty otherwise.
  Params(const ModelConfig& c, std::vector<ParamSpec> specs, Tier tier, Tag tag);
  const ModelConfig& config() const { return cfg_; }
  const std::vector<ParamSpec>& specs() const { return specs_; }
  // The whole buffer: fp32 values, or in a mixed layout its bytes as bf16 (only to copy: views
  // give the values).
  Tensor& flat() { return flat_; }
  const Tensor& flat() const { return flat_; }
  bool mixed() const { return flat_.dtype != DType::F32; }
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
