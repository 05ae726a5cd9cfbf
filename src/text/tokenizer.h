// A Hugging Face tokenizer.json of the byte-level BPE families (Qwen2/Qwen2.5/Qwen3, Llama 3,
// GPT-2 style): added tokens found first, then NFC where configured, the Split regexes exactly
// as the file states them, byte-level mapping and BPE merges. Or of the SentencePiece-style BPE
// families (model.byte_fallback: Llama 2, Mistral, Phi-3, Gemma): the normalizer's Prepend and
// Replace of "▁" (the legacy form) or the Metaspace pre-tokenizer (Mistral v0.3's, and every Llama-style
// file transformers 5 writes: "▁" for each space, before the text's start only), no pre-tokenizer or a
// Split on a literal (Gemma's on " ", MergedWithPrevious), characters with byte fallback, and the
// decoder's Replace or Metaspace, ByteFallback, Fuse and Strip. Encoding adds no BOS/EOS.
#pragma once
#include <cstdint>
#include <deque>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "text/added_tokens.h"
#include "text/bpe.h"
#include "text/normalizer.h"
#include "text/regex_split.h"

namespace oomb {

// One thread's reusable encoding state (piece cache and scratch); not shared between threads.
struct EncodeState {
  BpeCache bpe;
  std::vector<AddedMatch> matches;
  std::vector<Piece> pieces;
  std::vector<std::string_view> views, next_views;
  std::string normalized;
  std::deque<std::string> prefixed;  // pieces that got a prefix space
};

struct EncodeOptions {
  bool split_special = false;  // true: special tokens in the text are encoded as plain text
  // true: the text continues earlier text of its document (a completion after its prompt, a chat
  // template's next block), so a Prepend normalizer (Llama 2's "▁") or a Metaspace pre-tokenizer
  // does not start it with "▁", as neither would in the one string Hugging Face encodes; later
  // sections (after an added token) take the Prepend and a Metaspace "always" still
  bool continues = false;
};

class Tokenizer {
 public:
  // PATH: a tokenizer.json, or a directory holding one.
  static Tokenizer load(const std::filesystem::path& path);
  // The text of a tokenizer.json; `where` names it in errors.
  static Tokenizer parse(std::string_view json_text, std::string_view where);

  // Appends the ids of valid UTF-8 text (check or repair it first: text/utf8.h).
  void encode(std::string_view text, std::vector<int32_t>& out, EncodeState& st, const EncodeOptions& o = {}) const;
  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& o = {}) const;
  // Bytes of the ids joined, as UTF-8 (invalid sequences become U+FFFD, as in Hugging Face).
  // An id the tokenizer does not have is an error naming it. continues: the ids follow others decoded
  // before (no decoder step that treats the text's start or first token apart applies).
  std::string decode(std::span<const int32_t> ids, bool skip_special = false, bool continues = false) const;

  int64_t id_limit() const { return id_limit_; }  // 1 + the largest id (vocabulary or added)
  bool has_id(int32_t id) const;  // in the vocabulary or an added token
  // The id of a token given as written in tokenizer.json (added-token content or vocabulary entry), or -1.
  int32_t token_id(std::string_view token) const;
  const AddedTokens& added() const { return added_; }
  const std::string& source() const { return source_; }
  // Text may be cut at every is_cut_point (text/utf8.h: after '\n', before a character that is
  // not White_Space) and its parts encoded apart with the same result, every part after the first
  // with EncodeOptions::continues (see tokenizer.cpp).
  bool cut_after_newline_is_safe() const { return newline_cut_safe_; }
  // A SentencePiece-style BPE (model.byte_fallback: Llama 2, Mistral, Phi-3, Gemma), not a byte-level one.
  bool sentencepiece() const { return bpe_.byte_fallback(); }

 private:
  // Where a piece of text lies: not at the text's start, at the start of a text that begins its
  // document, or at the start of one that continues earlier text (EncodeOptions::continues).
  enum class Origin { Inside, Start, Continuing };
  enum class Prepend { Always, First, Never };  // Metaspace's prepend_scheme
  struct Step {  // one pre-tokenizer
    enum Kind { Split, ByteLevel, Metaspace } kind;
    std::shared_ptr<RegexSplit> regex;  // Split, or ByteLevel with use_regex
    bool removed = false;               // Split behaviour "Removed" (else "Isolated")
    bool prefix_space = false;          // ByteLevel add_prefix_space
    bool merged_prev = false;           // Split behaviour "MergedWithPrevious"
    std::string meta;                   // Metaspace: the replacement of " " (one character)
    Prepend prepend = Prepend::Always;  // Metaspace: which pieces get a leading `meta`
    bool meta_split = false;            // Metaspace: each `meta` starts a piece
    std::string literal;                // Split: the pattern, where a {"String": ...}
  };
  static Tokenizer parse_checked(std::string_view json_text, std::string_view where);
  void add_steps(const nlohmann::json& j, std::string_view where);
  void encode_section(std::string_view text, std::vector<int32_t>& out, EncodeState& st, const EncodeOptions& o,
                      bool text_start) const;
  // origin: where s begins (pieces that begin later in s are Inside)
  void encode_pieces(std::string_view s, std::vector<int32_t>& out, EncodeState& st, Origin origin) const;
  // Appends to st.next_views the pieces of the Metaspace step on ps.
  void metaspace(const Step& step, std::string_view ps, Origin origin, EncodeState& st) const;
  // A Metaspace's replacement and prepend scheme (pre-tokenizer or decoder: `what`).
  static std::pair<std::string, Prepend> parse_metaspace(const nlohmann::json& j, std::string_view where,
                                                         std::string_view what);

  std::string source_;
  Normalizer normalizer_;
  std::vector<Step> steps_;
  BytePairModel bpe_;
  AddedTokens added_;
  int64_t id_limit_ = 0;
  bool newline_cut_safe_ = false;
  // the SentencePiece-style decoder: every dec_from_ in a token by dec_to_ (a Replace, or a Metaspace's
  // " " for its replacement, with none in the first token where dec_first_drops_), <0xXX> runs as their
  // bytes (U+FFFD per byte where invalid), and up to strip_start_ leading strip_char_s off the text
  std::string dec_from_, dec_to_;
  bool dec_first_drops_ = false;
  bool dec_bytes_replaced_ = false;  // a Metaspace after ByteFallback: a byte run's text is a token it sees
  int64_t strip_start_ = 0;
  char strip_char_ = ' ';
  void parse_sp_decoder(const nlohmann::json& j, std::string_view where, std::vector<std::string>& order);
  std::string decode_sp(std::span<const int32_t> ids, bool skip_special, bool continues) const;
};

}  // namespace oomb
