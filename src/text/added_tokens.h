// Added and special tokens of tokenizer.json ("added_tokens"), found as Hugging Face's tokenizers
// find them: tokens with normalized = false in the raw text, those with normalized = true in each
// normalized section; leftmost first and the longest at a position; a match consumes its span even
// when it is dropped (a single_word token inside a word, or a special token when special tokens
// are to stay text); lstrip / rstrip take the White_Space beside a match with it.
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace oomb {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
};

struct AddedMatch {
  size_t begin, end;  // the span of text the token consumes (with stripped whitespace)
  const AddedToken* token;
};

class AddedTokens {
 public:
  // normalize: the tokenizer's normalizer; a token with normalized = true is found by its content so
  // normalized (Hugging Face's refresh_added_tokens: under Llama 2's "▁" Prepend, "<x>" is found as "▁<x>")
  static AddedTokens from_json(const nlohmann::json& j, std::string_view where,
                               const std::function<std::string(std::string_view)>& normalize = {});
  const std::vector<AddedToken>& all() const { return tokens_; }
  const AddedToken* by_id(int32_t id) const;
  const AddedToken* by_content(std::string_view content) const;
  bool any_normalized() const { return tries_[1].terminal.size() > 1; }
  // Matches in s, in order, of the tokens whose `normalized` flag equals `normalized`.
  // split_special: special tokens are consumed but not matched (they stay text).
  void find(std::string_view s, bool normalized, bool split_special, std::vector<AddedMatch>& out) const;

 private:
  struct Trie {  // bytes; node -> (byte -> child); terminal[node] = index into tokens_ or -1
    std::unordered_map<uint64_t, int32_t> edges;
    std::vector<int32_t> terminal{-1};
    bool first_byte[256] = {};
  };
  std::vector<AddedToken> tokens_;
  Trie tries_[2];  // normalized = false, true
  std::unordered_map<int32_t, size_t> by_id_;
};

}  // namespace oomb
