// config.json -> ModelConfig, with transformers' defaults and semantics for Llama, Qwen2, Qwen3, Mistral, Phi-3,
// Granite, SmolLM3, OLMo 2 and 3, Gemma 3, GLM and GLM-4 (the writer: config_write.cpp).
#include "hf/config.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "hf/config_detail.h"
#include "model/rope.h"

namespace oomb {
namespace config_detail {

using json = nlohmann::json;

// Caps that keep absurd (e.g. fuzzed) configs from driving huge allocations later.
constexpr int64_t kMaxHidden = int64_t(1) << 20, kMaxInter = int64_t(1) << 22, kMaxLayers = 4096,
                  kMaxHeads = 4096, kMaxHeadDim = 8192, kMaxVocab = int64_t(1) << 24,
                  kMaxPositions = int64_t(1) << 32;

constexpr ArchInfo kArchs[] = {{Arch::Llama, "LlamaForCausalLM", "llama", 2048, 1, 2, -1, 1e-6},
                               {Arch::Qwen2, "Qwen2ForCausalLM", "qwen2", 32768, -1, -1, -1, 1e-6},
                               {Arch::Qwen3, "Qwen3ForCausalLM", "qwen3", 32768, -1, -1, -1, 1e-6},
                               {Arch::Mistral, "MistralForCausalLM", "mistral", 4096 * 32, 1, 2, -1, 1e-6},
                               {Arch::Phi3, "Phi3ForCausalLM", "phi3", 4096, 1, 32000, 32000, 1e-5},
                               {Arch::Granite, "GraniteForCausalLM", "granite", 2048, 1, 2, -1, 1e-6},
                               {Arch::SmolLM3, "SmolLM3ForCausalLM", "smollm3", 32768, 128000, 128001, 128004, 1e-6,
                                2e6},
                               {Arch::Olmo2, "Olmo2ForCausalLM", "olmo2", 2048, -1, 50279, 1, 1e-5},
                               {Arch::Olmo3, "Olmo3ForCausalLM", "olmo3", 2048, -1, 50279, 1, 1e-5, 5e5},
                               {Arch::Gemma3, "Gemma3ForCausalLM", "gemma3_text", 131072, 2, 1, 0, 1e-6, 1e6, 4},
                               // (GlmConfig / Glm4Config: eos_token_id [151329, 151336, 151338], bos None)
                               {Arch::Glm, "GlmForCausalLM", "glm", 131072, -1, 151329, 151329, 1.5625e-7,
                                10000.0, 2},
                               {Arch::Glm4, "Glm4ForCausalLM", "glm4", 131072, -1, 151329, 151329, 1.5625e-7,
                                10000.0, 2}};
constexpr const char* kArchitectures = "LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, MistralForCausalLM, "
                                       "Phi3ForCausalLM, GraniteForCausalLM, SmolLM3ForCausalLM, Olmo2ForCausalLM, "
                                       "Olmo3ForCausalLM, Gemma3ForCausalLM, GlmForCausalLM, Glm4ForCausalLM";
constexpr const char* kModelTypes = "llama, qwen2, qwen3, mistral, phi3, granite, smollm3, olmo2, olmo3, gemma3_text, "
                                    "glm, glm4";
// Olmo3Config's layer_types where the file gives none: sliding_attention but on every 4th layer (Gemma3TextConfig's:
// but on every sliding_window_pattern-th, 6)
bool slides_by_default(int64_t l, int64_t pattern) { return (l + 1) % pattern != 0; }
int64_t default_window_pattern(Arch a) { return a == Arch::Gemma3 ? 6 : 4; }
bool takes_partial_rotary(Arch a) { return a == Arch::Phi3 || glm_family(a); }
double default_partial_rotary(Arch a) { return glm_family(a) ? 0.5 : 1.0; }
const ArchInfo& arch_info(Arch a) {
  for (const auto& k : kArchs)
    if (k.arch == a) return k;
  fail("config: architecture {} has no entry", int(a));
}

std::string shown(const json& v, bool quote = true) {  // a short rendering of a value for messages
  if (v.is_structured()) return v.type_name();
  std::string s = !quote && v.is_string() ? v.get<std::string>()
                                          : v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 48 ? s.substr(0, 45) + "..." : s;
}

// Reads typed fields of one JSON object; every error names the file and the field.
struct Reader {
  const json& o;
  const std::string& src;
  std::string prefix;  // "" for top level, "rope_scaling." inside the rope dict

