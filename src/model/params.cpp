#include "model/params.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "backend/backend.h"
#include "core/fnv.h"

namespace oomb {

int64_t ParamSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// A layer's two norms' names (attn_norm, mlp_norm): Llama's before attention and before the MLP, OLMo 2's
// after each (ModelConfig::pre_norm), Gemma 3's and GLM-4's before each (and after each:
// post_norm_names); attn_norm is the first tensor of every layer either way.
static std::pair<const char*, const char*> layer_norm_names(const ModelConfig& c) {
  if (!c.pre_norm()) return {"post_attention_layernorm.weight", "post_feedforward_layernorm.weight"};
  if (c.arch == Arch::Gemma3) return {"input_layernorm.weight", "pre_feedforward_layernorm.weight"};
  return {"input_layernorm.weight", "post_attention_layernorm.weight"};  // (GLM-4's too: its MLP's input)
}
// Gemma 3's and GLM-4's norms after each branch (attn_post_norm, mlp_post_norm)
static std::pair<const char*, const char*> post_norm_names(const ModelConfig& c) {
  if (c.arch == Arch::Glm4) return {"post_self_attn_layernorm.weight", "post_mlp_layernorm.weight"};
  return {"post_attention_layernorm.weight", "post_feedforward_layernorm.weight"};
}
static bool sandwich(const ModelConfig& c) { return c.pre_norm() && c.post_norm(); }

void add_spec(std::vector<ParamSpec>& layout, std::string name, std::vector<int64_t> shape) {
  const int64_t off = layout.empty() ? 0 : layout.back().offset + layout.back().numel();
  layout.push_back({std::move(name), std::move(shape), off});
}

std::vector<ParamSpec> param_layout(const ModelConfig& c) {
  std::vector<ParamSpec> s;
  auto add = [&](std::string name, std::vector<int64_t> shape) { add_spec(s, std::move(name), std::move(shape)); };
  const int64_t d = c.hidden, qd = c.heads * c.head_dim, kd = c.kv_heads * c.head_dim, I = c.intermediate;
  add("model.embed_tokens.weight", {c.vocab, d});
  const auto [norm1, norm2] = layer_norm_names(c);
  const auto [post1, post2] = post_norm_names(c);
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + norm1, {d});
    add(p + "self_attn.q_proj.weight", {qd, d});
    if (c.qkv_bias) add(p + "self_attn.q_proj.bias", {qd});
    add(p + "self_attn.k_proj.weight", {kd, d});
    if (c.qkv_bias) add(p + "self_attn.k_proj.bias", {kd});
    add(p + "self_attn.v_proj.weight", {kd, d});
    if (c.qkv_bias) add(p + "self_attn.v_proj.bias", {kd});
    add(p + "self_attn.o_proj.weight", {d, qd});
    if (c.o_bias) add(p + "self_attn.o_proj.bias", {d});
    if (c.qk_norm) {  // RMSNorm weights of q and k: Qwen3's per head, OLMo 2's over the whole projection
      add(p + "self_attn.q_norm.weight", {c.qk_norm_full() ? qd : c.head_dim});
      add(p + "self_attn.k_norm.weight", {c.qk_norm_full() ? kd : c.head_dim});
    }
    if (sandwich(c)) add(p + post1, {d});
    add(p + norm2, {d});
    add(p + "mlp.gate_proj.weight", {I, d});
    if (c.mlp_bias) add(p + "mlp.gate_proj.bias", {I});
    add(p + "mlp.up_proj.weight", {I, d});
    if (c.mlp_bias) add(p + "mlp.up_proj.bias", {I});
    add(p + "mlp.down_proj.weight", {d, I});
    if (c.mlp_bias) add(p + "mlp.down_proj.bias", {d});
    if (sandwich(c)) add(p + post2, {d});
  }
  add("model.norm.weight", {d});
  if (!c.tie_word_embeddings) add("lm_head.weight", {c.vocab, d});
  return s;
}

int64_t param_count(const ModelConfig& c) {
  auto s = param_layout(c);
  return s.back().offset + s.back().numel();
}

std::vector<ParamSpec> frozen_bf16_layout(const ModelConfig& c) {
  std::vector<ParamSpec> s = param_layout(c);
  int64_t at = 0;
  for (ParamSpec& p : s) {
    const bool bf16 = p.shape.size() == 2 && p.name != "model.embed_tokens.weight";
    p.offset = -1, p.dtype = bf16 ? DType::BF16 : DType::F32, p.at = at;
    at = align256(at + p.numel() * int64_t(dtype_size(p.dtype)));
  }
  return s;
}

int64_t layout_bytes(const std::vector<ParamSpec>& specs) {
  if (specs.empty()) return 0;
  const ParamSpec& b = specs.back();
  return b.at >= 0 ? align256(b.at + b.numel() * int64_t(dtype_size(b.dtype))) : (b.offset + b.numel()) * 4;
}

Params::Params(const ModelConfig& c, Tier tier, Tag tag) : Params(c, param_layout(c), tier, tag) {}

