// Small byte-level tokenizer.json files for tests.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/tokenizer.h"

namespace oomb::testing {

// The Qwen2 split pattern, as its tokenizer.json states it.
extern const char* const kQwenPattern;
// The byte-level string of raw bytes, as tokenizer.json stores vocabulary entries.
std::string bl(std::string_view raw);
// A byte-level BPE with the Qwen2 pre-tokenizer: the 256 byte tokens (id = byte), then one token
// per merge result; merges stored as pairs or as "a b" strings.
nlohmann::json byte_tokenizer_json(const std::vector<std::pair<std::string, std::string>>& merges,
                                   bool pair_format = true, bool ignore_merges = false);
// A SentencePiece-style BPE (Llama 2's form): "▁" before the text and for every space, each character its
// token or its bytes' <0xXX> tokens (only é's: C3, A9) or <unk> (0, fused); vocabulary <unk> 0, <s> 1 (added,
// special), ▁ 2, a 3, b 4, ▁a 5, ab 6, <0xC3> 7, <0xA9> 8, ▁ab 9; merges ▁+a, a+b, ▁a+b; decoded with "▁"
// as spaces, byte runs as UTF-8, one leading space stripped.
nlohmann::json sentencepiece_tokenizer_json();
// j (a SentencePiece-style file in Llama 2's form) in the form transformers 5 writes for Llama-style
// tokenizers and Mistral v0.3 ships: no normalizer, the Metaspace pre-tokenizer ("▁", prepend_scheme
// `scheme`, `split`; add_prefix_space true beside a scheme that prepends, as tokenizers 0.15-0.18 wrote it).
nlohmann::json metaspace_form(nlohmann::json j, const std::string& scheme, bool split = false);
// A tokenizer from j, and the message of the error parsing j gives ("(no error)" if none); its file
// is named test/tokenizer.json.
Tokenizer parse_test_tokenizer(const nlohmann::json& j);
std::string tokenizer_error(const nlohmann::json& j);
// The ids of s encoded in parts, cut at every is_cut_point (text/utf8.h), each after the first as text
// that continues (EncodeOptions::continues); *cuts: how many cuts.
std::vector<int32_t> encode_cut_at_newlines(const Tokenizer& t, std::string_view s, size_t* cuts = nullptr);

}  // namespace oomb::testing
