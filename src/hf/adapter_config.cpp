#include "hf/adapter_config.h"

#include <cmath>

#include "core/error.h"

namespace oomb {

namespace {
constexpr int64_t kMaxRank = int64_t(1) << 20;  // beyond any model's width: keeps the layout's sizes in range
}

LoraConfig parse_adapter_config(const nlohmann::json& j, const std::string& file) {
  using nlohmann::json;
  OOMB_CHECK(j.is_object(), "{}: not a JSON object", file);
  auto field = [&](const char* k) -> const json& {
    OOMB_CHECK(j.contains(k), "{}: field '{}' is missing", file, k);
    return j[k];
  };
  // an optional field: null when absent or null
  auto optional = [&](const char* k) -> json {
    const auto it = j.find(k);
    return it == j.end() ? json(nullptr) : *it;
  };
  auto flag = [&](const char* k) {  // an optional true/false, false when absent
    const json v = optional(k);
    OOMB_CHECK(v.is_null() || v.is_boolean(), "{}: {} must be true or false, got {}", file, k, v.dump());
    return v.is_boolean() && v.get<bool>();
  };
  auto none_or_empty = [&](const char* k, const char* what) {  // PEFT's options this engine does not have
    const json v = optional(k);
    OOMB_CHECK(v.is_null() || ((v.is_object() || v.is_array()) && v.empty()), "{}: {} ({}) is not supported, got {}",
               file, k, what, v.dump());
  };

  const json& type = field("peft_type");
  OOMB_CHECK(type.is_string() && type.get<std::string>() == "LORA", "{}: peft_type is {}, not \"LORA\"", file,
             type.dump());
  LoraConfig c;
  const json& r = field("r");
  OOMB_CHECK(r.is_number_integer() && (r.is_number_unsigned() || r.get<int64_t>() > 0) &&
                 r.get<uint64_t>() <= uint64_t(kMaxRank),
             "{}: r must be a positive integer of at most {}, got {}", file, kMaxRank, r.dump());
  c.rank = r.get<int64_t>();
  const json& alpha = field("lora_alpha");
  OOMB_CHECK(alpha.is_number() && alpha.get<double>() > 0 && std::isfinite(alpha.get<double>()),
             "{}: lora_alpha must be a positive number, got {}", file, alpha.dump());
  c.alpha = alpha.get<double>();
  c.rslora = flag("use_rslora");

  const json& tm = field("target_modules");
  std::string list;
  if (tm.is_string()) {
    list = tm.get<std::string>();
  } else {
    OOMB_CHECK(tm.is_array(), "{}: target_modules must be a list or a string, got {}", file, tm.dump());
    for (const json& t : tm) {
      OOMB_CHECK(t.is_string(), "{}: target_modules holds {}, not a name", file, t.dump());
      list += (list.empty() ? "" : ",") + t.get<std::string>();
    }
  }
  parse_lora_targets(list, c, file + ": target_modules");
  OOMB_CHECK(!c.target_names().empty(), "{}: target_modules names no module", file);

  const json dropout = optional("lora_dropout");
  OOMB_CHECK(dropout.is_null() || dropout.is_number(), "{}: lora_dropout must be a number, got {}", file,
             dropout.dump());
  if (dropout.is_number()) {
    c.dropout = dropout.get<double>();
    check_lora_dropout(c.dropout, file + ": lora_dropout");
  }
  const json bias = optional("bias");
  OOMB_CHECK(bias.is_null() || (bias.is_string() && bias.get<std::string>() == "none"),
             "{}: bias {} is not supported (\"none\" only)", file, bias.dump());
  none_or_empty("rank_pattern", "per-module ranks");
  none_or_empty("alpha_pattern", "per-module alphas");
  none_or_empty("layers_to_transform", "adapters on some layers only");
  none_or_empty("layer_replication", "repeated layers");
  none_or_empty("exclude_modules", "modules left out by name");
  none_or_empty("trainable_token_indices", "trainable rows of the embedding");
  none_or_empty("target_parameters", "adapters on parameters");
  OOMB_CHECK(!flag("fan_in_fan_out"), "{}: fan_in_fan_out is not supported", file);
  OOMB_CHECK(!flag("use_dora"), "{}: use_dora (DoRA) is not supported", file);
  OOMB_CHECK(!flag("lora_bias"), "{}: lora_bias is not supported", file);

  const json save = optional("modules_to_save");
  OOMB_CHECK(save.is_null() || save.is_array(), "{}: modules_to_save must be a list, got {}", file, save.dump());
  c.train_embeddings_norms = save.is_array() && !save.empty();
  return c;
}

nlohmann::json adapter_config_json(const LoraConfig& c, const std::string& base_model,
                                   const std::vector<std::string>& modules_to_save, bool fused_qkv,
                                   bool fused_gate_up) {
  using nlohmann::json;
  return {{"peft_type", "LORA"},
          {"task_type", "CAUSAL_LM"},
          {"base_model_name_or_path", base_model},
          {"r", c.rank},
          {"lora_alpha", c.alpha},
          {"lora_dropout", c.dropout},
          {"use_rslora", c.rslora},
          {"target_modules", c.target_names(fused_qkv, fused_gate_up)},
          {"bias", "none"},
          {"fan_in_fan_out", false},
          {"inference_mode", true},
          {"init_lora_weights", true},
          {"modules_to_save", c.train_embeddings_norms ? json(modules_to_save) : json(nullptr)},
          {"rank_pattern", json::object()},
          {"alpha_pattern", json::object()},
          {"use_dora", false},
          {"revision", nullptr}};
}

}  // namespace oomb
