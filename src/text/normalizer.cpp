#include "text/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>

#include "core/error.h"
#include "text/utf8.h"

namespace oomb {

Normalizer Normalizer::from_json(const nlohmann::json& j, std::string_view where) {
  Normalizer n;
  if (!j.is_null()) n.add(j, where);
  return n;
}

void Normalizer::add(const nlohmann::json& j, std::string_view where) {
  OOMB_CHECK(j.is_object() && j.contains("type") && j["type"].is_string(),
             "{}: \"normalizer\" must be null or an object with a string \"type\"", where);
  const std::string type = j["type"];
  auto text = [&](const nlohmann::json& v, const char* what) {
    OOMB_CHECK(v.is_string(), "{}: normalizer {}'s {} must be a string, got {}", where, type, what, v.dump());
    return v.get<std::string>();
  };
  if (type == "NFC") {
    ops_.push_back({Op::Nfc, "", ""});
  } else if (type == "Prepend") {
    ops_.push_back({Op::Prepend, text(j.value("prepend", nlohmann::json()), "prepend"), ""});
  } else if (type == "Replace") {
    const nlohmann::json p = j.value("pattern", nlohmann::json());
    OOMB_CHECK(p.is_object() && p.contains("String"), "{}: normalizer Replace's pattern must be {{\"String\": ...}}, "
               "got {} (a Regex pattern is not supported)", where, p.dump());
    const std::string from = text(p["String"], "pattern");
    OOMB_CHECK(!from.empty(), "{}: normalizer Replace's pattern is empty", where);
    ops_.push_back({Op::Replace, from, text(j.value("content", nlohmann::json()), "content")});
  } else if (type == "Sequence") {
    OOMB_CHECK(j.contains("normalizers") && j["normalizers"].is_array(),
               "{}: normalizer Sequence needs a \"normalizers\" array", where);
    for (const auto& sub : j["normalizers"]) add(sub, where);
  } else {
    fail("{}: unsupported normalizer type \"{}\" (supported: NFC, Prepend, Replace of a String, a Sequence of them, "
         "or none)", where, type);
  }
}

// Every code point below U+0300 (the first combining mark) is already in NFC and never composes
// with what precedes it, so text made only of them is its own NFC: English prose and code skip
// the library call.
static bool trivially_nfc(std::string_view s) {
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0xCC) return false;  // lead bytes from 0xCC start code points >= U+0300
  }
  return true;
}

std::string nfc(std::string_view s) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                          utf8proc_ssize_t(s.size()), &out, utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) fail("NFC normalization failed: {}", utf8proc_errmsg(n));
  std::string r(reinterpret_cast<const char*>(out), size_t(n));
  std::free(out);
  return r;
}

void append_replacing(std::string& out, std::string_view s, std::string_view from, std::string_view to) {
  for (size_t at = 0;;) {
    const size_t hit = s.find(from, at);
    out.append(s.substr(at, hit - at));
    if (hit == std::string_view::npos) return;
    out.append(to);
    at = hit + from.size();
  }
}

bool Normalizer::nfc_only() const {
  for (const Op& op : ops_)
    if (op.kind != Op::Nfc) return false;
  return true;
}

bool Normalizer::prepends() const {
  for (const Op& op : ops_)
    if (op.kind == Op::Prepend) return true;
  return false;
}

bool Normalizer::replaces_newline() const {
  for (const Op& op : ops_)
    if (op.kind == Op::Replace && op.a.find('\n') != std::string::npos) return true;
  return false;
}

std::string_view Normalizer::apply(std::string_view s, std::string& out, bool no_prepend) const {
  std::string_view cur = s;
  std::string next;
  for (const Op& op : ops_) {
    if (op.kind == Op::Nfc) {
      if (trivially_nfc(cur)) continue;
      next = nfc(cur);
    } else if (op.kind == Op::Prepend) {
      if (cur.empty() || no_prepend) continue;
      next = op.a;
      next += cur;
    } else {
      if (cur.find(op.a) == std::string_view::npos) continue;
      next.clear();
      append_replacing(next, cur, op.a, op.b);
    }
    out.swap(next);  // (cur may view the old out, now next: it is read no more)
    cur = out;
  }
  return cur;
}

}  // namespace oomb
