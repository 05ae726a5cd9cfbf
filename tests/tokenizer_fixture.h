// Small byte-level tokenizer.json files for tests.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace oomb::testing {

// The Qwen2 split pattern, as its tokenizer.json states it.
extern const char* const kQwenPattern;
// The byte-level string of raw bytes, as tokenizer.json stores vocabulary entries.
std::string bl(std::string_view raw);
// A byte-level BPE with the Qwen2 pre-tokenizer: the 256 byte tokens (id = byte), then one token
// per merge result; merges stored as pairs or as "a b" strings.
nlohmann::json byte_tokenizer_json(const std::vector<std::pair<std::string, std::string>>& merges,
                                   bool pair_format = true, bool ignore_merges = false);

}  // namespace oomb::testing