Params::Params(const ModelConfig& c, std::vector<ParamSpec> specs, Tier tier, Tag tag)
    : cfg_(c), specs_(std::move(specs)) {
  const int64_t bytes = layout_bytes(specs_);
  buf_ = Buffer(tier, tag, size_t(bytes));
  const bool mixed = !specs_.empty() && specs_.back().at >= 0;
  flat_ = Tensor(buf_.data(), mixed ? DType::BF16 : DType::F32, {bytes / (mixed ? 2 : 4)}, tier);
  auto get = [this](const std::string& name) { return find(name); };
  embed = get("model.embed_tokens.weight");
  final_norm = get("model.norm.weight");
  lm_head = c.tie_word_embeddings ? embed : get("lm_head.weight");
  layers.resize(size_t(c.layers));
  const auto [norm1, norm2] = layer_norm_names(c);
  const auto [post1, post2] = post_norm_names(c);
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerParams& L = layers[size_t(l)];
    L.attn_norm = get(p + norm1);
    L.wq = get(p + "self_attn.q_proj.weight");
    L.wk = get(p + "self_attn.k_proj.weight");
    L.wv = get(p + "self_attn.v_proj.weight");
    L.wo = get(p + "self_attn.o_proj.weight");
    L.mlp_norm = get(p + norm2);
    L.wgate = get(p + "mlp.gate_proj.weight");
    L.wup = get(p + "mlp.up_proj.weight");
    L.wdown = get(p + "mlp.down_proj.weight");
    if (c.qkv_bias) {
      L.bq = get(p + "self_attn.q_proj.bias");
      L.bk = get(p + "self_attn.k_proj.bias");
      L.bv = get(p + "self_attn.v_proj.bias");
    }
    if (c.o_bias) L.bo = get(p + "self_attn.o_proj.bias");
    if (c.qk_norm) {
      L.q_norm = get(p + "self_attn.q_norm.weight");
      L.k_norm = get(p + "self_attn.k_norm.weight");
    }
    if (sandwich(c)) {
      L.attn_post_norm = get(p + post1);
      L.mlp_post_norm = get(p + post2);
    }
    if (c.mlp_bias) {
      L.bgate = get(p + "mlp.gate_proj.bias");
      L.bup = get(p + "mlp.up_proj.bias");
      L.bdown = get(p + "mlp.down_proj.bias");
    }
  }
}

Tensor Params::view(const ParamSpec& s) const {
  Tensor t = s.at >= 0 ? Tensor(static_cast<char*>(flat_.data) + s.at, s.dtype, {}, flat_.tier)
                       : Tensor(static_cast<float*>(flat_.data) + s.offset, DType::F32, {}, flat_.tier);
  for (int64_t d : s.shape) t.shape[t.ndim++] = d;
  return t;
}

Tensor Params::find(const std::string& name) const {
  for (const auto& s : specs_)
    if (s.name == name) return view(s);
  return {};
}

Tensor Params::get(const std::string& name) const {
  Tensor t = find(name);
  OOMB_CHECK(!t.empty(), "model has no parameter '{}'", name);
  return t;
}

std::string first_nonfinite(const Params& p, Backend& be) {
  for (const ParamSpec& s : p.specs()) {
    const Tensor t = p.view(s);
    double ss = 0;
    if (t.tier == Tier::Device) {
      ss = be.sum_squares(t);
    } else {
      for (int64_t i = 0; i < t.numel(); ++i) {
        const double v = t.dtype == DType::BF16 ? bf16_to_f32(static_cast<const uint16_t*>(t.data)[i]) : t.f()[i];
        ss += v * v;
      }
    }
    if (!std::isfinite(ss)) return s.name;
  }
  return "";
}

std::string params_fingerprint(const Params& host) {
  OOMB_CHECK(host.flat().tier != Tier::Device, "params_fingerprint: host parameters");
  Fnv f;
  // value i of the fp32 flat order: the buffer's, or a mixed layout's tensor's, widened (a frozen
  // bf16 base of a bf16 checkpoint has the fingerprint of its fp32 masters)
  std::vector<int64_t> starts;  // mixed: each spec's first index in that order
  int64_t n = host.flat().numel();
  if (host.mixed()) {
    n = 0;
    for (const ParamSpec& s : host.specs()) starts.push_back(n), n += s.numel();
  }
  const float* flat = host.mixed() ? nullptr : host.flat().f();
  auto value = [&](int64_t i) -> float {
    if (flat) return flat[i];
    const size_t k = size_t(std::upper_bound(starts.begin(), starts.end(), i) - starts.begin()) - 1;
    const Tensor t = host.view(host.specs()[k]);
    const int64_t j = i - starts[k];
    return t.dtype == DType::F32 ? t.f()[j] : bf16_to_f32(static_cast<const uint16_t*>(t.data)[j]);
  };
  const int64_t block = 1024, blocks = 256;
  f.mix(uint64_t(n), 8);
  auto range = [&](int64_t at, int64_t len) {
    for (int64_t i = at; i < at + len; ++i) f.mix(std::bit_cast<uint32_t>(value(i)), 4);
  };
  if (n <= block * blocks) {
    range(0, n);
  } else {
    for (int64_t b = 0; b < blocks; ++b) range((n - block) / (blocks - 1) * b, block);
  }
  return f.hex();
}

}  // namespace oomb
