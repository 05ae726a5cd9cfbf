#include "text/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <type_traits>
#include <sstream>

#include "core/error.h"
#include "text/byte_level.h"
#include "text/utf8.h"

namespace oomb {

using nlohmann::json;
namespace fs = std::filesystem;

// An optional field of a pre_tokenizer: absent or null gives `dflt`; another type is an error.
template <typename T>
static T opt(const json& j, const char* key, T dflt, std::string_view where, std::string_view what) {
  if (!j.contains(key) || j[key].is_null()) return dflt;
  if constexpr (std::is_same_v<T, bool>) {
    OOMB_CHECK(j[key].is_boolean(), "{}: {}.{} must be true or false, got {}", where, what, key, j[key].dump());
  } else {
    OOMB_CHECK(j[key].is_string(), "{}: {}.{} must be a string, got {}", where, what, key, j[key].dump());
  }
  return j[key].get<T>();
}

static std::string type_of(const json& j) {
  return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "";
}

// Unicode 17's numeric characters (N: Nd, Nl, No), as Rust's char::is_numeric takes them in the
// tokenizers builds that carry Unicode 17's tables: PCRE2's \p{N} (Debian's 10.42: Unicode 14) and the
// 133 added since (Unicode 15 to 17: Garay, Myanmar Pao and Eastern Pwo Karen, Sunuwar, Tolong Siki,
// Kawi, Gurung Khema, Kirat Rai, Outlined digits, Kaktovik numerals, Nag Mundari, Ol Onal; listed
// from Node's ICU 78 tables). A build on older tables cuts fewer of these.
constexpr const char* kNumeric =
    R"([\p{N}\x{10D40}-\x{10D49}\x{116D0}-\x{116E3}\x{11BF0}-\x{11BF9}\x{11DE0}-\x{11DE9}\x{11F50}-\x{11F59})"
    R"(\x{16130}-\x{16139}\x{16D70}-\x{16D79}\x{16FF4}-\x{16FF6}\x{1CCF0}-\x{1CCF9}\x{1D2C0}-\x{1D2D3})"
    R"(\x{1E4F0}-\x{1E4F9}\x{1E5F1}-\x{1E5FA}])";

// PCRE2-escaped literal for a Split with {"String": ...}.
static std::string escape_literal(std::string_view s) {
  std::string r;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) r += '\\';
    r += c;
  }
  return r;
}

// Hugging Face's Metaspace: "replacement" one character; "prepend_scheme" always (the default), first or
// never; the older "add_prefix_space", where given false, means never (and contradicts another scheme).
std::pair<std::string, Tokenizer::Prepend> Tokenizer::parse_metaspace(const json& j, std::string_view where,
                                                                      std::string_view what) {
  OOMB_CHECK(j.contains("replacement"), "{}: {} Metaspace needs \"replacement\"", where, what);
  const std::string full = std::string(what) + " Metaspace";
  const std::string rep = opt(j, "replacement", std::string(), where, full);
  OOMB_CHECK(!rep.empty() && size_t(utf8_seq_len(rep, 0)) == rep.size(),
             "{}: {}.replacement must be one character, got {}", where, full, j["replacement"].dump());
  OOMB_CHECK(!j.contains("prepend_scheme") || j["prepend_scheme"].is_string(), "{}: {}.prepend_scheme must be a "
             "string, got {}", where, full, j.value("prepend_scheme", json()).dump());
  const std::string scheme = opt(j, "prepend_scheme", std::string("always"), where, full);
  OOMB_CHECK(scheme == "always" || scheme == "first" || scheme == "never",
             "{}: {}.prepend_scheme \"{}\" is not always, first or never", where, full, scheme);
  Prepend p = scheme == "always" ? Prepend::Always : scheme == "first" ? Prepend::First : Prepend::Never;
  // (as tokenizers 0.19 on: without a prepend_scheme, add_prefix_space false contradicts "always")
  OOMB_CHECK(opt(j, "add_prefix_space", true, where, full) || p == Prepend::Never, "{}: {}.add_prefix_space is "
             "false but prepend_scheme is \"{}\" (Hugging Face refuses the pair too)", where, full, scheme);
  return {rep, p};
}