  const json* get(const char* k) const {  // absent and null both mean "not given"
    auto it = o.find(k);
    return it == o.end() || it->is_null() ? nullptr : &*it;
  }
  [[noreturn]] void bad(const char* k, const char* want, const json& v) const {
    fail("config {}: field '{}{}' must be {}, got {}{}", src, prefix, k, want, v.type_name(),
         v.is_structured() ? "" : " " + shown(v));
  }
  double num(const char* k, double def, bool* given = nullptr) const {
    const json* v = get(k);
    if (given) *given = v != nullptr;
    if (!v) return def;
    if (!v->is_number()) bad(k, "a number", *v);
    double d = v->get<double>();
    OOMB_CHECK(std::isfinite(d), "config {}: field '{}{}' must be finite, got {}", src, prefix, k, shown(*v));
    return d;
  }
  double pos_num(const char* k, double def) const {
    double d = num(k, def);
    OOMB_CHECK(d > 0, "config {}: field '{}{}' must be positive, got {}", src, prefix, k, d);
    return d;
  }
  double req_num(const char* k, const char* rope_type) const {
    OOMB_CHECK(o.contains(k), "config {}: '{}' with rope_type '{}' is missing required field '{}'", src,
               prefix.substr(0, prefix.size() - 1), rope_type, k);
    return pos_num(k, 0);
  }
  int64_t integer(const json& v, const char* k) const {
    if (v.is_number_unsigned()) {
      OOMB_CHECK(v.get<uint64_t>() <= uint64_t(std::numeric_limits<int64_t>::max()),
                 "config {}: field '{}{}' is too large: {}", src, prefix, k, shown(v));
      return int64_t(v.get<uint64_t>());
    }
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number_float()) {  // 8192.0 is accepted as 8192
      double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) return int64_t(d);
    }
    bad(k, "an integer", v);
  }
  // A positive integer no larger than `max`; `def` < 0 means the field is required.
  int64_t size(const char* k, int64_t max, int64_t def = -1) const {
    const json* v = get(k);
    if (!v) {
      OOMB_CHECK(def >= 0, "config {}: missing required field '{}{}'", src, prefix, k);
      return def;
    }
    int64_t n = integer(*v, k);
    OOMB_CHECK(n > 0, "config {}: field '{}{}' must be positive, got {}", src, prefix, k, n);
    OOMB_CHECK(n <= max, "config {}: field '{}{}' = {} exceeds the supported maximum {}", src, prefix, k, n,
               max);
    return n;
  }
  bool boolean(const char* k, bool def) const {
    const json* v = get(k);
    if (!v) return def;
    if (!v->is_boolean()) bad(k, "true or false", *v);
    return v->get<bool>();
  }
  std::string str(const char* k, const std::string& def) const {
    const json* v = get(k);
    if (!v) return def;
    if (!v->is_string()) bad(k, "a string", *v);
    return v->get<std::string>();
  }
  int64_t token_id(const char* k, int64_t def, bool list_ok) const {
    const json* v = get(k);
    if (!v) return o.contains(k) ? -1 : def;  // an explicit null is "no token"
    if (list_ok && v->is_array()) {
      for (const auto& e : *v) integer(e, k);  // every element must be an integer
      if (v->empty()) return -1;
      const json& first = v->front();
      int64_t id = integer(first, k);
      OOMB_CHECK(id >= 0, "config {}: field '{}[0]' must be >= 0, got {}", src, k, id);
      return id;
    }
    int64_t id = integer(*v, k);
    OOMB_CHECK(id >= 0, "config {}: field '{}' must be >= 0, got {}", src, k, id);
    return id;
  }
};

const ArchInfo& detect_arch(const Reader& r) {
  const ArchInfo* by_arch = nullptr;
  const ArchInfo* by_type = nullptr;
  if (const json* a = r.get("architectures")) {
    if (!a->is_array() || a->empty() || !a->front().is_string())
      r.bad("architectures", "a non-empty list of strings", *a);
    std::string name = a->front().get<std::string>();
    OOMB_CHECK(name != "Gemma3ForConditionalGeneration", "config {}: a Gemma 3 with its vision tower "
               "(Gemma3ForConditionalGeneration); oomb trains the text model, Gemma3ForCausalLM (model_type "
               "gemma3_text): its text_config as config.json and its language model's weights", r.src);
    for (const auto& k : kArchs)
      if (name == k.architecture) by_arch = &k;
    OOMB_CHECK(by_arch, "config {}: unsupported architecture '{}' in field 'architectures[0]' (supported: {})", r.src,
               shown(a->front(), false), kArchitectures);
  }
  if (r.get("model_type")) {
    std::string t = r.str("model_type", "");
    for (const auto& k : kArchs)
      if (t == k.model_type) by_type = &k;
    OOMB_CHECK(by_type, "config {}: unsupported model_type '{}' in field 'model_type' (supported: {})", r.src,
               shown(*r.get("model_type"), false), kModelTypes);
  }
  OOMB_CHECK(by_arch || by_type, "config {}: missing field 'architectures' (or 'model_type'); supported: {}", r.src,
             kArchitectures);
  OOMB_CHECK(!by_arch || !by_type || by_arch == by_type,
             "config {}: architectures[0] '{}' does not match model_type '{}'", r.src, by_arch->architecture,
             by_type->model_type);
  return by_arch ? *by_arch : *by_type;
}

const char* rope_dict_key(const json& j) {
  const auto it = j.find("rope_scaling");
  const bool none = it == j.end() || it->is_null() || (it->is_object() && it->empty());
  return none ? "rope_parameters" : "rope_scaling";
}

