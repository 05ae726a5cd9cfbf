// Added and special tokens of tokenizer.json ("added_tokens"): found in the raw text before
// normalization and splitting, leftmost first and the longest at a position (as Hugging Face's
// tokenizers and transformers.js do), honouring lstrip / rstrip / single_word.
#pragma once
#include <cstdint>
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
  static AddedTokens from_json(const nlohmann::json& j, std::string_view where);
  const std::vector<AddedToken>& all() const { return tokens_; }
  const AddedToken* by_id(int32_t id) const;
  const AddedToken* by_content(std::string_view content) const;
  // Matches in s, in order. with_special = false: special tokens are left as text.
  void find(std::string_view s, bool with_special, std::vector<AddedMatch>& out) const;

 private:
  std::vector<AddedToken> tokens_;
  // byte trie: node -> (byte -> child); terminal[node] = index into tokens_ or -1
  std::unordered_map<uint64_t, int32_t> edges_;
  std::vector<int32_t> terminal_;
  bool first_byte_[256] = {};
  std::unordered_map<int32_t, size_t> by_id_;
};

// Unicode White_Space (the 25 code points of Oniguruma's \s); `len` receives its UTF-8 length.
bool white_space_at(std::string_view s, size_t i, int* len);
bool white_space_before(std::string_view s, size_t i, int* len);

}  // namespace oomb