void Tokenizer::add_steps(const json& j, std::string_view where) {
  if (j.is_null()) return;
  const std::string type = type_of(j);
  if (type == "Sequence") {
    OOMB_CHECK(j.contains("pretokenizers") && j["pretokenizers"].is_array(),
               "{}: pre_tokenizer Sequence needs a \"pretokenizers\" array", where);
    for (const auto& sub : j["pretokenizers"]) add_steps(sub, where);
  } else if (type == "Split") {
    OOMB_CHECK(j.contains("pattern") && j["pattern"].is_object(), "{}: pre_tokenizer Split needs a \"pattern\" object",
               where);
    const json& p = j["pattern"];
    std::string rx;
    if (p.contains("Regex") && p["Regex"].is_string()) rx = p["Regex"].get<std::string>();
    else if (p.contains("String") && p["String"].is_string()) rx = escape_literal(p["String"].get<std::string>());
    else fail("{}: pre_tokenizer Split pattern must be {{\"Regex\": ...}} or {{\"String\": ...}}", where);
    OOMB_CHECK(!opt(j, "invert", false, where, "pre_tokenizer Split"),
               "{}: pre_tokenizer Split with \"invert\": true is not supported", where);
    const std::string behavior = opt(j, "behavior", std::string("Isolated"), where, "pre_tokenizer Split");
    for (const Step& s : steps_)  // Hugging Face would run the regex on the byte-level characters
      OOMB_CHECK(s.kind != Step::ByteLevel, "{}: a Split after the ByteLevel pre_tokenizer is not supported", where);
    OOMB_CHECK(behavior == "Isolated" || behavior == "Removed" || behavior == "MergedWithPrevious",
               "{}: pre_tokenizer Split behavior \"{}\" is not supported (supported: Isolated, Removed, "
               "MergedWithPrevious)", where, behavior);
    Step s{Step::Split, std::make_shared<RegexSplit>(rx, std::string(where) + ": pre_tokenizer Split"),
           behavior == "Removed", false, behavior == "MergedWithPrevious"};
    if (p.contains("String")) s.literal = p["String"].get<std::string>();
    steps_.push_back(std::move(s));
  } else if (type == "Digits") {
    // Hugging Face's Digits: the characters char::is_numeric takes (Unicode's N: Nd, Nl, No) split
    // off, each alone (individual_digits) or a run together (StarCoder's and Granite's tokenizers:
    // individual, before ByteLevel) -- a Split on kNumeric or kNumeric+, Isolated. (Its field has no
    // default in tokenizers' serde: absent, the file does not load there, nor here.)
    OOMB_CHECK(j.contains("individual_digits"), "{}: pre_tokenizer Digits needs \"individual_digits\"", where);
    const bool individual = opt(j, "individual_digits", false, where, "pre_tokenizer Digits");
    for (const Step& s : steps_)
      OOMB_CHECK(s.kind != Step::ByteLevel, "{}: a Digits after the ByteLevel pre_tokenizer is not supported", where);
    const std::string numeric(kNumeric);
    Step s{Step::Split, std::make_shared<RegexSplit>(individual ? numeric : numeric + "+",
                                                     std::string(where) + ": pre_tokenizer Digits"),
           false, false, false};
    steps_.push_back(std::move(s));
  } else if (type == "Metaspace") {
    // Hugging Face's Metaspace: every " " by the replacement, which also starts the text (always: every
    // piece; first: only the piece at the text's start) unless it starts with one; with "split" (the
    // default), each replacement then begins a piece.
    for (const Step& s : steps_)
      OOMB_CHECK(s.kind != Step::ByteLevel && s.kind != Step::Metaspace, "{}: a Metaspace pre_tokenizer after a "
                 "ByteLevel or Metaspace one is not supported", where);
    auto [rep, prepend] = parse_metaspace(j, where, "pre_tokenizer");
    Step s{Step::Metaspace, nullptr};
    s.meta = rep, s.prepend = prepend, s.meta_split = opt(j, "split", true, where, "pre_tokenizer Metaspace");
    steps_.push_back(std::move(s));
  } else if (type == "ByteLevel") {
    for (const Step& s : steps_)
      OOMB_CHECK(s.kind != Step::Metaspace, "{}: a ByteLevel pre_tokenizer after a Metaspace one is not supported",
                 where);
    Step s{Step::ByteLevel, nullptr, false, opt(j, "add_prefix_space", false, where, "ByteLevel pre_tokenizer"),
           false};
    if (opt(j, "use_regex", true, where, "ByteLevel pre_tokenizer"))
      s.regex = std::make_shared<RegexSplit>(kGpt2Pattern, std::string(where) + ": ByteLevel pre_tokenizer");
    steps_.push_back(std::move(s));
  } else {
    fail("{}: unsupported pre_tokenizer type \"{}\" (supported: Split, Digits, ByteLevel, Metaspace, Sequence of "
         "them)", where,
         type.empty() ? j.dump() : type);
  }
}