// partial_rotary_factor, top level or in the RoPE dict (transformers 5 puts it in the dict; 4.x reads the
// top-level one): one value if both are given. Only Phi3ForCausalLM's and GLM's attention rotates part of a
// head (the other families' apply_rotary_pos_emb takes the whole head, and fails on less); GlmConfig and
// Glm4Config default it to 0.5.
double parse_partial_rotary(const Reader& top, const Reader& dict, const ModelConfig& c) {
  bool in_top = false, in_dict = false;
  const double def = default_partial_rotary(c.arch);
  const double t = top.num("partial_rotary_factor", def, &in_top), d = dict.num("partial_rotary_factor", def, &in_dict);
  OOMB_CHECK(!in_top || !in_dict || t == d, "config {}: 'partial_rotary_factor' is {} at the top level but {} in "
             "'{}': give one", top.src, t, d, dict.prefix.substr(0, dict.prefix.size() - 1));
  const double f = in_dict ? d : t;
  const std::string where = in_dict ? dict.prefix : "";
  OOMB_CHECK(f == 1.0 || takes_partial_rotary(c.arch), "config {}: field '{}partial_rotary_factor' = {} is not "
             "supported on {} (only 1.0, RoPE over the whole head: its attention takes no partial rotation; "
             "Phi3ForCausalLM's and GlmForCausalLM's do)", top.src, where, f, c.architecture);
  OOMB_CHECK(f > 0 && f <= 1, "config {}: field '{}partial_rotary_factor' must be in (0, 1], got {}", top.src,
             where, f);
  const int64_t dims = rope_dim(c.head_dim, f);
  OOMB_CHECK(dims >= 2 && dims % 2 == 0, "config {}: field '{}partial_rotary_factor' = {} turns int({} * {}) = {} "
             "dims of each head; an even number of at least 2 is needed", top.src, where, f, c.head_dim, f, dims);
  return f;
}

// RoPE: the classic top-level rope_theta + rope_scaling, or transformers 5's rope_parameters. As in
// transformers 5, a non-null rope_scaling takes precedence over rope_parameters, and the dict's own
// rope_theta over the top-level one.
RopeConfig parse_rope(const Reader& top, const ModelConfig& c) {
  const int64_t max_pos = c.max_position_embeddings;
  RopeConfig rc;
  // `rope_scaling or rope_parameters`: an empty rope_scaling is none
  std::string name = rope_dict_key(top.o);
  const json* dict = top.get(name.c_str());
  if (dict && !dict->is_object()) top.bad(name.c_str(), "an object or null", *dict);
  static const json kEmpty = json::object();
  Reader r{dict ? *dict : kEmpty, top.src, name + "."};
  for (const auto& [k, v] : r.o.items())
    OOMB_CHECK(!v.is_object(), "config {}: per-layer-type '{}' ('{}' is an object) is not supported", top.src,
               name, k);
  rc.theta = top.num("rope_theta", arch_info(c.arch).theta);
  if (r.get("rope_theta")) rc.theta = r.num("rope_theta", rc.theta);
  OOMB_CHECK(rc.theta > 0, "config {}: rope_theta must be positive, got {}", top.src, rc.theta);
  rc.partial_rotary_factor = parse_partial_rotary(top, r, c);
  const int64_t rot = rope_dim(c.head_dim, rc.partial_rotary_factor);

  const char* type_key = r.get("rope_type") ? "rope_type" : "type";  // "type" is the legacy spelling
  if (!r.get(type_key)) {
    for (const auto& [k, v] : r.o.items())
      OOMB_CHECK(v.is_null() || k == "rope_theta" || k == "partial_rotary_factor",
                 "config {}: '{}' has no 'rope_type' but sets '{}'", top.src, name, k);
  }
  rc.type = r.str(type_key, "default");
  if (c.arch == Arch::Phi3 && (rc.type == "su" || rc.type == "yarn")) rc.type = "longrope";  // as Phi3Config reads them
  OOMB_CHECK(rc.type == "default" || rc.type == "linear" || rc.type == "llama3" || rc.type == "yarn" ||
                 rc.type == "longrope",
             "unsupported rope_type '{}' in {} (supported: default, linear, llama3, yarn, longrope)", rc.type, top.src);
  OOMB_CHECK(c.arch != Arch::Phi3 || rc.type == "default" || rc.type == "longrope", "config {}: Phi3ForCausalLM takes "
             "rope_type default or longrope ('{}.rope_type' = '{}': transformers' Phi3Config refuses it)", top.src,
             name, rc.type);
  const char* t = rc.type.c_str();
  // original_max_position_embeddings: transformers 5 lets a top-level field of that name win.
  auto orig = [&](int64_t def) {
    if (top.get("original_max_position_embeddings"))
      return top.size("original_max_position_embeddings", kMaxPositions);
    return r.size("original_max_position_embeddings", kMaxPositions, def);
  };
  if (rc.type == "linear") {
    rc.factor = r.req_num("factor", t);
  } else if (rc.type == "llama3") {
    rc.factor = r.req_num("factor", t);
    rc.low_freq_factor = r.req_num("low_freq_factor", t);
    rc.high_freq_factor = r.req_num("high_freq_factor", t);
    OOMB_CHECK(rc.high_freq_factor > rc.low_freq_factor,
               "config {}: {}high_freq_factor ({}) must be greater than low_freq_factor ({})", top.src, r.prefix,
               rc.high_freq_factor, rc.low_freq_factor);
    rc.original_max_position_embeddings = orig(max_pos);  // transformers 5 defaults it to max_position_embeddings
  } else if (rc.type == "yarn") {
    OOMB_CHECK(r.o.contains("factor"), "config {}: '{}' with rope_type 'yarn' is missing required field 'factor'",
               top.src, name);
    rc.original_max_position_embeddings = orig(0);  // 0: absent, max_position_embeddings is used
    int64_t o = rc.original_max_position_embeddings ? rc.original_max_position_embeddings : max_pos;
    // factor: null -> max_position_embeddings / original_max_position_embeddings (transformers 5)
    rc.factor = r.get("factor") ? r.pos_num("factor", 1.0) : double(max_pos) / double(o);
    if (r.get("attention_factor")) rc.attention_factor = r.num("attention_factor", 1.0);
    if (r.get("mscale")) rc.mscale = r.num("mscale", 1.0);
    if (r.get("mscale_all_dim")) rc.mscale_all_dim = r.num("mscale_all_dim", 0.0);
    // `get("beta_fast") or 32`: null and 0 both take the default
    rc.beta_fast = r.num("beta_fast", 32.0), rc.beta_slow = r.num("beta_slow", 1.0);
    if (rc.beta_fast == 0) rc.beta_fast = 32.0;
    if (rc.beta_slow == 0) rc.beta_slow = 1.0;
    OOMB_CHECK(rc.beta_fast > 0 && rc.beta_slow > 0, "config {}: {}beta_fast/beta_slow must be positive, got "
               "{} / {}", top.src, r.prefix, rc.beta_fast, rc.beta_slow);
    OOMB_CHECK(rc.theta != 1.0, "config {}: rope_theta 1 is invalid for yarn (log(theta) = 0)", top.src);
    // `get("truncate", True)` then `if truncate:`: an explicit null means no truncation
    rc.truncate = r.o.contains("truncate") ? r.boolean("truncate", false) : true;
  } else if (rc.type == "longrope") {
    auto factors = [&](const char* k) {
      OOMB_CHECK(r.get(k), "config {}: '{}' with rope_type 'longrope' is missing required field '{}'", top.src, name, k);
      const json& v = *r.get(k);
      if (!v.is_array()) r.bad(k, "a list of numbers", v);
      OOMB_CHECK(int64_t(v.size()) == rot / 2, "config {}: field '{}{}' has {} entries; {} rotary dims need {} "
                 "(one per rotary frequency)", top.src, r.prefix, k, v.size(), rot, rot / 2);
      std::vector<double> out;
      for (size_t i = 0; i < v.size(); ++i) {
        const bool ok = v[i].is_number() && std::isfinite(v[i].get<double>()) && v[i].get<double>() > 0;
        OOMB_CHECK(ok, "config {}: field '{}{}[{}]' must be a positive number, got {}", top.src, r.prefix, k, i,
                   shown(v[i]));
        out.push_back(v[i].get<double>());
      }
      return out;
    };
    rc.short_factor = factors("short_factor");
    rc.long_factor = factors("long_factor");
    // transformers 5 (standardize_rope_params): a top-level original_max_position_embeddings wins (Phi3Config
    // always has one: 4096 by default), else the dict's, else max_position_embeddings; the factor is the
    // dict's, else max_position_embeddings over that length
    rc.original_max_position_embeddings =
        c.arch == Arch::Phi3 && !top.get("original_max_position_embeddings") ? 4096 : orig(max_pos);
    rc.factor_given = r.get("factor") != nullptr;
    rc.factor = rc.factor_given ? r.pos_num("factor", 1.0)
                                : double(max_pos) / double(rc.original_max_position_embeddings);
    if (r.get("attention_factor")) rc.attention_factor = r.num("attention_factor", 1.0);
    OOMB_CHECK(rc.attention_factor || rc.factor <= 1.0 || rc.original_max_position_embeddings > 1, "config {}: "
               "longrope's default attention_factor divides by ln(original_max_position_embeddings) = ln 1 = 0; give "
               "'attention_factor'", top.src);
  }
  return rc;
}

}  // namespace config_detail

