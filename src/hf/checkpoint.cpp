#include "hf/checkpoint.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <set>

#include "core/atomic_file.h"
#include "hf/fused_projections.h"
#include "hf/safetensors.h"

namespace oomb {

namespace fs = std::filesystem;

DType load_weights(const fs::path& dir, const ModelConfig& c, Params& p) {
  SafetensorsModel st = SafetensorsModel::open(dir);
  std::map<DType, int64_t> dtypes;
  std::set<std::string> used;
  // a frozen bf16 base's tensor in fp32, before it is rounded into place: one buffer of the widest
  // (as memory_plan counts it)
  int64_t widest = 0;
  for (const ParamSpec& s : p.specs())
    if (p.view(s).dtype != DType::F32) widest = std::max(widest, s.numel());
  Buffer wide(Tier::Host, Tag::IO, size_t(widest) * 4);
  Buffer fused;  // Phi-3: the last fused tensor read (its parts come one after another)
  std::string fused_name;
  for (const ParamSpec& s : p.specs()) {
    const std::optional<FusedPart> part = fused_part(c, s.name);
    const std::string& name = part ? part->fused : s.name;
    const TensorInfo* t = st.find(name);
    OOMB_CHECK(t != nullptr, "{}: tensor '{}' is missing from the checkpoint (config: {} layers, {}{})", dir.string(),
               name, c.layers, c.tie_word_embeddings ? "tied embeddings" : "untied embeddings",
               c.fused_qkv() ? ", fused q/k/v and gate/up as Phi-3 saves them" : c.fused_gate_up() ? ", fused gate/up as GLM saves them" : "");
    const Tensor dst = p.view(s);
    const int64_t n = s.numel();
    float* x = dst.dtype == DType::F32 ? dst.f() : wide.as<float>();
    if (part) {
      const int64_t cols = s.shape.at(1);
      if (fused_name != name) {
        fused_name.clear();
        fused = Buffer(Tier::Host, Tag::IO, size_t(part->fused_rows * cols) * 4);
        st.read_f32(name, fused.as<float>(), {part->fused_rows, cols});
        fused_name = name;
      }
      std::memcpy(x, fused.as<float>() + part->row0 * cols, size_t(n) * 4);
    } else {
      st.read_f32(s.name, x, s.shape);
    }
    for (int64_t i = 0; i < n; ++i)  // named here, not blamed on the learning rate at the first step
      if (!std::isfinite(x[i])) [[unlikely]]
        fail("{}: tensor '{}' holds a non-finite value ({}) at flat index {} of {}; the checkpoint is damaged or "
             "was saved after training diverged", dir.string(), name, x[i] , (part ? part->row0 * s.shape[1] : 0) + i,
             part ? part->fused_rows * s.shape[1] : n);
    if (dst.dtype != DType::F32) {  // (a frozen bf16 base: a finite value beyond bf16's range rounds to inf)
      convert_from_f32(x, dst.data, dst.dtype, size_t(n));
      const uint16_t* y = static_cast<const uint16_t*>(dst.data);
      for (int64_t i = 0; i < n; ++i)
        if (!std::isfinite(bf16_to_f32(y[i]))) [[unlikely]]
          fail("{}: tensor '{}' holds {} at flat index {} of {}, beyond bf16's range (LoRA under --precision bf16 "
               "holds the frozen base in bf16); use --precision fp32", dir.string(), name, x[i],
               (part ? part->row0 * s.shape[1] : 0) + i, part ? part->fused_rows * s.shape[1] : n);
    }
    dtypes[t->dtype] += s.numel();
    used.insert(name);
  }
  for (const std::string& name : st.names()) {
    if (used.count(name)) continue;
    if (name.ends_with("rotary_emb.inv_freq")) continue;                    // old checkpoints keep this buffer
    if (name == "lm_head.weight" && c.tie_word_embeddings) {  // tied: accept only a saved copy of embed
      const Tensor embed = p.get("model.embed_tokens.weight");
      Buffer head(Tier::Host, Tag::IO, embed.bytes());
      st.read_f32(name, head.as<float>(), {c.vocab, c.hidden});
      OOMB_CHECK(std::memcmp(head.data(), embed.data, embed.bytes()) == 0,
                 "{}: tensor 'lm_head.weight' differs from 'model.embed_tokens.weight', but config.json says "
                 "tie_word_embeddings: true (saving would drop it); set it to false to train both",
                 dir.string());
      continue;
    }
    fail("{}: tensor '{}' has no place in this model (check the config's biases, layers and tie_word_embeddings)",
         dir.string(), name);
  }
  DType best = DType::F32;
  int64_t most = -1;
  for (auto [dt, n] : dtypes)
    if (n > most) best = dt, most = n;
  return best;
}

void save_model(const fs::path& dir, const ModelConfig& c, const Params& p, DType dtype, const fs::path& copy_from,
                const ExtraFiles& extra) {
  const size_t es = dtype_size(dtype);
  int64_t total = 0, widest = 0;
  for (const ParamSpec& s : p.specs()) total += s.numel(), widest = std::max(widest, s.numel());
  Buffer out(Tier::Host, Tag::IO, size_t(total) * es);
  Buffer wide(Tier::Host, Tag::IO, p.mixed() ? size_t(widest) * 4 : 0);  // a frozen bf16 base's tensor in fp32
  std::vector<SaveTensor> tensors;
  int64_t at = 0;
  for (const ParamSpec& s : p.specs()) {
    char* dst = out.as<char>() + size_t(at) * es;
    const Tensor t = p.view(s);
    const float* x = t.f();
    if (t.dtype != DType::F32) convert_to_f32(t.data, t.dtype, wide.as<float>(), size_t(s.numel())), x = wide.as<float>();
    convert_from_f32(x, dst, dtype, size_t(s.numel()));
    tensors.push_back({s.name, dtype, s.shape, dst});
    at += s.numel();
  }
  save_model_tensors(dir, c, tensors, dtype, copy_from, extra);
}

// The files a saved model directory is made of (what a new save replaces rather than carries over):
// config.json and the names save_safetensors_dir writes, and --save-best's record (a save without it is
// not that model any more); other files, a user's
// model_backup.safetensors included, are kept.
static bool model_file(const std::string& name) {
  static const std::regex ours(
      R"(config\.json|model\.safetensors|model\.safetensors\.index\.json|model-[0-9]{5}-of-[0-9]{5}\.safetensors|oomb_best\.json)");
  return std::regex_match(name, ours) || name.find(".tmp.") != std::string::npos;
}

static void save_model_files(const fs::path& dir, const ModelConfig& c, std::span<const SaveTensor> tensors,
                             DType dtype, const fs::path& copy_from, const ExtraFiles& extra);

const std::vector<std::string>& model_side_files() {
  static const std::vector<std::string> names = {
      "tokenizer.json",     "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
      "merges.txt",         "tokenizer.model",       "added_tokens.json",       "generation_config.json",
      "chat_template.jinja", "chat_template.json",   "additional_chat_templates"};
  return names;
}

ExtraFiles model_side_file_contents(const fs::path& dir) {
  ExtraFiles files;
  std::error_code ec;
  for (const std::string& name : model_side_files())
    if (fs::is_regular_file(dir / name, ec)) {
      std::ifstream in(dir / name, std::ios::binary);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      OOMB_CHECK(!in.bad(), "{}: cannot read", (dir / name).string());
      files[name] = std::move(text);
    }
  return files;
}

void save_model_tensors(const fs::path& dir, const ModelConfig& c, std::span<const SaveTensor> tensors, DType dtype,
                        const fs::path& copy_from, const ExtraFiles& extra) {
  try {
    save_model_files(dir, c, tensors, dtype, copy_from, extra);
  } catch (const Error& e) {  // (a write's error names the staging file: say which save it was)
    fail("{}: cannot save the model: {}", dir.string(), e.what());
  }
}

static void save_model_files(const fs::path& dir, const ModelConfig& c, std::span<const SaveTensor> tensors,
                             DType dtype, const fs::path& copy_from, const ExtraFiles& extra) {
  std::vector<Buffer> joined;  // Phi-3: the checkpoint's fused tensors
  const std::vector<SaveTensor> fused = fuse_for_save(c, tensors, joined);
  tensors = fused;
  // the whole directory is written beside DIR and swapped in: never new weights beside an old config
  AtomicDir out(dir);
  save_safetensors_dir(out.staging(), tensors);
  ModelConfig saved = c;
  saved.torch_dtype = dtype == DType::BF16 ? "bfloat16" : dtype == DType::F16 ? "float16" : "float32";
  write_file_atomic(out.staging() / "config.json", config_to_json(saved).dump(2) + "\n");
  std::error_code ec;
  if (!copy_from.empty()) {
    // the tokenizer's and the chat's files, as transformers saves them beside the weights
    for (const std::string& name : model_side_files()) {
      if (!fs::exists(copy_from / name, ec)) continue;
      fs::copy(copy_from / name, out.staging() / name,
               fs::copy_options::overwrite_existing | fs::copy_options::recursive, ec);
      OOMB_CHECK(!ec, "{}: cannot copy {}: {}", dir.string(), name, ec.message());
    }
  }
  for (const auto& [name, text] : extra) write_file_atomic(out.staging() / name, text);
  test_write_delay();
  out.commit(model_file);
}

}  // namespace oomb
