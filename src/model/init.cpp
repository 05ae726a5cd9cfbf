#include "model/init.h"

#include "hf/checkpoint.h"
#include "hf/safetensors.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <functional>
#include <numeric>
#include <random>

namespace oomb {

namespace {

ModelConfig make(Arch arch, int64_t d, int64_t I, int64_t L, int64_t H, int64_t G, int64_t V, bool tie,
                 double theta, double eps, int64_t max_pos, int64_t head_dim = 0) {
  ModelConfig c;
  c.hidden = d, c.intermediate = I, c.layers = L, c.heads = H, c.kv_heads = G, c.vocab = V;
  set_arch(c, arch);  // (after the layers: a SmolLM3's NoPE layers, one per layer)
  c.head_dim = head_dim > 0 ? head_dim : d / H;
  c.tie_word_embeddings = tie;
  c.rope.theta = theta;
  c.rms_norm_eps = eps;
  c.max_position_embeddings = max_pos;
  return c;
}

// Llama 3.1's RoPE scaling (rope_type llama3)
ModelConfig llama31(ModelConfig c) {
  c.rope.type = "llama3";
  c.rope.factor = 8;
  c.rope.low_freq_factor = 1;
  c.rope.high_freq_factor = 4;
  c.rope.original_max_position_embeddings = 8192;
  return c;
}

// Phi-3's: the pad token (Phi3Config's 32000 unless given) and a sliding window on every layer (0: none)
ModelConfig phi3(ModelConfig c, int64_t pad, int64_t window) {
  c.pad_token_id = pad;
  c.layer_window.assign(size_t(c.layers), window);
  return c;
}

// Granite's four multipliers and its pad token
ModelConfig granite(ModelConfig c, double embedding, double residual, double attention, double logits, int64_t pad) {
  c.embedding_multiplier = embedding, c.residual_multiplier = residual;
  c.attention_multiplier = attention, c.logits_scaling = logits;
  c.pad_token_id = pad;
  return c;
}

struct Preset {
  const char* name;
  std::function<ModelConfig()> make;
};

const std::vector<Preset>& presets() {
  static const std::vector<Preset> p = {
      {"tiny", [] { return make(Arch::Llama, 64, 128, 2, 4, 2, 128, false, 10000, 1e-5, 4096); }},
      {"tiny-qwen2", [] { return make(Arch::Qwen2, 64, 128, 2, 4, 2, 128, true, 10000, 1e-6, 4096); }},
      {"qwen2.5-0.5b", [] { return make(Arch::Qwen2, 896, 4864, 24, 14, 2, 151936, true, 1e6, 1e-6, 32768); }},
      {"qwen2.5-1.5b", [] { return make(Arch::Qwen2, 1536, 8960, 28, 12, 2, 151936, true, 1e6, 1e-6, 32768); }},
      {"qwen2.5-7b", [] { return make(Arch::Qwen2, 3584, 18944, 28, 28, 4, 152064, false, 1e6, 1e-6, 32768); }},
      {"tiny-qwen3", [] { return make(Arch::Qwen3, 64, 128, 2, 4, 2, 128, true, 10000, 1e-6, 4096, 32); }},
      // Qwen3 dense: head_dim 128 whatever hidden / heads is
      {"qwen3-0.6b", [] { return make(Arch::Qwen3, 1024, 3072, 28, 16, 8, 151936, true, 1e6, 1e-6, 40960, 128); }},
      {"qwen3-1.7b", [] { return make(Arch::Qwen3, 2048, 6144, 28, 16, 8, 151936, true, 1e6, 1e-6, 40960, 128); }},
      {"qwen3-4b", [] { return make(Arch::Qwen3, 2560, 9728, 36, 32, 8, 151936, true, 1e6, 1e-6, 40960, 128); }},
      {"qwen3-8b", [] { return make(Arch::Qwen3, 4096, 12288, 36, 32, 8, 151936, false, 1e6, 1e-6, 40960, 128); }},
      {"llama-3-8b", [] { return make(Arch::Llama, 4096, 14336, 32, 32, 8, 128256, false, 500000, 1e-5, 8192); }},
      {"llama-3.1-8b", [] { return llama31(make(Arch::Llama, 4096, 14336, 32, 32, 8, 128256, false, 500000, 1e-5, 131072)); }},
      {"llama-3.1-70b", [] { return llama31(make(Arch::Llama, 8192, 28672, 80, 64, 8, 128256, false, 500000, 1e-5, 131072)); }},
      // Mistral 7B v0.3's shape (32K context, no sliding window, vocabulary 32768: its tokenizer.json is the
      // Metaspace form) and Mistral NeMo 12B's (head_dim 128 with hidden 5120; a 1,024,000-token RoPE range)
      {"mistral-7b-v0.3", [] { return make(Arch::Mistral, 4096, 14336, 32, 32, 8, 32768, false, 1e6, 1e-5, 32768); }},
      {"mistral-nemo-12b",
       [] { return make(Arch::Mistral, 5120, 14336, 40, 32, 8, 131072, false, 1e6, 1e-5, 1024000, 128); }},
      // Phi-3 (fused q/k/v and gate/up in the files): Phi-3-mini-4k-instruct's and Phi-4's shapes
      {"phi-3-mini-4k", [] { return phi3(make(Arch::Phi3, 3072, 8192, 32, 32, 32, 32064, false, 10000, 1e-5, 4096), 32000, 2047); }},
      // Phi-4-mini's shape: RoPE over 96 of each head's 128 dims (its config.json's LongRoPE tables are
      // not in the preset: the plan and init do not depend on them)
      {"phi-4-mini", [] {
         ModelConfig c =
             phi3(make(Arch::Phi3, 3072, 8192, 32, 24, 8, 200064, true, 10000, 1e-5, 131072), 199999, 262144);
         c.rope.partial_rotary_factor = 0.75;
         return c;
       }},
      {"phi-4", [] { return phi3(make(Arch::Phi3, 5120, 17920, 40, 40, 10, 100352, false, 250000, 1e-5, 16384), 100349, 0); }},
      // SmolLM3-3B's shape (64K context, 128K with YaRN): every 4th layer NoPE, token 128004 the pad
      {"smollm3-3b", [] {
         ModelConfig c = make(Arch::SmolLM3, 2048, 11008, 36, 16, 4, 128256, true, 5e6, 1e-6, 65536);
         c.pad_token_id = 128004;
         return c;  // (make's set_arch gave it SmolLM3Config's NoPE layers: every 4th)
       }},
      // OLMo 2 7B's shape (OLMo-2-1124-7B: norms after each branch, q/k norms over the whole projection),
      // token 100277 the pad
      {"olmo2-7b", [] {
         ModelConfig c = make(Arch::Olmo2, 4096, 11008, 32, 32, 32, 100352, false, 500000, 1e-6, 4096);
         c.pad_token_id = 100277;
         return c;
       }},
      // Gemma 3 1B's shape (32K context; Gemma3ForCausalLM): five sliding layers (512) of every six, their
      // RoPE of theta 10000 and the others' of 1e6; head_dim 256 whatever hidden / heads is; token 0 the pad
      {"gemma3-1b", [] {
         ModelConfig c = make(Arch::Gemma3, 1152, 6912, 26, 4, 1, 262144, true, 1e6, 1e-6, 32768, 256);
         default_windows(c, 512);
         c.pad_token_id = 0;
         return c;
       }},
      // Gemma 3 4B's language model (128K context: linear RoPE scaling x8 on the full layers, windows of 1024)
      {"gemma3-4b", [] {
         ModelConfig c = make(Arch::Gemma3, 2560, 10240, 34, 8, 4, 262208, true, 1e6, 1e-6, 131072, 256);
         default_windows(c, 1024);
         c.rope.type = "linear";
         c.rope.factor = 8;
         c.pad_token_id = 0;
         return c;
       }},
      // GLM-4 9B's shape (GlmConfig's defaults, glm-4-9b-chat-hf's; 128K context): interleaved RoPE over the
      // first 64 of each head's 128 dims, q/k/v biases, gate/up fused in the files, token 151329 the pad
      {"glm-4-9b", [] {
         ModelConfig c = make(Arch::Glm, 4096, 13696, 40, 32, 2, 151552, false, 10000, 1.5625e-7, 131072, 128);
         c.pad_token_id = 151329;
         return c;  // (make's set_arch gave it GlmConfig's partial_rotary_factor 0.5 and its q/k/v biases)
       }},
      // Glm4Config's defaults (the GLM-4-0414 architecture at the 9B shape; GLM-4-9B-0414's own config.json
      // may give another context length and eps): GLM-4 9B with a norm after each branch as well
      {"glm4-9b", [] {
         ModelConfig c = make(Arch::Glm4, 4096, 13696, 40, 32, 2, 151552, false, 10000, 1.5625e-7, 131072, 128);
         c.pad_token_id = 151329;
         return c;
       }},
      // Granite 3.2 / 3.3 8B's shape (128K context): muP's multipliers, token 0 the pad
      {"granite-3.3-8b", [] {
         return granite(make(Arch::Granite, 4096, 12800, 40, 32, 8, 49159, true, 1e7, 1e-5, 131072), 12.0, 0.22,
                        0.0078125, 16.0, 0);
       }},
  };
  return p;
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> n;
  for (const auto& p : presets()) n.push_back(p.name);
  return n;
}

ModelConfig preset_config(const std::string& name) {
  std::string all;
  for (const auto& p : presets()) {
    if (name == p.name) return p.make();
    all += (all.empty() ? "" : ", ") + std::string(p.name);
  }
  fail("--preset: unknown preset '{}' (known: {})", name, all);
}

// fill(i) for every tensor of a layout, on every core (largest first; each tensor's values come from
// its own generator, so the order changes no bit); the first exception is rethrown here
template <typename F>
static void each_tensor(const std::vector<ParamSpec>& specs, F fill) {
  std::vector<size_t> order(specs.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return specs[a].numel() > specs[b].numel(); });
  std::exception_ptr error;
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t k = 0; k < order.size(); ++k) {
    try {
      fill(order[k]);
    } catch (...) {
#pragma omp critical
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

// Tensor s's values (matrices ~ N(0, std) from the tensor's own generator, norms 1 (Gemma 3's 0: it
// scales by 1 + w), biases 0) in dtype at dst, generated in blocks on the stack: no scratch, and the
// generator's sequence is the tensor's whatever the block
static void fill_as(const ParamSpec& s, const ModelConfig& c, uint64_t seed, float std, DType dtype, void* dst) {
  const int64_t n = s.numel();
  const bool is_norm = s.name.ends_with("norm.weight"), is_bias = s.name.ends_with(".bias");
  std::mt19937_64 rng(seed ^ std::hash<std::string>{}(s.name));
  std::normal_distribution<float> nd(0.0f, std);
  constexpr int64_t kBlock = 4096;
  float block[kBlock];
  for (int64_t i = 0; i < n; i += kBlock) {
    const int64_t m = std::min(kBlock, n - i);
    for (int64_t k = 0; k < m; ++k) block[k] = is_norm ? 1.0f - c.norm_offset() : is_bias ? 0.0f : nd(rng);
    convert_from_f32(block, static_cast<char*>(dst) + size_t(i) * dtype_size(dtype), dtype, size_t(m));
  }
}

void init_params(Params& p, uint64_t seed, float std) {
  each_tensor(p.specs(), [&](size_t i) {
    const Tensor t = p.view(p.specs()[i]);
    fill_as(p.specs()[i], p.config(), seed, std, t.dtype, t.data);  // (a frozen bf16 base: the same values, rounded)
  });
}

void write_random_model(const std::filesystem::path& dir, const ModelConfig& c, uint64_t seed, DType dtype,
                        float std) {
  const auto specs = param_layout(c);
  int64_t total = 0;
  for (const auto& s : specs) total += s.numel();
  Buffer out(Tier::Host, Tag::Weights, size_t(total) * dtype_size(dtype));
  auto dst = [&](const ParamSpec& s) { return out.as<char>() + size_t(s.offset) * dtype_size(dtype); };
  each_tensor(specs, [&](size_t i) { fill_as(specs[i], c, seed, std, dtype, dst(specs[i])); });
  if (c.pad_token_id >= 0)  // transformers' _init_weights zeroes nn.Embedding's padding_idx row
    std::memset(dst(specs.front()) + size_t(c.pad_token_id * c.hidden) * dtype_size(dtype), 0,
                size_t(c.hidden) * dtype_size(dtype));
  std::vector<SaveTensor> tensors;
  for (const auto& s : specs) tensors.push_back({s.name, dtype, s.shape, dst(s)});
  save_model_tensors(dir, c, tensors, dtype);
}

}  // namespace oomb