using namespace config_detail;

void set_arch(ModelConfig& c, Arch arch) {
  const ArchInfo& k = arch_info(arch);
  const Arch from = c.arch;
  c.arch = arch;
  c.model_type = k.model_type;
  c.architecture = k.architecture;
  c.qkv_bias = arch == Arch::Qwen2 || glm_family(arch);
  c.qk_norm = c.has_qk_norm();
  // (a family's own factor kept within it, and between GLM and GLM-4)
  if (!takes_partial_rotary(arch) || default_partial_rotary(from) != default_partial_rotary(arch))
    c.rope.partial_rotary_factor = default_partial_rotary(arch);
  c.o_bias = c.mlp_bias = false;
  if (arch != Arch::Granite) {
    c.embedding_multiplier = c.residual_multiplier = c.logits_scaling = 1.0;
    c.attention_multiplier = 0.0;
  } else if (c.attention_multiplier == 0.0) {
    c.attention_multiplier = 1.0;  // GraniteConfig's default
  }
  if (arch != Arch::SmolLM3) c.layer_rope.clear();
  else if (int64_t(c.layer_rope.size()) != c.layers) smollm3_default_nope(c);
  const bool slides = std::any_of(c.layer_window.begin(), c.layer_window.end(), [](int64_t w) { return w > 0; });
  if (c.split_rope() && (from != arch || int64_t(c.layer_window.size()) != c.layers || !slides)) default_windows(c);
  if (!c.split_rope() || from != arch) c.sliding_rope_theta = arch == Arch::Gemma3 ? 10000.0 : 0.0;
  if (arch != Arch::Gemma3) c.query_pre_attn_scalar = 0;
  else if (c.query_pre_attn_scalar <= 0) c.query_pre_attn_scalar = 256;  // Gemma3TextConfig's default
}

