// UTF-8 validation, WHATWG replacement (the rule JavaScript's TextDecoder follows), positions.
#include <gtest/gtest.h>

#include "core/error.h"
#include "text/utf8.h"

using namespace oomb;

TEST(Utf8, ValidAndInvalidSequences) {
  for (const char* ok : {"", "abc", "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80", "\xF4\x8F\xBF\xBF", "\xEF\xBB\xBF"})
    EXPECT_EQ(utf8_first_invalid(ok), std::string_view(ok).size()) << ok;
  const std::pair<std::string, size_t> bad[] = {
      {"\x80", 0},          {"a\xBF", 1},            {"\xC0\xAF", 0},      {"\xC1\xBF", 0},  // overlong 2-byte
      {"\xE0\x80\xAF", 0},  {"\xED\xA0\x80", 0},     {"\xF4\x90\x80\x80", 0},                 // overlong, surrogate, > U+10FFFF
      {"\xF5\x80\x80\x80", 0}, {"\xFF", 0},          {"ab\xE2\x82", 2},    {"\xF0\x9F\x98", 0}};  // truncated
  for (const auto& [s, at] : bad) EXPECT_EQ(utf8_first_invalid(s), at) << ::testing::PrintToString(s);
}

TEST(Utf8, ReplacementFollowsMaximalSubparts) {
  // Examples of Unicode's "U+FFFD Substitution of Maximal Subparts" (table 3-8 and its neighbours)
  const std::string R = "\xEF\xBF\xBD";
  EXPECT_EQ(utf8_replace_invalid("a\x80" "b"), "a" + R + "b");
  EXPECT_EQ(utf8_replace_invalid("\xE2\x82"), R);                      // one truncated sequence: one U+FFFD
  EXPECT_EQ(utf8_replace_invalid("\xE2\x82" "a"), R + "a");
  EXPECT_EQ(utf8_replace_invalid("\xF0\x9F\x98" "x"), R + "x");
  EXPECT_EQ(utf8_replace_invalid("\xC0\xAF"), R + R);                  // C0 can start nothing
  EXPECT_EQ(utf8_replace_invalid("\xED\xA0\x80"), R + R + R);          // a surrogate: ED then two lone continuations
  EXPECT_EQ(utf8_replace_invalid("\xF4\x90\x80\x80"), R + R + R + R);
  EXPECT_EQ(utf8_replace_invalid("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64"),
            "a" + R + R + R + "b" + R + "c" + R + R + "d");  // the standard's own example
  EXPECT_EQ(utf8_replace_invalid("\xC3\xA9\xFF"), "\xC3\xA9" + R);
}

TEST(Utf8, ErrorsNameLineColumnAndOffset) {
  try {
    utf8_check("line one\nline two \xFF rest", "corpus.txt");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "corpus.txt: invalid UTF-8 at line 2, column 10 (byte 0xff at offset 18); fix the file or pass "
                 "--utf8-errors replace to substitute U+FFFD");
  }
  try {
    utf8_check("ok\n\xC3", "data.jsonl", 41);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("data.jsonl: invalid UTF-8 at line 42, column 1"), std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(utf8_check("fine \xE2\x82\xAC", "x"));
}

TEST(Utf8, DecodeAndEncodeEveryCodePoint) {
  for (uint32_t c = 0; c < 0x110000; c += (c < 0x800 ? 1 : 7)) {
    if (c >= 0xD800 && c < 0xE000) continue;
    std::string s;
    utf8_append(s, c);
    ASSERT_EQ(utf8_first_invalid(s), s.size()) << c;
    size_t i = 0;
    ASSERT_EQ(utf8_next(s, i), c);
    ASSERT_EQ(i, s.size());
  }
}
