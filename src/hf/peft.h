// PEFT's LoRA adapter directory, as PeftModel.save_pretrained writes it and from_pretrained reads
// it: adapter_config.json (peft_type LORA, r, lora_alpha, target_modules, use_rslora, ...) and
// adapter_model.safetensors (fp32 adapters by PEFT's names, model/lora.h; trainable base tensors,
// PEFT's modules_to_save, as base_model.model.<Hugging Face name>).
#pragma once
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "hf/config.h"
#include "model/lora.h"
#include "model/params.h"

namespace oomb {

// Reads DIR/adapter_config.json: a LoRA adapter this engine can train (no bias, no
// per-module ranks), naming the file and the field otherwise.
LoraConfig load_adapter_config(const std::filesystem::path& dir);
// Reads DIR/adapter_model.safetensors into `trainable` (a Params of lora_layout(cfg, c)): every
// tensor of the layout by name and shape, and none besides; an adapter made for another model
// shows as a tensor of another shape, named with both shapes.
void load_adapter(const std::filesystem::path& dir, const Params& base, Params& trainable);
// The same with the trainable base tensors the adapter does not carry an error (base null).
void load_adapter_tensors(const std::filesystem::path& dir, const Params* base, Params& trainable);
// The RoPE the adapter was trained under (rope_json of its run's config), in DIR/oomb_rope.json
// beside PEFT's files; none where an adapter has no such file (PEFT's own, or older oomb's).
std::optional<nlohmann::json> load_adapter_rope(const std::filesystem::path& dir);
// The adapter's files (adapter_config.json, adapter_model.safetensors, oomb_rope.json) into an
// existing DIR.
void write_adapter_files(const std::filesystem::path& dir, const ModelConfig& cfg, const LoraConfig& c,
                         const Params& trainable, const std::string& base_model);
// Writes DIR as one unit (core/atomic_file.h AtomicDir); base_model goes in base_model_name_or_path.
// extra: more files (name -> contents) in the same unit.
void save_adapter(const std::filesystem::path& dir, const ModelConfig& cfg, const LoraConfig& c,
                  const Params& trainable, const std::string& base_model,
                  const std::map<std::string, std::string>& extra = {});
// The adapter file's name of a trainable tensor (PEFT's), and back.
std::string peft_key(const std::string& trainable_name);

// The merged model: W + s B A for every adapted linear, trainable base tensors in place.
void merge_adapter(Params& base, const Params& trainable, const LoraConfig& c);

}  // namespace oomb