int64_t config_detail::gemma3_window_pattern(const ModelConfig& c) {
  auto fits = [&](int64_t p) {
    for (int64_t l = 0; l < c.layers; ++l)
      if ((size_t(l) < c.layer_window.size() && c.layer_window[size_t(l)] > 0) != slides_by_default(l, p)) return false;
    return true;
  };
  const json* raw = c.raw.is_object() && c.raw.contains("sliding_window_pattern") ? &c.raw["sliding_window_pattern"] : nullptr;
  if (raw && raw->is_number_integer() && raw->get<int64_t>() > 0 && fits(raw->get<int64_t>())) return raw->get<int64_t>();
  if (fits(default_window_pattern(c.arch))) return default_window_pattern(c.arch);
  for (int64_t p = 1; p <= c.layers + 1; ++p)
    if (fits(p)) return p;
  return 0;
}

void default_windows(ModelConfig& c, int64_t window) {
  c.layer_window.assign(size_t(std::max<int64_t>(c.layers, 0)), 0);
  const int64_t pattern = default_window_pattern(c.arch);
  for (int64_t l = 0; l < c.layers; ++l) c.layer_window[size_t(l)] = slides_by_default(l, pattern) ? window : 0;
}

double ModelConfig::embed_scale() const {
  // (Gemma: torch.tensor(hidden_size ** 0.5), a float32 scalar)
  return arch == Arch::Gemma3 ? double(float(std::sqrt(double(hidden)))) : embedding_multiplier;
}

void smollm3_default_nope(ModelConfig& c) {
  c.layer_rope.assign(size_t(std::max<int64_t>(c.layers, 0)), true);
  for (int64_t l = 3; l < c.layers; l += 4) c.layer_rope[size_t(l)] = false;  // (l + 1) % 4 == 0
}

float attention_scale(const ModelConfig& c) {
  if (c.query_pre_attn_scalar > 0) return float(std::pow(c.query_pre_attn_scalar, -0.5));
  return c.attention_multiplier > 0 ? float(c.attention_multiplier) : float(1.0 / std::sqrt(double(c.head_dim)));
}

Arch arch_from_model_type(const std::string& model_type) {
  for (const auto& k : kArchs)
    if (model_type == k.model_type) return k.arch;
  fail("unknown architecture '{}' (known: {})", model_type, kModelTypes);
}

// SmolLM3's no_rope_layers (1: the layer turns q and k, 0: a NoPE layer; at least one entry per layer,
// the first num_hidden_layers read), or SmolLM3Config's default: a NoPE layer every
// no_rope_layer_interval layers (4), the last of each run.
void parse_nope(const Reader& r, ModelConfig& c) {
  c.layer_rope.clear();
  if (c.arch != Arch::SmolLM3) return;
  c.layer_rope.resize(size_t(c.layers));
  if (const json* v = r.get("no_rope_layers")) {
    if (!v->is_array() || int64_t(v->size()) < c.layers)
      r.bad("no_rope_layers", fmt::format("a list of at least {} entries (1: RoPE, 0: none)", c.layers).c_str(), *v);
    for (int64_t l = 0; l < c.layers; ++l) {
      const json& e = (*v)[size_t(l)];
      const int64_t x = e.is_boolean() ? int64_t(e.get<bool>()) : r.integer(e, "no_rope_layers");
      OOMB_CHECK(x == 0 || x == 1, "config {}: no_rope_layers[{}] = {}: 1 (RoPE) or 0 (none)", r.src, l, x);
      c.layer_rope[size_t(l)] = x == 1;
    }
  } else {
    const int64_t k = r.size("no_rope_layer_interval", kMaxLayers, 4);
    for (int64_t l = 0; l < c.layers; ++l) c.layer_rope[size_t(l)] = (l + 1) % k != 0;
  }
}

