// A Phi-3.5 config.json with LongRoPE, shared by the config and rope tests.
#pragma once
#include <nlohmann/json.hpp>

// Phi-3.5-mini-instruct's config.json as published, but for the 48 + 48 LongRoPE factors (stand-ins).
inline nlohmann::json phi35() {
  nlohmann::json j = nlohmann::json::parse(R"({"architectures": ["Phi3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 1, "embd_pdrop": 0.0, "eos_token_id": 32000, "hidden_act": "silu", "hidden_size": 3072,
    "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 131072, "model_type": "phi3",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
    "original_max_position_embeddings": 4096, "pad_token_id": 32000, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0, "sliding_window": 262144, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.3", "use_cache": true, "vocab_size": 32064})");
  nlohmann::json shorts = nlohmann::json::array(), longs = nlohmann::json::array();
  for (int i = 0; i < 48; ++i) shorts.push_back(1.0 + 0.01 * i), longs.push_back(1.0 + 1.5 * i);
  j["rope_scaling"] = {{"long_factor", longs}, {"short_factor", shorts}, {"type", "longrope"}};
  return j;
}