Tokenizer Tokenizer::parse(std::string_view text, std::string_view where) {
  try {
    return parse_checked(text, where);
  } catch (const json::exception& e) {  // a field of an unexpected type that no check above names
    fail("{}: {}", where, e.what());
  }
}

Tokenizer Tokenizer::parse_checked(std::string_view text, std::string_view where) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for numbers like 1e999
    fail("{}: not valid JSON: {}", where, e.what());
  }
  OOMB_CHECK(j.is_object(), "{}: a tokenizer.json must hold a JSON object", where);
  Tokenizer t;
  t.source_ = std::string(where);
  OOMB_CHECK(j.contains("model"), "{}: no \"model\" (is this a tokenizer.json?)", where);
  t.bpe_ = BytePairModel::from_json(j["model"], where);
  t.normalizer_ = Normalizer::from_json(j.value("normalizer", json()), where);
  t.add_steps(j.value("pre_tokenizer", json()), where);
  bool byte_level = false;
  for (const Step& s : t.steps_) byte_level |= s.kind == Step::ByteLevel;
  const bool sp = t.bpe_.byte_fallback();
  OOMB_CHECK(byte_level || sp, "{}: the pre_tokenizer has no ByteLevel step and the model no byte_fallback; only "
             "byte-level BPE tokenizers and SentencePiece-style ones (byte_fallback) are supported", where);
  OOMB_CHECK(!byte_level || !sp, "{}: a ByteLevel pre_tokenizer with model.byte_fallback: a tokenizer of neither "
             "family this reads", where);
  // "first" is the piece that starts the original text; a normalizer that prepends or replaces can move
  // that start where Hugging Face follows the original offsets (which this does not track)
  for (const Step& s : t.steps_)
    OOMB_CHECK(s.kind != Step::Metaspace || s.prepend != Prepend::First || t.normalizer_.nfc_only(), "{}: a Metaspace "
               "pre_tokenizer with prepend_scheme \"first\" after a normalizer other than NFC is not supported", where);
  const json dec = j.value("decoder", json());
  if (sp) {
    std::vector<std::string> order;
    t.parse_sp_decoder(dec, where, order);
    // (applied in this order: the tokens' "▁", their bytes, joined, the text's start)
    // (a Metaspace's first token is the first token still, whether its bytes are joined before or after)
    static const std::vector<std::vector<std::string>> kOrders = {
        {"Replace", "ByteFallback", "Fuse"}, {"Replace", "ByteFallback", "Fuse", "Strip"}, {"ByteFallback", "Fuse"},
        {"ByteFallback", "Metaspace"}, {"Metaspace", "ByteFallback"}, {"ByteFallback", "Metaspace", "Fuse"},
        {"Metaspace", "ByteFallback", "Fuse"}};
    OOMB_CHECK(std::find(kOrders.begin(), kOrders.end(), order) != kOrders.end(), "{}: the decoders {} of a "
               "byte_fallback tokenizer are not supported (supported: Replace, ByteFallback, Fuse, then Strip, in "
               "that order; or ByteFallback and Metaspace, either first, then Fuse)", where, json(order).dump());
  } else {
    OOMB_CHECK(dec.is_null() || type_of(dec) == "ByteLevel",
               "{}: unsupported decoder type \"{}\" (supported: ByteLevel)", where, type_of(dec));
  }
  t.added_ = AddedTokens::from_json(j.value("added_tokens", json()), where, [&](std::string_view c) {
    std::string out;
    return std::string(t.normalizer_.apply(c, out));
  });
  t.id_limit_ = t.bpe_.id_limit();
  bool newline_in_added = false;
  for (const AddedToken& a : t.added_.all()) {
    t.id_limit_ = std::max<int64_t>(t.id_limit_, int64_t(a.id) + 1);
    newline_in_added |= a.content.find('\n') != std::string::npos || a.lstrip || a.rstrip || a.single_word;
  }
  // Cutting after '\n' before a non-White_Space character is exact for these two patterns (Qwen2,
  // Llama 3): a match holding the newline ends there, since \s*[\r\n]+ comes before \s+(?!\S)
  // and no other alternative continues past a newline; nothing looks behind; NFC does not reach
  // across a newline. GPT-2's pattern is not among them: its \s+(?!\S) makes " \n" + "B" split
  // as " ", "\n", "B". Added tokens that hold a newline or strip whitespace keep text whole too.
  static const std::string known[] = {
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
  bool patterns_known = true;
  for (const Step& s : t.steps_) {
    if (s.prefix_space || s.removed) patterns_known = false;
    if (s.regex && std::find(std::begin(known), std::end(known), s.regex->source()) == std::end(known))
      patterns_known = false;
  }
  // The SentencePiece style: a piece runs across newlines. Text cut after one (before a character that
  // is not White_Space, where a run of them ends) encodes the same where either every newline ends a
  // section ("\n" an added token found in the raw text: Gemma's, with its runs), or the BPE takes no
  // merge across a newline (Llama 2's: "\n" is <0x0A>, which no merge takes) and no pre-tokenizer piece
  // boundary moves at a cut (Metaspace; a Split on " ", which a Metaspace never starts with "▁"); and no
  // normalizer Replace holds a newline, no added token holds one, as written or normalized (but Gemma's
  // runs), or strips whitespace. A Prepend normalizer or Metaspace "▁" starts only the first part: the parts
  // after it continue the text (EncodeOptions::continues). But one that starts every section (a Prepend, a
  // Metaspace "always") would start each line after a newline token in the whole text too: not with any.
  bool sp_cuttable = false;
  if (sp && !t.normalizer_.replaces_newline()) {
    const AddedToken* nl = t.added_.by_content("\n");
    bool steps_keep = true;
    for (const Step& s : t.steps_)
      steps_keep = steps_keep && (s.kind == Step::Metaspace || (s.kind == Step::Split && s.literal == " "));
    const bool every_section = t.normalizer_.prepends() || std::any_of(t.steps_.begin(), t.steps_.end(), [](const Step& s) {
      return s.kind == Step::Metaspace && s.prepend == Prepend::Always;
    });
    const bool newline_tokens = std::any_of(t.added_.all().begin(), t.added_.all().end(), [](const AddedToken& a) {
      return !a.normalized && !a.content.empty() && a.content.find_first_not_of('\n') == std::string::npos;
    });
    const bool boundary = t.bpe_.newline_is_boundary() && steps_keep;
    sp_cuttable = every_section ? boundary && !newline_tokens : (nl && !nl->normalized) || boundary;
    for (const AddedToken& a : t.added_.all()) {
      const bool newlines_only = a.content.find_first_not_of('\n') == std::string::npos;
      std::string out;
      if (a.lstrip || a.rstrip || a.single_word || (a.content.find('\n') != std::string::npos &&
                                                    (!newlines_only || a.normalized)) ||
          (a.normalized && t.normalizer_.apply(a.content, out).find('\n') != std::string_view::npos))
        sp_cuttable = false;
    }
  }
  t.newline_cut_safe_ = sp ? sp_cuttable : patterns_known && !newline_in_added && t.normalizer_.nfc_only();
  return t;
}