// The layers' sliding windows, as transformers sets them (ModelConfig::layer_window).
void parse_windows(const Reader& r, const json& j, ModelConfig& c) {
  c.layer_window.assign(size_t(c.layers), 0);
  int64_t w = 0;
  auto window = [&] {
    const json& v = j["sliding_window"];
    OOMB_CHECK(!v.is_number() || v.get<double>() > 0, "config {}: field 'sliding_window' = {}: a window of 0 keys "
               "would let no query see any key", r.src, shown(v));
    return r.size("sliding_window", kMaxPositions);
  };
  if (c.arch == Arch::Mistral || c.split_rope()) {
    // MistralConfig, Olmo3Config and Gemma3TextConfig default sliding_window to 4096 (the latter two's
    // on their sliding_attention layers); only an explicit null means none
    w = !j.contains("sliding_window") ? 4096 : j["sliding_window"].is_null() ? 0 : window();
  } else if (c.arch == Arch::Phi3) {  // Phi3Config: none by default; given, on every layer
    w = j.contains("sliding_window") && !j["sliding_window"].is_null() ? window() : 0;
  } else if ((c.arch == Arch::Qwen2 || c.arch == Arch::Qwen3 || c.arch == Arch::SmolLM3) &&
             r.boolean("use_sliding_window", false) && j.contains("sliding_window") && !j["sliding_window"].is_null()) {
    w = window();
  }
  const json* lt = r.get("layer_types");
  if (lt) {
    if (!lt->is_array() || int64_t(lt->size()) != c.layers)
      r.bad("layer_types", fmt::format("a list of {} entries", c.layers).c_str(), *lt);
    for (const auto& e : *lt)
      OOMB_CHECK(e == "full_attention" || e == "sliding_attention", "config {}: layer_types entry {} is not "
                 "supported (full_attention or sliding_attention)", r.src, shown(e));
  }
  if (w == 0) {
    OOMB_CHECK(lt || !c.split_rope() || c.layers == 0, "config {}: {}'s sliding_window is null, but its config's "
               "layer_types (absent here) slide {}: give a window, or layer_types", r.src, c.architecture,
               c.arch == Arch::Olmo3 ? "three layers of every four" : "five layers of every six");
    for (const auto& e : lt ? *lt : json::array())
      OOMB_CHECK(e == "full_attention", "config {}: layer_types asks for sliding_attention, but no sliding window "
                 "is set{}", r.src, c.arch == Arch::Llama ? " (Llama has none)" : c.arch == Arch::Granite ? " (Granite has none)"
                 : c.arch == Arch::Olmo2 ? " (OLMo 2 has none; OLMo 3 has)"
                 : glm_family(c.arch) ? " (GLM has none)"
                 : c.split_rope() ? " (its sliding_window is null)" : " (sliding_window with use_sliding_window)");
    return;
  }
  // (SmolLM3Config without layer_types: the window on its NoPE layers)
  const int64_t first = c.arch == Arch::Mistral || c.arch == Arch::Phi3 || c.arch == Arch::SmolLM3
                            ? 0 : r.size("max_window_layers", kMaxLayers, 28);
  // (Olmo3Config without layer_types: sliding_attention but on every 4th layer; Gemma3TextConfig: but on
  // every sliding_window_pattern-th, 6)
  // (read only without layer_types, as transformers reads it)
  const int64_t pattern = c.arch == Arch::Gemma3 && !lt ? r.size("sliding_window_pattern", kMaxLayers, 6)
                                                         : default_window_pattern(c.arch);
  for (int64_t l = 0; l < c.layers; ++l)
    c.layer_window[size_t(l)] = lt ? ((*lt)[size_t(l)] == "sliding_attention" ? w : 0)
                                : c.split_rope() ? (slides_by_default(l, pattern) ? w : 0)
                                : c.arch == Arch::SmolLM3 ? (c.rope_on(l) ? 0 : w)
                                : l >= first ? w : 0;
}

// The RoPE, and OLMo 3's or Gemma 3's sliding layers' plain one. transformers 5 writes their rope_parameters
// per layer type: {"full_attention": {...}, "sliding_attention": {"rope_type": "default", "rope_theta": ...}};
// the full layers' dict is the RoPE (read as a flat rope_parameters would be), the sliding layers' must
// be default, and its theta becomes sliding_rope_theta: where it gives none, OLMo 3's top-level rope_theta
// (or Olmo3Config's 5e5), Gemma 3's rope_local_base_freq (or Gemma3TextConfig's 10000), as also where the
// file has no such dict. Every other family: parse_rope.
static RopeConfig rope_by_layer_type(const Reader& r, const json& j, ModelConfig& c) {
  const json* rp = r.get("rope_parameters");
  const bool per_type = c.split_rope() && rp && rp->is_object() &&
                        (rp->contains("full_attention") || rp->contains("sliding_attention"));
  const double local = c.arch == Arch::Gemma3 ? r.pos_num("rope_local_base_freq", 10000.0) : 0.0;
  c.sliding_rope_theta = local;
  OOMB_CHECK(local == 0 || local > 1, "config {}: field 'rope_local_base_freq' must be above 1, got {}", r.src, local);
  if (!per_type) return parse_rope(r, c);
  for (const auto& [k, v] : rp->items())
    OOMB_CHECK(k == "full_attention" || k == "sliding_attention", "config {}: rope_parameters per layer type has "
               "'{}' (its layer types are full_attention and sliding_attention)", r.src, k);
  json flat = j;
  flat["rope_parameters"] = rp->contains("full_attention") ? (*rp)["full_attention"] : json::object();
  const RopeConfig rc = parse_rope(Reader{flat, r.src, ""}, c);
  const json sliding = rp->contains("sliding_attention") ? (*rp)["sliding_attention"] : json::object();
  if (!sliding.is_object()) r.bad("rope_parameters.sliding_attention", "an object", sliding);
  const Reader s{sliding, r.src, "rope_parameters.sliding_attention."};
  const std::string type = s.str("rope_type", "default");
  OOMB_CHECK(type == "default", "config {}: rope_parameters.sliding_attention.rope_type = '{}': {}'s sliding "
             "layers take the plain RoPE (default)", r.src, type, c.architecture);
  for (const auto& [k, v] : sliding.items())
    OOMB_CHECK(k == "rope_type" || k == "rope_theta", "config {}: rope_parameters.sliding_attention sets '{}' "
               "(a default RoPE has rope_theta alone)", r.src, k);
  c.sliding_rope_theta = s.num("rope_theta", local > 0 ? local : r.num("rope_theta", arch_info(c.arch).theta));
  OOMB_CHECK(c.sliding_rope_theta > 1, "config {}: rope_parameters.sliding_attention.rope_theta must be above 1, "
             "got {}", r.src, c.sliding_rope_theta);
  return rc;
}

