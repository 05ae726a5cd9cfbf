#include "hf/peft.h"

#include <fmt/format.h>
#include <fstream>
#include <set>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/error.h"
#include "hf/adapter_config.h"
#include "hf/safetensors.h"

namespace oomb {

namespace fs = std::filesystem;

namespace {
constexpr const char* kConfigFile = "adapter_config.json";
constexpr const char* kWeightsFile = "adapter_model.safetensors";
constexpr const char* kRopeFile = "oomb_rope.json";
constexpr const char* kPrefix = "base_model.model.";

bool is_adapter(const std::string& name) { return name.starts_with(kPrefix) && name.find(".lora_") != std::string::npos; }

// PEFT's modules_to_save names for the trainable base tensors (LongLoRA's embeddings and norms): the
// embedding, the final norm and every norm of a layer as the parameter layout names them (each family's
// own: OLMo 2's after each branch, Gemma 3's and GLM-4's four, the q/k norms).
std::vector<std::string> modules_to_save(const ModelConfig& cfg) {
  std::vector<std::string> m{"embed_tokens", "norm"};
  const std::string layer0 = "model.layers.0.", weight = ".weight";
  for (const ParamSpec& s : param_layout(cfg))
    if (s.name.starts_with(layer0) && s.name.ends_with("norm" + weight)) {
      const std::string module = s.name.substr(0, s.name.size() - weight.size());
      m.push_back(module.substr(module.rfind('.') + 1));  // (self_attn.q_norm: q_norm)
    }
  return m;
}
}  // namespace

std::string peft_key(const std::string& name) { return is_adapter(name) ? name : kPrefix + name; }

LoraConfig load_adapter_config(const fs::path& dir) {
  const fs::path file = dir / kConfigFile;
  std::ifstream in(file);
  OOMB_CHECK(in.good(), "--lora {}: no {} (a PEFT LoRA adapter directory holds {} and {})", dir.string(), kConfigFile,
             kConfigFile, kWeightsFile);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON: {}", file.string(), e.what());
  }
  return parse_adapter_config(j, file.string());
}

std::optional<nlohmann::json> load_adapter_rope(const fs::path& dir) {
  const fs::path file = dir / kRopeFile;
  if (!fs::exists(file)) return std::nullopt;
  std::ifstream in(file);
  OOMB_CHECK(in.good(), "{}: cannot be read", file.string());
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON: {}", file.string(), e.what());
  }
}

void load_adapter(const fs::path& dir, const Params& base, Params& trainable) {
  load_adapter_tensors(dir, &base, trainable);
}

void load_adapter_tensors(const fs::path& dir, const Params* base, Params& trainable) {
  const fs::path file = dir / kWeightsFile;
  OOMB_CHECK(fs::exists(file), "--lora {}: no {}", dir.string(), kWeightsFile);
  const SafetensorsModel st = SafetensorsModel::open(file);
  std::set<std::string> wanted;
  for (const ParamSpec& s : trainable.specs()) {
    const std::string key = peft_key(s.name);
    wanted.insert(key);
    Tensor t = trainable.view(s);
    if (!is_adapter(s.name) && !st.find(key)) {  // a trainable base tensor the adapter does not carry
      OOMB_CHECK(base != nullptr, "{}: tensor '{}' is missing", file.string(), key);
      const Tensor from = base->get(s.name);
      std::copy(from.f(), from.f() + s.numel(), t.f());
      continue;
    }
    const TensorInfo* info = st.find(key);
    OOMB_CHECK(info != nullptr, "{}: tensor '{}' is missing (the adapter's targets or rank differ from --lora-targets"
               " / --lora-rank, or it was made for another model)", file.string(), key);
    OOMB_CHECK(info->shape == s.shape, "{}: tensor '{}' is {}, the model needs {}: an adapter for another model?",
               file.string(), key, fmt::format("({})", fmt::join(info->shape, ", ")),
               fmt::format("({})", fmt::join(s.shape, ", ")));
    st.read_f32(key, t.f(), s.shape);
  }
  for (const std::string& n : st.names())
    OOMB_CHECK(wanted.count(n), "{}: tensor '{}' is not part of this adapter's layout (another target, or a module "
               "this engine does not train)", file.string(), n);
}

void save_adapter(const fs::path& dir, const ModelConfig& cfg, const LoraConfig& c, const Params& trainable,
                  const std::string& base_model, const std::map<std::string, std::string>& extra) {
  AtomicDir out(dir);
  write_adapter_files(out.staging(), cfg, c, trainable, base_model);
  for (const auto& [name, text] : extra) write_file_atomic(out.staging() / name, text);
  out.commit([](const std::string& name) { return name == "oomb_best.json"; });  // (--save-best's: not this one's)
}

void write_adapter_files(const fs::path& dir, const ModelConfig& cfg, const LoraConfig& c, const Params& trainable,
                         const std::string& base_model) {
  OOMB_CHECK(trainable.flat().tier == Tier::Host, "save_adapter: host parameters");
  std::vector<SaveTensor> tensors;
  for (const ParamSpec& s : trainable.specs())
    tensors.push_back({peft_key(s.name), DType::F32, s.shape, trainable.view(s).data});
  const nlohmann::json j = adapter_config_json(c, base_model, modules_to_save(cfg), cfg.fused_qkv(), cfg.fused_gate_up());
  save_safetensors(dir / kWeightsFile, tensors, {{"format", "pt"}});
  write_file_atomic(dir / kConfigFile, j.dump(2) + "\n");
  write_file_atomic(dir / kRopeFile, rope_json(cfg).dump(2) + "\n");
}

void merge_adapter(Params& base, const Params& trainable, const LoraConfig& c) {
  OOMB_CHECK(base.flat().tier == Tier::Host && trainable.flat().tier == Tier::Host, "merge_adapter: host parameters");
  const ModelConfig& cfg = base.config();
  const float s = c.scale();
  static const char* const kWeight[kLoraTargets] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                                    "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj",
                                                    "mlp.down_proj"};
  for (int64_t l = 0; l < cfg.layers; ++l)
    for (int t = 0; t < kLoraTargets; ++t) {
      if (!c.targets[t]) continue;
      Tensor w = base.get(fmt::format("model.layers.{}.{}.weight", l, kWeight[t]));
      const auto [a, b] = lora_pair([&](const std::string& n) { return trainable.get(n); }, cfg, l, t);
      const int64_t out = w.dim(0), in = w.dim(1), r = a.dim(0);
      for (int64_t i = 0; i < out; ++i)  // W[i, j] += s sum_k B[i, k] A[k, j], k in order
        for (int64_t j = 0; j < in; ++j) {
          double acc = 0;
          for (int64_t k = 0; k < r; ++k) acc += double(b.f()[i * r + k]) * double(a.f()[k * in + j]);
          w.f()[i * in + j] += float(double(s) * acc);
        }
    }
  for (const ParamSpec& sp : trainable.specs())
    if (!is_adapter(sp.name)) {
      Tensor dst = base.get(sp.name);
      const Tensor src = trainable.view(sp);
      std::copy(src.f(), src.f() + sp.numel(), dst.f());
    }
}

}  // namespace oomb
