// Model configuration from a Hugging Face config.json (Llama, Qwen2, Qwen3, Mistral, Phi-3, Granite, SmolLM3,
// OLMo 2, OLMo 3, Gemma 3, GLM, GLM-4).
#pragma once
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/activation.h"

namespace oomb {

enum class Arch { Llama, Qwen2, Mistral, Qwen3, Phi3, Granite, SmolLM3, Olmo2, Olmo3, Gemma3, Glm, Glm4 };

struct RopeConfig {
  std::string type = "default";  // default | linear | llama3 | yarn | longrope
  double theta = 10000.0;
  double factor = 1.0;                      // linear, llama3, yarn
  double low_freq_factor = 1.0;             // llama3
  double high_freq_factor = 4.0;            // llama3
  int64_t original_max_position_embeddings = 0;  // llama3, yarn (0 = absent)
  std::optional<double> attention_factor;   // yarn
  double beta_fast = 32.0, beta_slow = 1.0;  // yarn
  std::optional<double> mscale, mscale_all_dim;  // yarn
  bool truncate = true;                     // yarn
  // longrope: per-frequency divisors (rope_dim / 2 each), the short ones for a sequence of at most
  // original_max_position_embeddings positions (always set: as transformers 5 resolves it), the long
  // ones past it; factor (only for the default attention_factor) is the dict's when factor_given, else
  // max_position_embeddings / original_max_position_embeddings.
  std::vector<double> short_factor, long_factor;
  bool factor_given = false;
  // the fraction of each head RoPE turns: its first int(head_dim * f) dims (rope_dim), the others pass
  // through. Below 1 on Phi3ForCausalLM (Phi-4-mini: 0.75) and GLM / GLM-4 (their configs' default 0.5),
  // whose attention splits the head so; longrope's factor lists then have rope_dim / 2 entries.
  double partial_rotary_factor = 1.0;
};

struct ModelConfig {
  Arch arch = Arch::Llama;
  std::string model_type = "llama";      // as in config.json
  std::string architecture = "LlamaForCausalLM";
  int64_t hidden = 0, intermediate = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, vocab = 0;
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // Qwen2: always; Llama: attention_bias
  bool o_bias = false;    // Llama: attention_bias
  bool mlp_bias = false;  // Llama: mlp_bias
  bool qk_norm = false;   // Qwen3, OLMo 2: RMSNorm of q and k before RoPE (qk_norm_full says over what)
  // Sliding-window attention per layer: 0 = full attention, else a query sees the keys less than
  // this many positions behind it (transformers: kv_idx > q_idx - sliding_window). Mistral's
  // sliding_window on every layer; Qwen2/Qwen3's when use_sliding_window, on the layers from
  // max_window_layers on (or as layer_types says).
  std::vector<int64_t> layer_window;
  std::string torch_dtype = "float32";  // dtype the checkpoint declares
  int64_t bos_token_id = -1, eos_token_id = -1;
  // transformers builds the embedding with padding_idx = pad_token_id: that row gets no gradient from
  // the lookup (the tied lm_head's still reaches it). -1: none. A negative id in the file counts from
  // the end, as nn.Embedding takes it.
  int64_t pad_token_id = -1;
  RopeConfig rope;
  // Phi-3 (Phi3ForCausalLM): a Mistral-shaped decoder whose checkpoint fuses q, k and v into
  // self_attn.qkv_proj ([q; k; v] rows) and gate and up into mlp.gate_up_proj ([gate; up] rows); GLM's
  // and GLM-4's fuse gate and up alone. Loading splits them into the unfused parameters (model/params)
  // and saving fuses them again.
  bool fused_qkv() const { return arch == Arch::Phi3; }
  bool fused_gate_up() const { return arch == Arch::Phi3 || arch == Arch::Glm || arch == Arch::Glm4; }
  bool fused_projections() const { return fused_qkv() || fused_gate_up(); }
  // GLM (GlmForCausalLM: glm-4-9b-chat-hf and its 1M-context sibling) and GLM-4 (Glm4ForCausalLM:
  // GLM-4-0414) turn interleaved pairs (2i, 2i + 1) of each head's rotary dims where the others turn
  // (i, i + rope_dim / 2): RopeTable::interleaved.
  bool rope_interleaved() const { return arch == Arch::Glm || arch == Arch::Glm4; }
  nlohmann::json raw;  // the file's own JSON, kept so saving writes back every field
  // Granite (GraniteForCausalLM): a Llama with four scalars (muP's). The embedding's output is
  // multiplied by embedding_multiplier; each layer's attention and MLP outputs by residual_multiplier
  // before their residual adds; attention's scores by attention_multiplier, in place of
  // 1/sqrt(head_dim); the logits are divided by logits_scaling. GraniteConfig's defaults are 1.0 each;
  // every other family has 1, and attention_multiplier 0 (1/sqrt(head_dim): attention_scale()).
  double embedding_multiplier = 1.0, residual_multiplier = 1.0, attention_multiplier = 0.0, logits_scaling = 1.0;
  // SmolLM3 (SmolLM3ForCausalLM): per layer whether RoPE turns its q and k (no_rope_layers' 1), or not
  // (0: a NoPE layer; SmolLM3Config's default every 4th, no_rope_layer_interval). Empty: every layer.
  std::vector<bool> layer_rope;
  bool rope_on(int64_t layer) const { return layer_rope.empty() || layer_rope[size_t(layer)]; }
  // OLMo 2 (Olmo2ForCausalLM): each layer normalizes its branches' outputs rather than their inputs,
  // h = x + norm1(attn(x)), out = h + norm2(mlp(h)) (post_attention_layernorm, post_feedforward_layernorm:
  // the layer's attn_norm and mlp_norm), and its q and k norms take the whole projection (H D and G D
  // wide) where Qwen3's take each head (D).
  // OLMo 3 (Olmo3ForCausalLM) is OLMo 2 with sliding windows on three layers of four (layer_types).
  // Gemma 3 (Gemma3ForCausalLM) normalizes both: h = x + norm1'(attn(norm1(x))), out = h +
  // norm2'(mlp(norm2(h))) (input_layernorm, post_attention_layernorm, pre_feedforward_layernorm,
  // post_feedforward_layernorm), its q and k norms per head as Qwen3's. GLM-4 (Glm4ForCausalLM) too, by
  // other names (input_layernorm, post_self_attn_layernorm, post_attention_layernorm: the MLP's input,
  // post_mlp_layernorm), with plain norms and no q/k norms.
  bool pre_norm() const { return arch != Arch::Olmo2 && arch != Arch::Olmo3; }
  bool post_norm() const { return !pre_norm() || arch == Arch::Gemma3 || arch == Arch::Glm4; }
  // The families whose attention normalizes q and k (Qwen3, OLMo 2 / 3, Gemma 3)
  bool has_qk_norm() const { return arch == Arch::Qwen3 || !pre_norm() || arch == Arch::Gemma3; }
  bool qk_norm_full() const { return !pre_norm(); }
  // Gemma 3's norms scale by 1 + w (Gemma3RMSNorm, in f32; its weights start at 0), every other
  // family's by w: the rmsnorm op's w_offset.
  float norm_offset() const { return arch == Arch::Gemma3 ? 1.0f : 0.0f; }
  // The MLP's activation: Gemma 3's hidden_activation gelu_pytorch_tanh (GeGLU), every other family's silu.
  Act mlp_act() const { return arch == Arch::Gemma3 ? Act::GeluTanh : Act::Silu; }
  // Gemma 3 scales the embedding's output by sqrt(hidden_size) (Gemma3TextScaledWordEmbedding, in f32)
  // and the attention scores by query_pre_attn_scalar^-1/2 (0 elsewhere).
  double query_pre_attn_scalar = 0;
  double embed_scale() const;
  // Whether layer l turns q and k by the configured RoPE (its scaling included), or by the plain one:
  // OLMo 3's sliding layers take the plain one, as OLMo-core trained them and transformers' Olmo3Model
  // (rope_parameters per layer type: sliding_attention's is default) and vLLM run them. Its theta is
  // sliding_rope_theta where the file gives the sliding layers their own (0: rope.theta). Gemma 3's
  // sliding layers likewise, with rope_local_base_freq (Gemma3TextConfig's 10000).
  bool split_rope() const { return arch == Arch::Olmo3 || arch == Arch::Gemma3; }
  bool rope_scaled(int64_t l) const {
    return !split_rope() || size_t(l) >= layer_window.size() || layer_window[size_t(l)] == 0;
  }
  double sliding_rope_theta = 0;
};

// The ids that end a sequence: config.json's eos_token_id, all of a list (GLM's chat models end a reply
// with 151336 or 151338 as well as 151329), else c.eos_token_id; where the file gives none, the class's
// default (GlmConfig's list of three). Empty: none.
std::vector<int64_t> eos_token_ids(const ModelConfig& c);

// Attention's softmax scale: attention_multiplier where set (Granite), query_pre_attn_scalar^-1/2 (Gemma 3),
// else 1/sqrt(head_dim).
float attention_scale(const ModelConfig& c);

// Sets arch, model_type, architecture and the architecture's fixed parts (Qwen2 and GLM / GLM-4: q/k/v biases
// (GlmConfig's attention_bias default); Qwen3, OLMo 2 / 3 and Gemma 3: q/k norms; biases otherwise none,
// Llama's and Qwen3's attention_bias/mlp_bias cleared; Granite's multipliers kept, every other family's reset to
// none; SmolLM3's NoPE layers kept (or its default made, smollm3_default_nope), every other family's cleared;
// GLM's partial_rotary_factor 0.5 where the config came from a family with none, 1 on a family that rotates
// whole heads).
void set_arch(ModelConfig& c, Arch arch);
// SmolLM3Config's NoPE layers where config.json lists none: every 4th (no_rope_layer_interval's default),
// one entry per layer of c. set_arch gives a SmolLM3 whose list does not fit its layers these.
void smollm3_default_nope(ModelConfig& c);
// The windows of an OLMo 3 or Gemma 3 whose config.json gives no layer types: `window` (their configs'
// 4096) on three layers of every four (Olmo3Config), or five of every six (Gemma3TextConfig's
// sliding_window_pattern), one entry per layer of c. set_arch gives such a model whose windows do not fit
// its layers, or slide nowhere, these.
void default_windows(ModelConfig& c, int64_t window = 4096);
// llama | qwen2 | qwen3 | mistral | phi3 | granite | smollm3 | olmo2 | olmo3 | gemma3_text | glm | glm4; throws
// otherwise
Arch arch_from_model_type(const std::string& model_type);

// Parses config.json content; `source` (a path) names the file in every error.
ModelConfig parse_config(const nlohmann::json& j, const std::string& source);
// Training refuses a config whose transformers training would drop out (attention_dropout, Phi-3's
// resid_pdrop), naming the field; `source` names the file.
void check_training_dropout(const ModelConfig& c, const std::string& source);
// Reads DIR/config.json (or the file itself when given a file).
ModelConfig load_config(const std::filesystem::path& dir_or_file);
// A config.json for `c` (fields as transformers writes them), merged over c.raw.
nlohmann::json config_to_json(const ModelConfig& c);
// The RoPE part of config_to_json(c): rope_theta, rope_scaling, max_position_embeddings, and
// rope_parameters and a top-level original_max_position_embeddings where config_to_json writes them
// (c.raw has them, or a Phi-3's LongRoPE).
nlohmann::json rope_json(const ModelConfig& c);
// c with the RoPE of a rope_json (its keys replace c's; the RoPE keys it lacks are dropped), read
// back as config.json would be; `source` names it in errors.
ModelConfig with_rope_json(const ModelConfig& c, const nlohmann::json& rope, const std::string& source);

}  // namespace oomb