ModelConfig parse_config(const nlohmann::json& j, const std::string& source) {
  OOMB_CHECK(j.is_object(), "config {}: the top level must be a JSON object, got {}", source, j.type_name());
  Reader r{j, source, ""};
  ModelConfig c;
  const ArchInfo& ai = detect_arch(r);
  c.arch = ai.arch, c.architecture = ai.architecture, c.model_type = ai.model_type;

  c.hidden = r.size("hidden_size", kMaxHidden);
  c.intermediate = r.size("intermediate_size", kMaxInter);
  c.layers = r.size("num_hidden_layers", kMaxLayers);
  c.heads = r.size("num_attention_heads", kMaxHeads);
  // null/absent -> num_attention_heads; GlmConfig's and Glm4Config's 2, Gemma3TextConfig's 4 (no fallback to
  // the head count in either)
  c.kv_heads = r.size("num_key_value_heads", kMaxHeads, ai.kv_heads ? ai.kv_heads : c.heads);
  c.vocab = r.size("vocab_size", kMaxVocab);
  OOMB_CHECK(c.heads % c.kv_heads == 0,
             "config {}: num_attention_heads ({}) must be divisible by num_key_value_heads ({})", source, c.heads,
             c.kv_heads);
  if (r.get("head_dim")) {
    c.head_dim = r.size("head_dim", kMaxHeadDim);
  } else if (c.arch == Arch::Qwen3 || c.arch == Arch::Gemma3 || glm_family(c.arch)) {
    // Qwen3Config's and GlmConfig's default 128, Gemma3TextConfig's 256, whatever hidden_size /
    // num_attention_heads is
    c.head_dim = c.arch == Arch::Gemma3 ? 256 : 128;
  } else {
    OOMB_CHECK(c.hidden % c.heads == 0,
               "config {}: hidden_size ({}) must be divisible by num_attention_heads ({}) when head_dim is not "
               "given", source, c.hidden, c.heads);
    c.head_dim = c.hidden / c.heads;
    OOMB_CHECK(c.head_dim <= kMaxHeadDim, "config {}: head_dim = {} exceeds the supported maximum {}", source,
               c.head_dim, kMaxHeadDim);
  }
  OOMB_CHECK(c.head_dim % 2 == 0, "config {}: head_dim must be even for RoPE, got {}", source, c.head_dim);
  c.max_position_embeddings = r.size("max_position_embeddings", kMaxPositions, ai.max_pos);
  c.rms_norm_eps = r.pos_num("rms_norm_eps", ai.eps);
  // (SmolLM3Config and Gemma3TextConfig: tied; transformers 5 says so itself, 4.x by PretrainedConfig's default)
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", c.arch == Arch::SmolLM3 || c.arch == Arch::Gemma3);
  // transformers 5 writes "dtype", 4.x "torch_dtype"; "dtype" wins when both are set
  c.torch_dtype = r.str("dtype", r.str("torch_dtype", "float32"));
  c.bos_token_id = r.token_id("bos_token_id", ai.bos, false);
  c.eos_token_id = r.token_id("eos_token_id", ai.eos, true);  // an int or a list: the first; raw keeps all
  if (const json* p = r.get("pad_token_id")) {  // nn.Embedding(vocab, hidden, padding_idx=pad_token_id)
    const int64_t id = r.integer(*p, "pad_token_id");
    OOMB_CHECK(id >= -c.vocab && id < c.vocab, "config {}: field 'pad_token_id' = {} is outside the vocabulary "
               "(vocab_size {}); transformers' embedding refuses it too (set it to null for none)", source, id, c.vocab);
    c.pad_token_id = id < 0 ? c.vocab + id : id;
  } else if (!j.contains("pad_token_id") && ai.pad >= 0) {  // absent: the class's default (null: none)
    OOMB_CHECK(ai.pad < c.vocab, "config {}: no 'pad_token_id', and {}'s default {} is outside the vocabulary "
               "(vocab_size {}); transformers' embedding would refuse it (set it, or null for none)", source,
               ai.architecture, ai.pad, c.vocab);
    c.pad_token_id = ai.pad;
  }

  if (c.arch == Arch::Gemma3) {  // (Gemma3MLP reads hidden_activation, never hidden_act)
    const std::string act = r.str("hidden_activation", "gelu_pytorch_tanh");
    OOMB_CHECK(act == "gelu_pytorch_tanh", "config {}: hidden_activation '{}' is not supported (Gemma 3's is "
               "gelu_pytorch_tanh)", source, act);
    c.query_pre_attn_scalar = r.pos_num("query_pre_attn_scalar", 256);
    for (const char* k : {"final_logit_softcapping", "attn_logit_softcapping"})
      OOMB_CHECK(!r.get(k), "config {}: field '{}' = {}: softcapping (Gemma 2's) is not supported; Gemma 3 has none "
                 "(null)", source, k, shown(*r.get(k)));
    OOMB_CHECK(!r.boolean("use_bidirectional_attention", false), "config {}: field 'use_bidirectional_attention' is "
               "true (an embedding model's attention, EmbeddingGemma's); oomb trains causal language models", source);
  } else {
    std::string act = r.str("hidden_act", "silu");
    OOMB_CHECK(act == "silu", "config {}: hidden_act '{}' is not supported (only silu)", source, act);
  }
  if (c.arch == Arch::Llama || c.arch == Arch::Granite || c.arch == Arch::SmolLM3) {
    c.qkv_bias = c.o_bias = r.boolean("attention_bias", false);
    c.mlp_bias = r.boolean("mlp_bias", false);
  } else if (glm_family(c.arch)) {  // attention_bias (default true) on q/k/v alone
    c.qkv_bias = r.boolean("attention_bias", true);
  } else if (c.post_norm()) {  // OLMo 2 / 3, Gemma 3: the attention's attention_bias (q/k/v/o); the MLP has none
    c.qkv_bias = c.o_bias = r.boolean("attention_bias", false);
    c.qk_norm = true;
  } else if (c.arch == Arch::Qwen2 || c.arch == Arch::Qwen3) {
    if (c.arch == Arch::Qwen2) {
      c.qkv_bias = true;  // Qwen2 always has q/k/v biases and none on o_proj or the MLP
    } else {
      c.qkv_bias = c.o_bias = r.boolean("attention_bias", false);  // Qwen3: q/k/v/o together, no MLP bias
      c.qk_norm = true;
    }
  }
  if (c.arch == Arch::Granite) {  // GraniteConfig: 1.0 each unless given
    double* to[] = {&c.embedding_multiplier, &c.residual_multiplier, &c.attention_multiplier, &c.logits_scaling};
    for (size_t i = 0; i < std::size(kGraniteScalars); ++i) {
      const double v = r.pos_num(kGraniteScalars[i], 1.0);
      const double by = i == 3 ? 1.0 / v : v;  // (the logits: the engine multiplies by the reciprocal)
      OOMB_CHECK(std::isfinite(float(by)) && float(by) > 0, "config {}: field '{}' = {} is outside float32's range "
                 "(the engine multiplies by {} in float32)", source, kGraniteScalars[i], v, i == 3 ? "1 / it" : "it");
      *to[i] = v;
    }
  }
  parse_nope(r, c);
  parse_windows(r, j, c);
  c.rope = rope_by_layer_type(r, j, c);
  // the tables in float32, as transformers keeps them: a value past float32's range is refused here
  for (const int64_t length : {int64_t(0), rope_switch_length(c) + 1}) {
    float att = 0;
    const std::vector<float> inv = rope_inv_freq(c, &att, length);
    OOMB_CHECK(std::isfinite(att) && std::all_of(inv.begin(), inv.end(), [](float v) { return std::isfinite(v); }),
               "config {}: its RoPE ({}, rope_theta {}) gives a non-finite {} in float32", source, c.rope.type,
               c.rope.theta, std::isfinite(att) ? "inverse frequency" : "attention scaling");
  }
  c.raw = j;
  return c;
}