// The decoders of the SentencePiece-style families: a Sequence of Replace (a String pattern), ByteFallback,
// Fuse and Strip (a one-character content, nothing stripped at the end), as Llama 2's and Gemma's are.
void Tokenizer::parse_sp_decoder(const json& j, std::string_view where, std::vector<std::string>& order) {
  OOMB_CHECK(!j.is_null(), "{}: a byte_fallback tokenizer without a decoder (its tokens' \"▁\" would stay)", where);
  const std::string type = type_of(j);
  if (type == "Sequence") {
    OOMB_CHECK(j.contains("decoders") && j["decoders"].is_array(), "{}: decoder Sequence needs a \"decoders\" array",
               where);
    for (const auto& sub : j["decoders"]) parse_sp_decoder(sub, where, order);
    return;
  } else if (type == "Replace") {
    const json p = j.value("pattern", json());
    OOMB_CHECK(p.is_object() && p.contains("String") && p["String"].is_string() && j.contains("content") &&
                   j["content"].is_string() && dec_from_.empty(),
               "{}: decoder Replace must be one (without a Metaspace), of a {{\"String\": ...}} pattern by a string "
               "content", where);
    dec_from_ = p["String"].get<std::string>(), dec_to_ = j["content"].get<std::string>();
    OOMB_CHECK(!dec_from_.empty(), "{}: decoder Replace's pattern is empty", where);
  } else if (type == "Metaspace") {  // every replacement in a token a space, but none in the first token
    OOMB_CHECK(dec_from_.empty(), "{}: a decoder Metaspace with a Replace or another Metaspace", where);
    auto [rep, prepend] = parse_metaspace(j, where, "decoder");
    dec_from_ = rep, dec_to_ = " ", dec_first_drops_ = prepend != Prepend::Never;
    dec_bytes_replaced_ = std::find(order.begin(), order.end(), "ByteFallback") != order.end();
  } else if (type == "Strip") {
    const std::string content = opt(j, "content", std::string(" "), where, "decoder Strip");
    OOMB_CHECK(content.size() == 1 && j.value("stop", 0) == 0 && j.value("start", 0) >= 0,
               "{}: decoder Strip must strip one ASCII character at the start only, got {}", where, j.dump());
    strip_char_ = content[0], strip_start_ = j.value("start", 0);
  } else {
    OOMB_CHECK(type == "ByteFallback" || type == "Fuse", "{}: unsupported decoder type \"{}\" for a byte_fallback "
               "tokenizer (supported: Replace, Metaspace, ByteFallback, Fuse, Strip, a Sequence of them)", where, type);
  }
  order.push_back(type);
}

