#include "text/added_tokens.h"

#include <utf8proc.h>

#include "core/error.h"
#include "text/utf8.h"

namespace oomb {

namespace {

// White_Space at i (or ending at i), with its UTF-8 length.
bool white_space_at(std::string_view s, size_t i, int* len) {
  if (i >= s.size()) return false;
  size_t j = i;
  const uint32_t c = utf8_next(s, j);
  *len = int(j - i);
  return is_white_space(c);
}

bool white_space_before(std::string_view s, size_t i, int* len) {
  if (i == 0) return false;
  size_t b = i - 1;
  while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
  return white_space_at(s, b, len) && b + size_t(*len) == i;
}

}  // namespace

// A word character for single_word tokens: Unicode's \w as Hugging Face's regex crate has it
// (letters, letter numbers, marks, decimal digits, connector punctuation, the join controls).
static bool word_char(uint32_t c) {
  if (c == 0x200C || c == 0x200D) return true;
  switch (utf8proc_category(utf8proc_int32_t(c))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

AddedTokens AddedTokens::from_json(const nlohmann::json& j, std::string_view where,
                                   const std::function<std::string(std::string_view)>& normalize) {
  AddedTokens a;
  if (j.is_null()) return a;
  OOMB_CHECK(j.is_array(), "{}: \"added_tokens\" must be an array", where);
  for (size_t i = 0; i < j.size(); ++i) {
    const auto& e = j[i];
    auto field = [&](const char* k) -> const nlohmann::json& {
      OOMB_CHECK(e.is_object() && e.contains(k), "{}: added_tokens[{}] lacks \"{}\"", where, i, k);
      return e[k];
    };
    AddedToken t;
    const auto& id = field("id");
    OOMB_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < INT32_MAX,
               "{}: added_tokens[{}].id = {} is not a token id", where, i, id.dump());
    t.id = int32_t(id.get<int64_t>());
    const auto& content = field("content");
    OOMB_CHECK(content.is_string() && !content.get<std::string>().empty(),
               "{}: added_tokens[{}].content must be a non-empty string", where, i);
    t.content = content.get<std::string>();
    for (auto [k, dst] : {std::pair<const char*, bool*>{"single_word", &t.single_word}, {"lstrip", &t.lstrip},
                          {"rstrip", &t.rstrip}, {"normalized", &t.normalized}, {"special", &t.special}}) {
      if (!e.contains(k)) continue;
      OOMB_CHECK(e[k].is_boolean(), "{}: added_tokens[{}].{} must be true or false", where, i, k);
      *dst = e[k].get<bool>();
    }
    OOMB_CHECK(!a.by_id_.count(t.id), "{}: added_tokens[{}]: id {} is given twice", where, i, t.id);
    a.by_id_[t.id] = a.tokens_.size();
    a.tokens_.push_back(std::move(t));
  }
  for (size_t k = 0; k < a.tokens_.size(); ++k) {
    Trie& t = a.tries_[a.tokens_[k].normalized];
    const std::string key = a.tokens_[k].normalized && normalize ? normalize(a.tokens_[k].content) : a.tokens_[k].content;
    if (key.empty()) continue;
    int32_t node = 0;
    for (unsigned char ch : key) {
      const uint64_t key = uint64_t(node) << 8 | ch;
      auto it = t.edges.find(key);
      if (it == t.edges.end()) {
        it = t.edges.emplace(key, int32_t(t.terminal.size())).first;
        t.terminal.push_back(-1);
      }
      node = it->second;
    }
    if (t.terminal[size_t(node)] < 0) t.terminal[size_t(node)] = int32_t(k);  // same content twice: the first
    t.first_byte[static_cast<unsigned char>(key[0])] = true;
  }
  return a;
}

const AddedToken* AddedTokens::by_id(int32_t id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedTokens::by_content(std::string_view content) const {
  for (const auto& t : tokens_)
    if (t.content == content) return &t;
  return nullptr;
}

void AddedTokens::find(std::string_view s, bool normalized, bool split_special, std::vector<AddedMatch>& out) const {
  const Trie& t = tries_[normalized];
  if (t.terminal.size() <= 1) return;
  size_t floor = 0;  // the end of the last match kept: lstrip stops there
  for (size_t i = 0; i < s.size();) {
    if (!t.first_byte[static_cast<unsigned char>(s[i])]) {
      ++i;
      continue;
    }
    int32_t node = 0, best = -1;
    size_t end = 0;
    for (size_t k = i; k < s.size(); ++k) {
      const auto it = t.edges.find(uint64_t(node) << 8 | static_cast<unsigned char>(s[k]));
      if (it == t.edges.end()) break;
      node = it->second;
      if (t.terminal[size_t(node)] >= 0) best = t.terminal[size_t(node)], end = k + 1;
    }
    if (best < 0) {
      ++i;
      continue;
    }
    const AddedToken& tok = tokens_[size_t(best)];
    bool keep = !(split_special && tok.special);
    if (keep && tok.single_word) {
      if (i > 0) {
        size_t b = i - 1;
        while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
        keep = !word_char(utf8_next(s, b));
      }
      size_t q = end;
      if (keep && q < s.size()) keep = !word_char(utf8_next(s, q));
    }
    if (!keep) {  // the span is consumed all the same
      i = end;
      continue;
    }
    size_t b = i, e = end;
    int len = 0;
    if (tok.lstrip)
      while (b > floor && white_space_before(s, b, &len)) b -= size_t(len);
    if (tok.rstrip)
      while (white_space_at(s, e, &len)) e += size_t(len);
    out.push_back({b, e, &tok});
    floor = i = e;
  }
}

}  // namespace oomb
