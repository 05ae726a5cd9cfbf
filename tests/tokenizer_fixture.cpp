#include "tokenizer_fixture.h"

#include "text/byte_level.h"
#include "text/utf8.h"

namespace oomb::testing {

using nlohmann::json;

const char* const kQwenPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::string bl(std::string_view raw) {
  std::string s;
  for (unsigned char b : raw) utf8_append(s, byte_to_char(b));
  return s;
}

json byte_tokenizer_json(const std::vector<std::pair<std::string, std::string>>& merges, bool pair_format,
                         bool ignore_merges) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[bl(std::string(1, char(b)))] = b;
  json m = json::array();
  for (const auto& [a, b] : merges) {
    if (!vocab.contains(bl(a + b))) vocab[bl(a + b)] = int(vocab.size());
    m.push_back(pair_format ? json::array({bl(a), bl(b)}) : json(bl(a) + " " + bl(b)));
  }
  return {{"version", "1.0"},
          {"added_tokens", json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer",
           {{"type", "Sequence"},
            {"pretokenizers",
             json::array({{{"type", "Split"}, {"pattern", {{"Regex", kQwenPattern}}}, {"behavior", "Isolated"},
                           {"invert", false}},
                          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}}},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model",
           {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"byte_fallback", false},
            {"ignore_merges", ignore_merges}, {"vocab", vocab}, {"merges", m}}}};
}

}  // namespace oomb::testing
