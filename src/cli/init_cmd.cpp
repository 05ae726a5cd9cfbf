// oomb init: writes a random-init Hugging Face model directory from a preset or explicit dimensions.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fmt/format.h>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "model/init.h"
#include "model/params.h"

namespace oomb::cli {

namespace {
struct InitArgs {
  std::string out, preset = "tiny", arch, dtype = "f32";
  uint64_t seed = 0;
  int64_t hidden = 0, intermediate = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, vocab = 0;
  double rope_theta = 0;
  std::string tie;  // "", "true", "false"
  bool force = false;
};
}  // namespace

Command add_init(CLI::App& app) {
  auto a = std::make_shared<InitArgs>();
  CLI::App* c = app.add_subcommand("init", "Write a random-init model directory (config.json + model.safetensors)");
  c->add_option("--out", a->out, "Directory to write")->required();
  std::string presets;
  for (const auto& p : preset_names()) presets += (presets.empty() ? "" : ", ") + p;
  c->add_option("--preset", a->preset, "Model shape: " + presets)->capture_default_str();
  c->add_option("--arch", a->arch, "Override the architecture: llama, qwen2, qwen3, mistral, phi3, granite, smollm3, olmo2, olmo3, gemma3_text, glm, glm4 (a "
                 "preset of another family made Granite takes GraniteConfig's multipliers, 1.0 each: attention's "
                 "scale 1, not 1/sqrt(head_dim); made SmolLM3, SmolLM3Config's NoPE layers: every 4th; made OLMo 3, "
                 "Olmo3Config's windows: 4096 on three layers of four; made Gemma 3, Gemma3TextConfig's: 4096 on five "
                 "layers of six, query_pre_attn_scalar 256; made GLM or GLM-4, GlmConfig's partial_rotary_factor 0.5 "
                 "and q/k/v biases)");
  c->add_option("--hidden", a->hidden, "hidden_size")->check(count());
  c->add_option("--intermediate", a->intermediate, "intermediate_size")->check(count());
  c->add_option("--layers", a->layers, "num_hidden_layers")->check(count());
  c->add_option("--heads", a->heads, "num_attention_heads")->check(count());
  c->add_option("--kv-heads", a->kv_heads, "num_key_value_heads")->check(count());
  c->add_option("--head-dim", a->head_dim, "head_dim (default: the preset's, or hidden / heads where --hidden or "
                 "--heads is given)")->check(count());
  c->add_option("--vocab", a->vocab, "vocab_size")->check(count());
  c->add_option("--rope-theta", a->rope_theta, "rope_theta")->check(positive());
  c->add_option("--tie-embeddings", a->tie, "tie_word_embeddings: true or false")->check(CLI::IsMember({"true", "false"}));
  c->add_option("--seed", a->seed, "Random seed")->check(count(true))->capture_default_str();
  c->add_option("--dtype", a->dtype, "Stored dtype: f32, bf16, f16")->check(CLI::Validator([](std::string& v) -> std::string {  // (dtype_parse's names)
        try {
          dtype_parse(v);
          return "";
        } catch (const Error&) {
          return "'" + v + "' is not one of f32, bf16, f16 (or float32, fp32, bfloat16, float16, fp16)";
        }
      }, "DTYPE"))
      ->capture_default_str();
  c->add_flag("--force", a->force, "Overwrite an existing model in --out");
  return {c, [a, c] {
    ModelConfig cfg = preset_config(a->preset);
    if (!a->arch.empty()) set_arch(cfg, arch_from_model_type(a->arch));
    auto set = [c](const char* flag, int64_t v, int64_t& field) {
      if (c->count(flag) > 0) field = v;
    };
    const int64_t preset_hidden = cfg.hidden, preset_intermediate = cfg.intermediate;
    set("--hidden", a->hidden, cfg.hidden);
    set("--intermediate", a->intermediate, cfg.intermediate);
    std::string scaled;
    if (c->count("--hidden") > 0 && c->count("--intermediate") == 0 && cfg.hidden != preset_hidden) {
      // keep the preset's MLP ratio, rounded to a multiple of 8 (at least 8)
      const double want = double(preset_intermediate) * double(cfg.hidden) / double(preset_hidden);
      cfg.intermediate = std::max<int64_t>(8, int64_t(std::llround(want / 8.0)) * 8);
      scaled = fmt::format("; --intermediate not given: {} (the preset's {} scaled by --hidden {} / {})",
                           cfg.intermediate, preset_intermediate, cfg.hidden, preset_hidden);
    }
    set("--layers", a->layers, cfg.layers);
    if (cfg.arch == Arch::SmolLM3 && int64_t(cfg.layer_rope.size()) != cfg.layers) smollm3_default_nope(cfg);
    if (cfg.split_rope() && int64_t(cfg.layer_window.size()) != cfg.layers) {  // (the preset's window, on these layers)
      const auto w = std::max_element(cfg.layer_window.begin(), cfg.layer_window.end());
      default_windows(cfg, w != cfg.layer_window.end() && *w > 0 ? *w : 4096);
    }
    set("--heads", a->heads, cfg.heads);
    set("--kv-heads", a->kv_heads, cfg.kv_heads);
    set("--vocab", a->vocab, cfg.vocab);
    if (cfg.pad_token_id >= cfg.vocab) cfg.pad_token_id = -1;  // (a preset's pad token past a smaller --vocab: none)
    if (c->count("--head-dim") > 0) {
      cfg.head_dim = a->head_dim;
    } else if (c->count("--hidden") > 0 || c->count("--heads") > 0) {
      OOMB_CHECK(cfg.heads > 0 && cfg.hidden % cfg.heads == 0,
                 "--hidden {} is not a multiple of --heads {}; give --head-dim to choose the head size",
                 cfg.hidden, cfg.heads);
      cfg.head_dim = cfg.hidden / cfg.heads;
    }
    if (a->rope_theta != 0) cfg.rope.theta = a->rope_theta;
    if (!a->tie.empty()) cfg.tie_word_embeddings = a->tie == "true";
    cfg.raw = nlohmann::json::object();
    // validate through the same parser a loaded config.json goes through
    cfg = parse_config(config_to_json(cfg), "--preset " + a->preset + " with the given dimensions");
    const std::filesystem::path out(a->out);
    OOMB_CHECK(a->force || !std::filesystem::exists(out / "config.json"),
               "--out {}: already holds a model (config.json); pass --force to overwrite it", a->out);
    const DType dt = dtype_parse(a->dtype);
    write_random_model(out, cfg, a->seed, dt);
    std::cout << fmt::format("wrote {} ({} {}, {} parameters, {}){}", a->out, cfg.architecture, a->preset,
                             param_count(cfg), dtype_name(dt), scaled)
              << std::endl;
    return 0;
  }};
}

}  // namespace oomb::cli
