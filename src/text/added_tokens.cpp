#include "text/added_tokens.h"

#include <utf8proc.h>

#include "core/error.h"
#include "text/utf8.h"

namespace oomb {

static bool is_white_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

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

// Letters, digits (any script) and '_' make a word for single_word tokens.
static bool word_char(uint32_t c) {
  if (c == '_') return true;
  const utf8proc_category_t k = utf8proc_category(utf8proc_int32_t(c));
  return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
         (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO);
}

AddedTokens AddedTokens::from_json(const nlohmann::json& j, std::string_view where) {
  AddedTokens a;
  a.terminal_.push_back(-1);  // the root
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
    int32_t node = 0;
    for (unsigned char ch : a.tokens_[k].content) {
      const uint64_t key = uint64_t(node) << 8 | ch;
      auto it = a.edges_.find(key);
      if (it == a.edges_.end()) {
        it = a.edges_.emplace(key, int32_t(a.terminal_.size())).first;
        a.terminal_.push_back(-1);
      }
      node = it->second;
    }
    if (a.terminal_[size_t(node)] < 0) a.terminal_[size_t(node)] = int32_t(k);  // same content twice: the first
    a.first_byte_[static_cast<unsigned char>(a.tokens_[k].content[0])] = true;
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

void AddedTokens::find(std::string_view s, bool with_special, std::vector<AddedMatch>& out) const {
  if (tokens_.empty()) return;
  const size_t first_out = out.size();
  for (size_t i = 0; i < s.size();) {
    if (!first_byte_[static_cast<unsigned char>(s[i])]) {
      ++i;
      continue;
    }
    int32_t node = 0, best = -1;
    size_t best_end = 0;
    for (size_t k = i; k < s.size(); ++k) {
      const auto it = edges_.find(uint64_t(node) << 8 | static_cast<unsigned char>(s[k]));
      if (it == edges_.end()) break;
      node = it->second;
      const int32_t t = terminal_[size_t(node)];
      if (t >= 0 && (with_special || !tokens_[size_t(t)].special)) best = t, best_end = k + 1;
    }
    if (best >= 0) {
      const AddedToken& tok = tokens_[size_t(best)];
      if (tok.single_word) {
        size_t q = best_end;
        bool ok = true;
        if (i > 0) {
          size_t b = i - 1;
          while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
          ok = !word_char(utf8_next(s, b));
        }
        if (ok && q < s.size()) ok = !word_char(utf8_next(s, q));
        if (!ok) {
          ++i;
          continue;
        }
      }
      size_t b = i, e = best_end;
      int len = 0;
      const size_t floor = out.size() > first_out ? out.back().end : 0;
      if (tok.lstrip)
        while (b > floor && white_space_before(s, b, &len)) b -= size_t(len);
      if (tok.rstrip)
        while (white_space_at(s, e, &len)) e += size_t(len);
      out.push_back({b, e, &tok});
      i = e;
      continue;
    }
    ++i;
  }
}

}  // namespace oomb
