// Text normalizers of tokenizer.json: none, or Unicode NFC (Debian's utf8proc, Unicode 15).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace oomb {

class Normalizer {
 public:
  // `j`: the "normalizer" value of tokenizer.json (null, {"type": "NFC"}, or a Sequence of those).
  static Normalizer from_json(const nlohmann::json& j, std::string_view where);
  bool identity() const { return !nfc_; }
  // Writes the normalized form of valid UTF-8 `s` into out; returns a view of the result,
  // which is `s` itself when nothing changes (out is then untouched).
  std::string_view apply(std::string_view s, std::string& out) const;

 private:
  bool nfc_ = false;
};

// NFC of valid UTF-8 (exposed for tests).
std::string nfc(std::string_view s);

}  // namespace oomb
