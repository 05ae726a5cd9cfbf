#include "tokenizer_fixture.h"

#include "core/error.h"
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

nlohmann::json sentencepiece_tokenizer_json() {
  using nlohmann::json;
  return {{"normalizer", {{"type", "Sequence"},
                          {"normalizers", json::array({{{"type", "Prepend"}, {"prepend", "\u2581"}},
                                                       {{"type", "Replace"}, {"pattern", {{"String", " "}}},
                                                        {"content", "\u2581"}}})}}},
          {"pre_tokenizer", nullptr},
          {"model", {{"type", "BPE"}, {"byte_fallback", true}, {"fuse_unk", true}, {"unk_token", "<unk>"},
                     {"vocab", {{"<unk>", 0}, {"<s>", 1}, {"\u2581", 2}, {"a", 3}, {"b", 4}, {"\u2581a", 5},
                                {"ab", 6}, {"<0xC3>", 7}, {"<0xA9>", 8}, {"\u2581ab", 9}}},
                     {"merges", json::array({json::array({"\u2581", "a"}), json::array({"a", "b"}),
                                             json::array({"\u2581a", "b"})})}}},
          {"added_tokens", json::array({{{"id", 1}, {"content", "<s>"}, {"special", true}}})},
          {"decoder", {{"type", "Sequence"},
                       {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}},
                                                  {"content", " "}},
                                                 {{"type", "ByteFallback"}}, {{"type", "Fuse"}},
                                                 {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}}};
}


nlohmann::json metaspace_form(nlohmann::json j, const std::string& scheme, bool split) {
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", scheme}, {"split", split}};
  if (scheme != "never") j["pre_tokenizer"]["add_prefix_space"] = true;
  return j;
}

Tokenizer parse_test_tokenizer(const nlohmann::json& j) { return Tokenizer::parse(j.dump(), "test/tokenizer.json"); }

std::string tokenizer_error(const nlohmann::json& j) {
  try {
    parse_test_tokenizer(j);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::vector<int32_t> encode_cut_at_newlines(const Tokenizer& t, std::string_view s, size_t* cuts) {
  auto continuing = [](size_t at) {  // (every part after the first continues the text)
    EncodeOptions o;
    o.continues = at > 0;
    return o;
  };
  std::vector<int32_t> parts;
  EncodeState st;
  size_t at = 0, n = 0;
  for (size_t i = 1; i < s.size(); ++i)
    if (is_cut_point(s, i)) t.encode(s.substr(at, i - at), parts, st, continuing(at)), at = i, ++n;
  t.encode(s.substr(at), parts, st, continuing(at));
  if (cuts) *cuts = n;
  return parts;
}

}  // namespace oomb::testing
