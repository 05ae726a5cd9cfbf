#include "text/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>

#include "core/error.h"
#include "text/utf8.h"

namespace oomb {

Normalizer Normalizer::from_json(const nlohmann::json& j, std::string_view where) {
  Normalizer n;
  if (j.is_null()) return n;
  OOMB_CHECK(j.is_object() && j.contains("type") && j["type"].is_string(),
             "{}: \"normalizer\" must be null or an object with a string \"type\"", where);
  const std::string type = j["type"];
  if (type == "NFC") {
    n.nfc_ = true;
  } else if (type == "Sequence") {
    OOMB_CHECK(j.contains("normalizers") && j["normalizers"].is_array(),
               "{}: normalizer Sequence needs a \"normalizers\" array", where);
    for (const auto& sub : j["normalizers"]) n.nfc_ |= from_json(sub, where).nfc_;
  } else {
    fail("{}: unsupported normalizer type \"{}\" (supported: NFC, or none, as in the byte-level BPE "
         "tokenizers of Qwen2/Qwen2.5/Qwen3 and Llama 3)",
         where, type);
  }
  return n;
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

std::string_view Normalizer::apply(std::string_view s, std::string& out) const {
  if (!nfc_ || trivially_nfc(s)) return s;
  out = nfc(s);
  return out;
}

}  // namespace oomb