Tokenizer Tokenizer::load(const fs::path& path) {
  std::error_code ec;
  fs::path file = path;
  if (fs::is_directory(path, ec)) {
    file = path / "tokenizer.json";
    OOMB_CHECK(fs::exists(file, ec), "--tokenizer {}: the directory has no tokenizer.json", path.string());
  }
  std::ifstream f(file, std::ios::binary);
  OOMB_CHECK(f.good(), "--tokenizer {}: cannot open", file.string());
  std::ostringstream ss;
  ss << f.rdbuf();
  return parse(ss.str(), file.string());
}

int32_t Tokenizer::token_id(std::string_view token) const {
  if (const AddedToken* a = added_.by_content(token)) return a->id;
  return bpe_.find(token);
}

// Normalize; added tokens with normalized = true; pre-tokenize (each step splits every piece);
// BPE each piece. text_start: the section begins the text.
void Tokenizer::encode_section(std::string_view text, std::vector<int32_t>& out, EncodeState& st,
                               const EncodeOptions& o, bool text_start) const {
  const Origin origin = !text_start ? Origin::Inside : o.continues ? Origin::Continuing : Origin::Start;
  const std::string_view s = normalizer_.apply(text, st.normalized, origin == Origin::Continuing);
  if (s.empty()) return;
  if (!added_.any_normalized()) return encode_pieces(s, out, st, origin);
  std::vector<AddedMatch> matches;  // rare: no tokenizer of the supported families has such tokens
  added_.find(s, true, o.split_special, matches);
  size_t at = 0;
  for (const AddedMatch& m : matches) {
    if (m.begin > at) encode_pieces(s.substr(at, m.begin - at), out, st, at == 0 ? origin : Origin::Inside);
    out.push_back(m.token->id);
    at = m.end;
  }
  if (at < s.size()) encode_pieces(s.substr(at), out, st, at == 0 ? origin : Origin::Inside);
}

void Tokenizer::encode_pieces(std::string_view s, std::vector<int32_t>& out, EncodeState& st, Origin origin) const {
  st.prefixed.clear();  // a deque: views of its strings stay valid as it grows
  st.views.assign(1, s);
  for (const Step& step : steps_) {
    st.next_views.clear();
    if (step.kind == Step::Metaspace) {
      for (std::string_view ps : st.views) metaspace(step, ps, ps.data() == s.data() ? origin : Origin::Inside, st);
      st.views.swap(st.next_views);
      continue;
    }
    for (std::string_view ps : st.views) {
      if (step.prefix_space && (ps.empty() || ps[0] != ' ')) ps = st.prefixed.emplace_back(" " + std::string(ps));
      if (!step.regex) {
        st.next_views.push_back(ps);
        continue;
      }
      st.pieces.clear();
      step.regex->split(ps, st.pieces);
      bool after_text = false;  // the piece before is text (not a delimiter) of this ps
      for (const Piece& q : st.pieces) {
        if (step.removed && q.match) continue;
        if (step.merged_prev && q.match && after_text) {  // the delimiter ends the text before it
          std::string_view& prev = st.next_views.back();
          prev = std::string_view(prev.data(), prev.size() + (q.end - q.begin));
          after_text = false;
          continue;
        }
        st.next_views.push_back(ps.substr(q.begin, q.end - q.begin));
        after_text = !q.match;
      }
    }
    st.views.swap(st.next_views);
  }
  for (std::string_view p : st.views) bpe_.encode(p, out, st.bpe);
}

