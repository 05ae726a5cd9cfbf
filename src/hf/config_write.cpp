// ModelConfig -> config.json (the fields transformers 4.x and 5 read, the file's other fields kept), and a
// config's RoPE fields alone (rope_json, with_rope_json).
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "hf/config.h"
#include "hf/config_detail.h"

namespace oomb {

using json = nlohmann::json;
using namespace config_detail;

nlohmann::json config_to_json(const ModelConfig& c) {
  json j = c.raw.is_object() ? c.raw : json::object();
  j["architectures"] = json::array({c.architecture});
  j["model_type"] = c.model_type;
  j["hidden_size"] = c.hidden;
  j["intermediate_size"] = c.intermediate;
  j["num_hidden_layers"] = c.layers;
  j["num_attention_heads"] = c.heads;
  j["num_key_value_heads"] = c.kv_heads;
  j["head_dim"] = c.head_dim;
  j["vocab_size"] = c.vocab;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  if (c.arch == Arch::Gemma3) {
    j["hidden_activation"] = "gelu_pytorch_tanh";
    j["query_pre_attn_scalar"] = c.query_pre_attn_scalar;
    const int64_t p = gemma3_window_pattern(c);  // (transformers 4.50 to 4.52 read the layers' kinds from it alone)
    if (p > 0) j["sliding_window_pattern"] = p;
    else j.erase("sliding_window_pattern");
  } else if (!j.contains("hidden_act")) {
    j["hidden_act"] = "silu";
  }
  j["torch_dtype"] = c.torch_dtype;
  if (j.contains("dtype")) j["dtype"] = c.torch_dtype;
  auto id = [](int64_t v) { return v >= 0 ? json(v) : json(nullptr); };
  j["bos_token_id"] = id(c.bos_token_id);
  const json* eos = c.raw.is_object() && c.raw.contains("eos_token_id") ? &c.raw["eos_token_id"] : nullptr;
  bool keep_list = eos && eos->is_array() && !eos->empty() && eos->front() == c.eos_token_id;
  // (GLM's default is a list: written whole, so that the file means what the class's default did)
  const std::vector<int64_t> all = eos_token_ids(c);
  if (!keep_list) j["eos_token_id"] = all.size() > 1 ? json(all) : id(c.eos_token_id);
  // as read, or null for none (absent would mean the class's default); a negative one stays as given
  const json* pad = c.raw.is_object() && c.raw.contains("pad_token_id") ? &c.raw["pad_token_id"] : nullptr;
  const bool same_pad = pad && pad->is_number_integer() && pad->get<int64_t>() < 0 &&
                        c.vocab + pad->get<int64_t>() == c.pad_token_id;
  if (!same_pad && (c.pad_token_id >= 0 || j.contains("pad_token_id") || arch_info(c.arch).pad >= 0))
    j["pad_token_id"] = id(c.pad_token_id);
  const double scalars[] = {c.embedding_multiplier, c.residual_multiplier, c.attention_multiplier, c.logits_scaling};
  if (c.arch == Arch::Granite) {
    for (size_t i = 0; i < std::size(kGraniteScalars); ++i) j[kGraniteScalars[i]] = scalars[i];
  } else {
    OOMB_CHECK(scalars[0] == 1 && scalars[1] == 1 && scalars[2] == 0 && scalars[3] == 1, "config_to_json: the "
               "embedding, residual, attention and logits multipliers belong to Granite only");
  }
  OOMB_CHECK(c.layer_rope.empty() || (c.arch == Arch::SmolLM3 && int64_t(c.layer_rope.size()) == c.layers),
             "config_to_json: NoPE layers belong to SmolLM3 only, one entry per layer");
  if (c.arch == Arch::SmolLM3) {
    json nope = json::array();
    for (int64_t l = 0; l < c.layers; ++l) nope.push_back(int(c.rope_on(l)));
    j["no_rope_layers"] = nope;
  }
  OOMB_CHECK(c.qk_norm == c.has_qk_norm(), "config_to_json: q/k norms belong to Qwen3, OLMo 2 / 3 and Gemma 3 "
             "only");
  if (glm_family(c.arch)) {
    OOMB_CHECK(!c.o_bias && !c.mlp_bias, "config_to_json: {}'s attention_bias covers q/k/v alone; it has no o_proj "
               "or MLP bias", c.architecture);
    j["attention_bias"] = c.qkv_bias;
  } else if (c.arch == Arch::Llama || c.arch == Arch::Qwen3 || c.arch == Arch::Granite || c.arch == Arch::SmolLM3 ||
             c.post_norm()) {
    const bool no_mlp_bias = c.arch == Arch::Qwen3 || c.post_norm();
    OOMB_CHECK(c.qkv_bias == c.o_bias, "config_to_json: {}'s attention_bias covers q/k/v and o together "
               "(qkv_bias {}, o_bias {})", c.architecture, c.qkv_bias, c.o_bias);
    OOMB_CHECK(!no_mlp_bias || !c.mlp_bias, "config_to_json: {} has no MLP bias", c.architecture);
    j["attention_bias"] = c.qkv_bias;
    if (!no_mlp_bias) j["mlp_bias"] = c.mlp_bias;
    if (c.split_rope()) {  // its window and which layers take it, one entry per layer
      int64_t w = 0;
      json types = json::array();
      for (int64_t l = 0; l < c.layers; ++l) {
        const int64_t lw = size_t(l) < c.layer_window.size() ? c.layer_window[size_t(l)] : 0;
        OOMB_CHECK(lw == 0 || w == 0 || lw == w, "config_to_json: {}'s sliding layers share one window ({} and {})",
                   c.architecture, w, lw);
        if (lw > 0) w = lw;
        types.push_back(lw > 0 ? "sliding_attention" : "full_attention");
      }
      j["sliding_window"] = w > 0 ? json(w) : json(nullptr);
      j["layer_types"] = types;
    }
  } else {
    bool qkv = c.arch == Arch::Qwen2;
    OOMB_CHECK(c.qkv_bias == qkv && !c.o_bias && !c.mlp_bias,
               "config_to_json: {} requires qkv_bias={}, o_bias=false, mlp_bias=false", c.architecture, qkv);
    if (c.arch == Arch::Mistral || c.arch == Arch::Phi3) {
      const int64_t w = c.layer_window.empty() ? 0 : c.layer_window.front();
      j["sliding_window"] = w > 0 ? json(w) : json(nullptr);
    }
  }
  // RoPE in the classic form (rope_theta + rope_scaling), read by transformers 4.x and 5. Keys of the raw
  // dicts that are not RoPE parameters survive; stale parameters of another rope_type do not.
  const RopeConfig& r = c.rope;
  auto unknown_keys = [](const json& d) {
    static const char* kKnown[] = {"rope_type", "type", "rope_theta", "factor", "low_freq_factor",
                                   "high_freq_factor", "original_max_position_embeddings", "attention_factor",
                                   "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "truncate",
                                   "short_factor", "long_factor", "partial_rotary_factor"};
    json out = json::object();
    if (d.is_object())
      for (const auto& [k, v] : d.items())
        if (!v.is_object() && std::find(std::begin(kKnown), std::end(kKnown), k) == std::end(kKnown)) out[k] = v;
    return out;
  };
  // the other keys of the dict the RoPE was read from, into both dicts written (so that either, read
  // back, gives them again); none beside a Phi-3's LongRoPE, which transformers 4.x takes as three keys
  const bool phi3_longrope = c.arch == Arch::Phi3 && r.type == "longrope";
  // (a dict per layer type, OLMo 3's or Gemma 3's: the full layers' is the RoPE's)
  json source = j.value(rope_dict_key(j), json());
  if (c.split_rope() && source.is_object() && source.contains("full_attention")) source = source["full_attention"];
  const json extras = phi3_longrope ? json::object() : unknown_keys(source);
  json rs = nullptr;
  if (r.type == "longrope") {  // its factor as the file has it: given, or following the lengths
    // (transformers 4.x's Phi3Config takes a rope_scaling of exactly type, short_factor and long_factor)
    rs = extras;
    rs[phi3_longrope ? "type" : "rope_type"] = r.type;
    rs["short_factor"] = r.short_factor;
    rs["long_factor"] = r.long_factor;
    if (c.arch == Arch::Phi3 || j.contains("original_max_position_embeddings"))  // (the top-level one wins)
      j["original_max_position_embeddings"] = r.original_max_position_embeddings;
    else
      rs["original_max_position_embeddings"] = r.original_max_position_embeddings;
    if (r.factor_given) rs["factor"] = r.factor;
    if (r.attention_factor) rs["attention_factor"] = *r.attention_factor;
  } else if (r.type != "default") {
    rs = extras;
    rs["rope_type"] = r.type;
    rs["factor"] = r.factor;
    if (r.type == "llama3") {
      rs["low_freq_factor"] = r.low_freq_factor;
      rs["high_freq_factor"] = r.high_freq_factor;
    }
    if (r.original_max_position_embeddings > 0) {
      rs["original_max_position_embeddings"] = r.original_max_position_embeddings;
      if (j.contains("original_max_position_embeddings"))  // transformers 5 lets the top-level one win
        j["original_max_position_embeddings"] = r.original_max_position_embeddings;
    }
    if (r.type == "yarn") {
      rs["beta_fast"] = r.beta_fast;
      rs["beta_slow"] = r.beta_slow;
      rs["truncate"] = r.truncate;
      if (r.attention_factor) rs["attention_factor"] = *r.attention_factor;
      if (r.mscale) rs["mscale"] = *r.mscale;
      if (r.mscale_all_dim) rs["mscale_all_dim"] = *r.mscale_all_dim;
    }
  }
  j["rope_theta"] = r.theta;
  // at the top level, where transformers 4.x reads it and 5 takes it into the dict
  // (always where the class's default is not 1: GLM's 0.5)
  if (r.partial_rotary_factor != 1.0 || j.contains("partial_rotary_factor") || default_partial_rotary(c.arch) != 1.0)
    j["partial_rotary_factor"] = r.partial_rotary_factor;
  j["rope_scaling"] = rs;
  if (c.arch == Arch::Gemma3) j["rope_local_base_freq"] = c.sliding_rope_theta;
  const bool sliding_theta = c.arch == Arch::Olmo3 && c.sliding_rope_theta > 0 && c.sliding_rope_theta != r.theta;
  if (j.contains("rope_parameters") || sliding_theta) {  // keep transformers 5's form too, in step with the classic one
    json rp = extras;
    if (rs.is_object()) rp.update(rs);
    rp["rope_type"] = r.type;
    rp["rope_theta"] = r.theta;
    // (OLMo 3, Gemma 3: per layer type, as transformers 5 writes it; the sliding layers' plain RoPE)
    if (c.split_rope())
      rp = {{"full_attention", rp},
            {"sliding_attention", {{"rope_type", "default"},
                                   {"rope_theta", c.sliding_rope_theta > 0 ? c.sliding_rope_theta : r.theta}}}};
    j["rope_parameters"] = rp;
  }
  return j;
}

namespace {
const char* const kRopeKeys[] = {"rope_theta", "rope_scaling", "rope_parameters", "max_position_embeddings",
                                 "original_max_position_embeddings"};
}  // namespace

nlohmann::json rope_json(const ModelConfig& c) {
  const json all = config_to_json(c);
  json j = json::object();
  for (const char* k : kRopeKeys)
    if (all.contains(k)) j[k] = all[k];
  return j;
}

ModelConfig with_rope_json(const ModelConfig& c, const nlohmann::json& rope, const std::string& source) {
  OOMB_CHECK(rope.is_object(), "{}: the RoPE must be a JSON object, got {}", source, rope.type_name());
  for (const auto& item : rope.items())
    OOMB_CHECK(std::find(std::begin(kRopeKeys), std::end(kRopeKeys), item.key()) != std::end(kRopeKeys),
               "{}: '{}' is not a RoPE field (rope_theta, rope_scaling, rope_parameters, max_position_embeddings, "
               "original_max_position_embeddings)", source, item.key());
  json j = config_to_json(c);
  for (const char* k : kRopeKeys) {
    if (rope.contains(k)) j[k] = rope[k];
    else j.erase(k);
  }
  return parse_config(j, source);
}

}  // namespace oomb
