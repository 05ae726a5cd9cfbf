// fuzz-sources: text/jinja/lexer.cpp text/jinja/parser.cpp text/jinja/template.cpp text/jinja/builtins.cpp text/jinja/value.cpp text/utf8.cpp text/chat_template.cpp
// fuzz-libs: -lutf8proc
// Feeds bytes as a chat template, rendered over conversations with tools, reasoning, Unicode and odd
// values: only oomb::Error may come out (no crash, hang or other exception, within small limits);
// the {% generation %} spans lie in the text, in order, apart; a rendering is the same twice; the
// blocks of a conversation are never empty, alternate between trained and not, and join into
// the whole rendering.
#include <cstdint>
#include <string>

#include "core/error.h"
#include "fuzz_check.h"
#include "text/chat_template.h"
#include "text/jinja/template.h"

using oomb::jinja::Value;

static const Value& conversations() {
  static const Value v = Value::parse(R"([
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}],
    [{"role": "system", "content": " be brief \n"}, {"role": "user", "content": "2+2? ✓ 你好"},
     {"role": "assistant", "content": "<think>\nsum\n</think>\n\n4", "reasoning_content": null},
     {"role": "user", "content": "again"},
     {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "f",
       "arguments": {"x": [1, 2.5, -0.0, 1e300, true, null, "s"]}}}]},
     {"role": "tool", "content": "{\"ok\": 1}"}, {"role": "assistant", "content": 12}]
  ])");
  return v;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string source(reinterpret_cast<const char*>(data), size);
  const bool timed = source.find("strftime") != std::string::npos;  // (the clock may tick between renders)
  try {
    const oomb::jinja::Template t(source, "fuzz");
    const oomb::jinja::RenderLimits limits{20000, size_t(1) << 20, size_t(1) << 16};
    for (const Value& messages : conversations()) {
      Value vars = {{"messages", messages}, {"add_generation_prompt", true}, {"bos_token", "<s>"},
                    {"tools", Value::parse(R"([{"type": "function", "function": {"name": "f"}}])")}};
      oomb::jinja::Rendered r;
      try {
        r = t.render(vars, limits);
      } catch (const oomb::Error&) {
        continue;
      }
      size_t at = 0;
      for (const auto& [b, e] : r.generation) {
        check(at <= b && b <= e && e <= r.text.size(), "generation spans in the text, in order, apart");
        at = e;
      }
      if (!timed) check(t.render(vars, limits).text == r.text, "the same rendering twice");
    }
  } catch (const oomb::Error&) {
  }
  try {
    const oomb::ChatTemplate chat(source, "fuzz", Value::object());
    for (const Value& messages : conversations()) {
      std::vector<oomb::ChatBlock> blocks;
      try {
        blocks = chat.render(messages, nullptr, "r");
      } catch (const oomb::Error&) {
        continue;
      }
      for (size_t i = 0; i < blocks.size(); ++i) {
        check(!blocks[i].text.empty(), "no empty block");
        check(i == 0 || blocks[i].trained != blocks[i - 1].trained, "blocks alternate");
      }
    }
  } catch (const oomb::Error&) {
  }
  return 0;
}