// Hugging Face's Metaspace on one piece: every " " by the replacement; the replacement before it (where it
// does not start so already) when the scheme is always, except at the start of a text that continues
// earlier text, or first and the piece starts its text; then, with split, a piece from each replacement on.
void Tokenizer::metaspace(const Step& step, std::string_view ps, Origin origin, EncodeState& st) const {
  const bool prepend = step.prepend == Prepend::Always ? origin != Origin::Continuing
                       : step.prepend == Prepend::First ? origin == Origin::Start
                                                        : false;
  std::string& r = st.prefixed.emplace_back();
  if (prepend && !(ps.starts_with(' ') || ps.starts_with(step.meta))) r = step.meta;
  append_replacing(r, ps, " ", step.meta);
  if (r.empty()) return;
  if (!step.meta_split) return st.next_views.push_back(r);
  const std::string_view v = r;
  for (size_t at = 0; at < v.size();) {  // (MergedWithNext: a replacement begins each piece after the first)
    const size_t next = v.find(step.meta, at + (v.substr(at).starts_with(step.meta) ? step.meta.size() : 0));
    st.next_views.push_back(v.substr(at, next - at));
    at = next;
  }
}

void Tokenizer::encode(std::string_view text, std::vector<int32_t>& out, EncodeState& st,
                       const EncodeOptions& o) const {
  st.matches.clear();
  added_.find(text, false, o.split_special, st.matches);
  size_t at = 0;
  for (const AddedMatch& m : st.matches) {
    if (m.begin > at) encode_section(text.substr(at, m.begin - at), out, st, o, at == 0);
    out.push_back(m.token->id);
    at = m.end;
  }
  if (at < text.size()) encode_section(text.substr(at), out, st, o, at == 0);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, const EncodeOptions& o) const {
  EncodeState st;
  std::vector<int32_t> out;
  encode(text, out, st, o);
  return out;
}

bool Tokenizer::has_id(int32_t id) const { return added_.by_id(id) != nullptr || bpe_.has(id); }

std::string Tokenizer::decode_sp(std::span<const int32_t> ids, bool skip_special, bool continues) const {
  std::string text, run;  // run: the bytes of consecutive <0xXX> tokens
  bool first = !continues;  // the next token is the first the decoders see (a Metaspace drops its replacement there)
  bool run_first = false;   // the run is the first token
  auto flush = [&] {
    if (utf8_first_invalid(run) != run.size())
      for (size_t i = 0; i < run.size(); ++i) text += "\xEF\xBF\xBD";  // (ByteFallback: U+FFFD per byte)
    else if (dec_bytes_replaced_) append_replacing(text, run, dec_from_, run_first && dec_first_drops_ ? "" : dec_to_);
    else text += run;
    run.clear();
  };
  auto put = [&](std::string_view token) {
    flush();
    if (dec_from_.empty()) text += token;
    else append_replacing(text, token, dec_from_, first && dec_first_drops_ ? "" : dec_to_);
    first = false;
  };
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (const AddedToken* a = added_.by_id(id)) {
      if (!(skip_special && a->special)) put(a->content);
      continue;
    }
    OOMB_CHECK(bpe_.has(id), "decode: token id {} (at {}) is not in the tokenizer {} ({} ids)", id, i, source_,
               id_limit_);
    if (bpe_.is_byte_token(id)) {
      if (run.empty()) run_first = first;
      run += bpe_.bytes(id), first = false;
    } else {
      put(bpe_.bytes(id));
    }
  }
  flush();
  size_t cut = 0;
  while (!continues && cut < text.size() && int64_t(cut) < strip_start_ && text[cut] == strip_char_) ++cut;
  return text.substr(cut);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special, bool continues) const {
  if (bpe_.byte_fallback()) return decode_sp(ids, skip_special, continues);
  std::string bytes, raw;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (const AddedToken* a = added_.by_id(id)) {
      // through the ByteLevel decoder, as Hugging Face decodes added tokens; content outside the
      // byte-level alphabet stays as written
      if (!(skip_special && a->special)) bytes += byte_level_decode(a->content, raw) ? raw : a->content;
      continue;
    }
    OOMB_CHECK(bpe_.has(id), "decode: token id {} (at {}) is not in the tokenizer {} ({} ids)", id, i, source_,
               id_limit_);
    bytes += bpe_.bytes(id);
  }
  return utf8_first_invalid(bytes) == bytes.size() ? bytes : utf8_replace_invalid(bytes);
}

}  // namespace oomb