std::vector<int64_t> eos_token_ids(const ModelConfig& c) {
  const json* list = c.raw.is_object() && c.raw.contains("eos_token_id") ? &c.raw["eos_token_id"] : nullptr;
  std::vector<int64_t> ids;
  if (list && list->is_array() && !list->empty() && list->front() == c.eos_token_id) {  // (parse_config checked them)
    for (const json& v : *list)
      if (v.is_number_integer() && v.get<int64_t>() >= 0) ids.push_back(v.get<int64_t>());
  } else if (!list && (glm_family(c.arch)) && c.eos_token_id == arch_info(c.arch).eos) {
    ids = {151329, 151336, 151338};  // (GlmConfig's default)
  } else if (c.eos_token_id >= 0) {
    ids = {c.eos_token_id};
  }
  return ids;
}

void check_training_dropout(const ModelConfig& c, const std::string& source) {
  static const json kNone = json::object();
  const Reader r{c.raw.is_object() ? c.raw : kNone, source, ""};
  // attention_dropout: every family's attention in training; resid_pdrop: Phi3DecoderLayer's (its
  // embd_pdrop is read by no layer of transformers' Phi-3)
  for (const char* k : {"attention_dropout", c.arch == Arch::Phi3 ? "resid_pdrop" : "attention_dropout"}) {
    const double p = r.num(k, 0.0);
    OOMB_CHECK(p == 0.0, "config {}: field '{}' = {}: transformers would train with this dropout and oomb has none "
               "(LoRA's aside); set it to 0.0 to train (evaluation and generation use no dropout)", source, k, p);
  }
}

ModelConfig load_config(const std::filesystem::path& dir_or_file) {
  std::filesystem::path p = dir_or_file;
  std::error_code ec;
  if (std::filesystem::is_directory(p, ec)) p /= "config.json";
  std::ifstream f(p, std::ios::binary);
  OOMB_CHECK(f.good(), "config {}: cannot open: {}", p.string(),
             std::filesystem::exists(p, ec) ? std::strerror(errno) : "no such file");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    size_t byte = std::min<size_t>(e.byte ? e.byte - 1 : 0, text.size()), line = 1, col = 1;
    for (size_t i = 0; i < byte; ++i) text[i] == '\n' ? (++line, col = 1) : ++col;
    fail("config {}: invalid JSON at line {}, column {} (byte {}): {}", p.string(), line, col, e.byte,
         e.what());
  } catch (const json::exception& e) {  // e.g. a number out of range
    fail("config {}: invalid JSON: {}", p.string(), e.what());
  }
  return parse_config(j, p.string());
}

}  // namespace oomb
