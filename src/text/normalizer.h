// Text normalizers of tokenizer.json: none; Unicode NFC (Debian's utf8proc, Unicode 15); and the
// SentencePiece-style BPE families' Prepend and Replace of a literal (Llama 2's "▁" before the text and
// for every space, Gemma's for every space); or a Sequence of those, applied in order.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace oomb {

class Normalizer {
 public:
  // `j`: the "normalizer" value of tokenizer.json (null, {"type": "NFC"}, {"type": "Prepend", "prepend":
  // ...}, {"type": "Replace", "pattern": {"String": ...}, "content": ...}, or a Sequence of those).
  static Normalizer from_json(const nlohmann::json& j, std::string_view where);
  bool identity() const { return ops_.empty(); }
  // Writes the normalized form of valid UTF-8 `s` into out; returns a view of the result,
  // which is `s` itself when nothing changes (out is then untouched). no_prepend: skip Prepend (s
  // continues earlier text).
  std::string_view apply(std::string_view s, std::string& out, bool no_prepend = false) const;
  // Whether every op is NFC (or there is none): a normalization that never reaches across a newline.
  bool nfc_only() const;
  // Whether it prepends (Llama 2's "▁"): a text that continues earlier text must say so.
  bool prepends() const;
  // Whether a Replace's pattern holds a newline (so text cut after one normalizes otherwise).
  bool replaces_newline() const;

 private:
  struct Op {
    enum Kind { Nfc, Prepend, Replace } kind;
    std::string a, b;  // Prepend: a before a non-empty text; Replace: every a by b
  };
  void add(const nlohmann::json& j, std::string_view where);
  std::vector<Op> ops_;
};

// NFC of valid UTF-8 (exposed for tests).
std::string nfc(std::string_view s);
// Appends s to out with every `from` (not empty) written as `to` (the Replace of a normalizer or decoder).
void append_replacing(std::string& out, std::string_view s, std::string_view from, std::string_view to);

}  // namespace oomb
