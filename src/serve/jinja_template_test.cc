// Tests for JinjaTemplate: each construct on its own, errors and limits, and the real chat
// templates in testdata/chat_templates/ against the output of Python's Jinja2 (testdata/expected.json,
// written by testdata/make_expected.py).
#include "serve/jinja_template.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace strata {
namespace {

using nlohmann::ordered_json;

constexpr int64_t kFixedNow = 1721989800;  // 2024-07-26 10:30:00 UTC

JinjaRenderOptions fixed_clock() {
  JinjaRenderOptions o;
  o.now_unix_seconds = kFixedNow;
  return o;
}

// Parses and renders; on any error returns "ERROR: <status>" so that EXPECT_EQ shows it.
std::string render(std::string_view source, const ordered_json& context = ordered_json::object(),
                   const JinjaRenderOptions& options = fixed_clock()) {
  StatusOr<JinjaTemplate> t = JinjaTemplate::parse(source);
  if (!t.ok()) return "ERROR: " + t.status().to_string();
  StatusOr<std::string> out = t->render(context, options);
  if (!out.ok()) return "ERROR: " + out.status().to_string();
  return *out;
}

Status parse_error(std::string_view source) {
  StatusOr<JinjaTemplate> t = JinjaTemplate::parse(source);
  return t.ok() ? Status() : t.status();
}

Status render_error(std::string_view source, const ordered_json& context = ordered_json::object(),
                    const JinjaRenderOptions& options = fixed_clock()) {
  StatusOr<JinjaTemplate> t = JinjaTemplate::parse(source);
  if (!t.ok()) return Status(StatusCode::kInternal, "parse failed: " + t.status().to_string());
  StatusOr<std::string> out = t->render(context, options);
  return out.ok() ? Status() : out.status();
}

bool contains(const std::string& s, std::string_view part) {
  return s.find(part) != std::string::npos;
}

// ---- output and literals ----------------------------------------------------------------

TEST(JinjaTemplate, PlainTextAndVariables) {
  EXPECT_EQ(render("hello"), "hello");
  EXPECT_EQ(render(""), "");
  EXPECT_EQ(render("Hi {{ name }}!", {{"name", "Bob"}}), "Hi Bob!");
  EXPECT_EQ(render("{{ a }}{{ b }}", {{"a", 1}, {"b", "x"}}), "1x");
  EXPECT_EQ(render("{ not a tag } {"), "{ not a tag } {");
}

TEST(JinjaTemplate, PythonStyleOutputOfValues) {
  EXPECT_EQ(render("{{ true }} {{ false }} {{ none }} {{ True }} {{ None }}"),
            "True False None True None");
  EXPECT_EQ(render("{{ 1 }} {{ -3 }} {{ 2.5 }} {{ 3.0 }} {{ 1e20 }} {{ 1e-5 }} {{ 0.1 + 0.2 }}"),
            "1 -3 2.5 3.0 1e+20 1e-05 0.30000000000000004");
  EXPECT_EQ(render("{{ [1, 'a', none, true, 1.5] }}"), "[1, 'a', None, True, 1.5]");
  EXPECT_EQ(render("{{ {'a': 1, 'b': [2]} }}"), "{'a': 1, 'b': [2]}");
  EXPECT_EQ(render("{{ (1, 2) }} {{ (1,) }} {{ () }}"), "(1, 2) (1,) ()");
  EXPECT_EQ(render("{{ [\"it's\", 'say \"hi\"', 'both\\'\"'] }}"),
            "[\"it's\", 'say \"hi\"', 'both\\'\"']");
  EXPECT_EQ(render("{{ x }}", {{"x", {{"k", nullptr}, {"f", 1.0}}}}), "{'k': None, 'f': 1.0}");
  EXPECT_EQ(render("{{ undefined_thing }}"), "");
}

TEST(JinjaTemplate, StringLiterals) {
  EXPECT_EQ(render(R"({{ 'single' }} {{ "double" }} {{ 'a' 'b' "c" }})"), "single double abc");
  EXPECT_EQ(render(R"({{ 'tab\tnl\nq\'dq\"bs\\' }})"), "tab\tnl\nq'dq\"bs\\");
  EXPECT_EQ(render(R"({{ '\x41\u00e9\U0001F600\101\d' }})"), "Aé😀A\\d");
  EXPECT_EQ(render("{{ 'multi\nline' }}"), "multi\nline");
}

TEST(JinjaTemplate, NumberLiterals) {
  EXPECT_EQ(render("{{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1_000 }} {{ 1.5e3 }} {{ 2E-2 }}"),
            "31 15 5 1000 1500.0 0.02");
}

TEST(JinjaTemplate, Comments) {
  EXPECT_EQ(render("a{# comment #}b"), "ab");
  EXPECT_EQ(render("a{# multi\nline {{ x }} #}b"), "ab");
}

// ---- whitespace control -------------------------------------------------------------------

TEST(JinjaTemplate, ManualWhitespaceControl) {
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif -%}  c"), "abc");
  EXPECT_EQ(render("x \n {{- 'y' -}} \n z"), "xyz");
  EXPECT_EQ(render("x {#- c -#} y"), "xy");
}

TEST(JinjaTemplate, TrimBlocksAndLstripBlocks) {
  // trim_blocks drops the newline after a block tag; lstrip_blocks the indentation before it.
  EXPECT_EQ(render("  {% if true %}\n  x\n  {% endif %}\ny"), "  x\ny");
  // Not for variable tags.
  EXPECT_EQ(render("  {{ 'v' }}\nz"), "  v\nz");
  // Comments count as blocks.
  EXPECT_EQ(render("a\n  {# c #}\nb"), "a\nb");
  // '+' disables lstrip_blocks / trim_blocks for that tag.
  EXPECT_EQ(render("a\n  {%+ if true %}x{% endif +%}\nb"), "a\n  x\nb");
  // Text before the tag on the same line keeps its spaces.
  EXPECT_EQ(render("a  {% if true %}b{% endif %}"), "a  b");
}

TEST(JinjaTemplate, TrailingNewlineAndCrlf) {
  EXPECT_EQ(render("x\n"), "x");
  EXPECT_EQ(render("x\n\n"), "x\n");
  EXPECT_EQ(render("a\r\nb\rc\r\n"), "a\nb\nc");
}

TEST(JinjaTemplate, Raw) {
  EXPECT_EQ(render("{% raw %}{{ x }} {% if %}{% endraw %}"), "{{ x }} {% if %}");
  EXPECT_EQ(render("a\n{%- raw -%}\n  {{ x }}  \n{%- endraw -%}\n  b"), "a{{ x }}b");
}

// ---- control structures ---------------------------------------------------------------------

TEST(JinjaTemplate, IfElifElse) {
  const char* t = "{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %}";
  EXPECT_EQ(render(t, {{"x", 1}}), "one");
  EXPECT_EQ(render(t, {{"x", 2}}), "two");
  EXPECT_EQ(render(t, {{"x", 3}}), "many");
  EXPECT_EQ(render("{% if u %}y{% else %}n{% endif %}"), "n");
  EXPECT_EQ(render("{% if [] or '' or 0 or none %}y{% else %}n{% endif %}"), "n");
}

TEST(JinjaTemplate, ForLoopVariables) {
  EXPECT_EQ(render("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}"
                   "{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }};"
                   "{% endfor %}",
                   {{"xs", {"a", "b"}}}),
            "10TrueFalse221;21FalseTrue210;");
  EXPECT_EQ(render("{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }},{% endfor %}"),
            "-2,1-3,2-,");
  EXPECT_EQ(render("{% for i in range(4) %}{{ loop.cycle('a', 'b') }}{% endfor %}"), "abab");
  EXPECT_EQ(render("{% for x in xs %}{% for y in x %}{{ loop.index }}{% endfor %}|{{ loop.index }}"
                   " {% endfor %}",
                   {{"xs", {{1, 2}, {3}}}}),
            "12|1 1|2 ");
}

TEST(JinjaTemplate, ForElseUnpackingAndFilter) {
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for x in u %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
                   {{"d", {{"b", 1}, {"a", 2}}}}),
            "b=1;a=2;");
  EXPECT_EQ(render("{% for (a, b) in [(1, 2), (3, 4)] %}{{ a + b }}{% endfor %}"), "37");
  EXPECT_EQ(render("{% for x in [1, 2, 3, 4] if x % 2 == 0 %}{{ loop.index }}/{{ loop.length }}:"
                   "{{ x }} {% endfor %}"),
            "1/2:2 2/2:4 ");
  EXPECT_EQ(render("{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}{% for c in 'ab' %}{{ c }}."
                   "{% endfor %}"),
            "xya.b.");
}

TEST(JinjaTemplate, BreakAndContinue) {
  EXPECT_EQ(render("{% for x in range(10) %}{% if x == 1 %}{% continue %}{% endif %}{{ x }}"
                   "{% if x == 3 %}{% break %}{% endif %}{% endfor %}"),
            "023");
}

TEST(JinjaTemplate, SetAndScoping) {
  EXPECT_EQ(render("{% set x = 1 %}{% set y = x + 1 %}{{ x }}{{ y }}"), "12");
  EXPECT_EQ(render("{% set a, b = [1, 2] %}{{ b }}{{ a }}"), "21");
  // Assignments inside a loop body do not leak out, nor into the next iteration.
  EXPECT_EQ(
      render("{% set x = 1 %}{% for i in [1, 2] %}[{{ x }}]{% set x = 5 %}{% endfor %}{{ x }}"),
      "[1][1]1");
  // if blocks do not create a scope.
  EXPECT_EQ(render("{% if true %}{% set y = 2 %}{% endif %}{{ y }}"), "2");
  // Overriding a context variable.
  EXPECT_EQ(
      render("{% set messages = messages[1:] %}{{ messages|length }}", {{"messages", {1, 2, 3}}}),
      "2");
  EXPECT_EQ(render("{% set x %}a{{ 1 }}b{% endset %}[{{ x }}]"), "[a1b]");
  EXPECT_EQ(render("{% set x | upper %}abc{% endset %}{{ x }}"), "ABC");
}

TEST(JinjaTemplate, Namespace) {
  EXPECT_EQ(render("{% set ns = namespace(count=0, found=false) %}{% for x in [1, 2, 3] %}"
                   "{% set ns.count = ns.count + x %}{% if x == 2 %}{% set ns.found = true %}"
                   "{% endif %}{% endfor %}{{ ns.count }} {{ ns.found }}"),
            "6 True");
  EXPECT_EQ(
      render("{% set ns = namespace() %}{% set ns.index = 0 %}{{ ns.index }}{{ ns.missing }}"),
      "0");
  EXPECT_EQ(render("{% set ns = namespace(a=1) %}{{ ns }}"), "<Namespace {'a': 1}>");
  EXPECT_EQ(render("{% set ns = namespace(items=[]) %}{% for i in range(3) %}"
                   "{% set ns.items = ns.items + [i] %}{% endfor %}{{ ns.items }}"),
            "[0, 1, 2]");
  EXPECT_TRUE(contains(render("{% set x = 1 %}{% set x.y = 2 %}"), "non-namespace"));
}

TEST(JinjaTemplate, WithAndFilterBlocks) {
  EXPECT_EQ(render("{% set x = 1 %}{% with x = 2, y = x %}{{ x }}{{ y }}{% endwith %}{{ x }}"),
            "211");
  EXPECT_EQ(render("{% filter upper %}ab{{ 'c' }}{% endfilter %}"), "ABC");
  EXPECT_EQ(render("{% for m in ['a'] %}{% generation %}<{{ m }}>{% endgeneration %}{% endfor %}"),
            "<a>");
}

TEST(JinjaTemplate, Macros) {
  EXPECT_EQ(render("{% macro f(a, b=2) %}[{{ a }}{{ b }}]{% endmacro %}{{ f(1) }}{{ f(1, b=3) }}"
                   "{{ f(b=4, a=5) }}"),
            "[12][13][54]");
  // Missing arguments are undefined; defaults may use earlier parameters.
  EXPECT_EQ(render("{% macro f(a, b) %}{{ a }}|{{ b }}|{% endmacro %}{{ f(1) }}"), "1||");
  EXPECT_EQ(render("{% macro f(a, b=a * 2) %}{{ b }}{% endmacro %}{{ f(4) }}"), "8");
  // Recursion, and macros seeing template-level variables at call time.
  EXPECT_EQ(render("{% macro m(x) %}{% if x > 0 %}{{ x }}{{ m(x - 1) }}{% endif %}{% endmacro %}"
                   "{{ m(3) }}"),
            "321");
  EXPECT_EQ(render("{% set g = 'G' %}{% macro m() %}{{ g }}{{ h }}{% endmacro %}{% set h = 'H' %}"
                   "{{ m() }}"),
            "GH");
  EXPECT_EQ(render("{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, a=3) }}"),
            "(1, 2){'a': 3}");
  // A macro's output is a string usable in expressions.
  EXPECT_EQ(
      render("{% macro t() %}str{% endmacro %}{% set x = t() %}{{ x + '[]' }} {{ x|length }}"),
      "str[] 3");
  EXPECT_EQ(render("{{ m() }}{% macro m() %}x{% endmacro %}"),
            "ERROR: INVALID_ARGUMENT: jinja template error at line 1: 'm' is undefined");
  EXPECT_TRUE(contains(render("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"), "not more than 1"));
  EXPECT_TRUE(contains(render("{% macro m(a) %}{% endmacro %}{{ m(z=2) }}"), "keyword argument"));
}

// ---- expressions ----------------------------------------------------------------------------

TEST(JinjaTemplate, Arithmetic) {
  EXPECT_EQ(render("{{ 1 + 2 }} {{ 1 + 1.5 }} {{ 7 - 10 }} {{ 3 * 4 }} {{ 10 / 4 }} {{ 8 / 2 }}"),
            "3 2.5 -3 12 2.5 4.0");
  EXPECT_EQ(render("{{ 10 // 4 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }}"),
            "2 -4 2 3.0 0.5");
  EXPECT_EQ(render("{{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }}"), "1024 0.5 64 4");
  EXPECT_EQ(render("{{ 'ab' + 'cd' }} {{ 'ab' * 2 }} {{ [1] + [2] }} {{ [0] * 3 }}"),
            "abcd abab [1, 2] [0, 0, 0]");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none ~ true ~ [1] }}"), "a1NoneTrue[1]");
  EXPECT_EQ(render("{{ true + 1 }}"), "2");
  EXPECT_EQ(render("{{ 1 / 0 }}"),
            "ERROR: INVALID_ARGUMENT: jinja template error at line 1: division by zero");
  EXPECT_TRUE(contains(render("{{ 'a' + 1 }}"), "can only concatenate str (not \"int\") to str"));
  EXPECT_TRUE(contains(render("{{ 9223372036854775807 + 1 }}"), "integer overflow"));
}

TEST(JinjaTemplate, ComparisonsAndLogic) {
  EXPECT_EQ(render("{{ 1 == 1.0 }} {{ 1 != 2 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} "
                   "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 2 >= 2 }} {{ 1 <= 0 }}"),
            "True True True True True False True False");
  EXPECT_EQ(render("{{ {'a': [1]} == {'a': [1]} }} {{ [1] == (1,) }} {{ none == none }}"),
            "True False True");
  EXPECT_EQ(render("{{ 'b' in 'abc' }} {{ 1 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }} "
                   "{{ 'x' in u }}"),
            "True True True True False");
  EXPECT_EQ(render("{{ x or 'dflt' }} {{ 'a' and 'b' }} {{ not x }} {{ none and 1 }}", {{"x", ""}}),
            "dflt b True None");
  EXPECT_TRUE(contains(render("{{ 1 < 'a' }}"), "'<' not supported between instances of 'int'"));
}

TEST(JinjaTemplate, ConditionalExpression) {
  EXPECT_EQ(render("{{ 'y' if x else 'n' }}", {{"x", true}}), "y");
  EXPECT_EQ(render("{{ 1 if false else 2 if false else 3 }}"), "3");
  EXPECT_EQ(render("[{{ 'y' if false }}]"), "[]");
  EXPECT_EQ(render("{{ 'a' if true else u.x.y }}"), "a");
}

TEST(JinjaTemplate, AttributesSubscriptsAndSlices) {
  ordered_json ctx = {{"m", {{"role", "user"}, {"content", "hi"}, {"items", 7}}},
                      {"xs", {1, 2, 3, 4, 5}}};
  EXPECT_EQ(render("{{ m.role }} {{ m['content'] }} {{ m['items'] }} {{ xs[0] }} {{ xs[-1] }} "
                   "{{ xs.1 }}",
                   ctx),
            "user hi 7 1 5 2");
  EXPECT_EQ(render("{{ xs[1:3] }} {{ xs[:2] }} {{ xs[::-1] }} {{ xs[::2] }} {{ xs[-2:] }}", ctx),
            "[2, 3] [1, 2] [5, 4, 3, 2, 1] [1, 3, 5] [4, 5]");
  EXPECT_EQ(render("{{ 'héllo'[1:3] }} {{ 'héllo'[::-1] }} {{ 'héllo'[1] }} {{ 'héllo'|length }}"),
            "él olléh é 5");
  // Missing attributes and keys are undefined (empty, falsy) ...
  EXPECT_EQ(render("[{{ m.nope }}][{{ m['nope'] }}][{{ xs[10] }}][{{ m.nope is defined }}]", ctx),
            "[][][][False]");
  // ... and using them further is an error, like Jinja's default Undefined.
  EXPECT_EQ(render("{{ m.nope.deeper }}", ctx),
            "ERROR: INVALID_ARGUMENT: jinja template error at line 1: 'dict object' has no "
            "attribute 'nope'");
  EXPECT_EQ(render("{{ nothing.attr }}"),
            "ERROR: INVALID_ARGUMENT: jinja template error at line 1: 'nothing' is undefined");
  EXPECT_EQ(render("{{ nothing + 1 }}"),
            "ERROR: INVALID_ARGUMENT: jinja template error at line 1: 'nothing' is undefined");
  EXPECT_TRUE(contains(render("{{ nothing() }}"), "'nothing' is undefined"));
  // Dict methods win over keys for attribute access, as in Jinja's sandbox.
  EXPECT_TRUE(contains(render("{{ m.items }}", ctx), "built-in method items"));
}

TEST(JinjaTemplate, StringMethods) {
  EXPECT_EQ(render("{{ '  x  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '  x'.lstrip() }}|"
                   "{{ 'x  '.rstrip() }}|{{ '\\n\\nx'.lstrip('\\n') }}"),
            "x|a|x|x|x");
  EXPECT_EQ(render("{{ 'a b  c'.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a,b,c'.split(',', 1) }} "
                   "{{ 'a,b,c'.rsplit(',', 1) }} {{ ' a  b '.split(none, 1) }}"),
            "['a', 'b', 'c'] ['a', 'b', '', 'c'] ['a', 'b,c'] ['a,b', 'c'] ['a', 'b ']");
  EXPECT_EQ(render("{{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'c')) }} "
                   "{{ 'Hi'.upper() }} {{ 'Hi'.lower() }} {{ \"it's a day\".title() }} "
                   "{{ 'hELLO'.capitalize() }} {{ 'a-b-c'.replace('-', '+', 1) }}"),
            "True True HI hi It'S A Day Hello a+b-c");
  EXPECT_EQ(render("{{ 'hello'.find('l') }} {{ 'hello'.rfind('l') }} {{ 'hello'.count('l') }} "
                   "{{ ', '.join(['a', 'b']) }} {{ 'a\\nb'.splitlines() }}"),
            "2 3 2 a, b ['a', 'b']");
  // The last-turn reasoning split of Qwen3 / DeepSeek templates.
  EXPECT_EQ(render("{{ c.split('</think>')[-1].lstrip('\\n') }}|"
                   "{{ c.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}",
                   {{"c", "<think>\nwhy\n</think>\n\nanswer"}}),
            "answer|why");
  EXPECT_TRUE(contains(render("{{ 'abc'.nosuch() }}"), "'str object' has no attribute 'nosuch'"));
}

TEST(JinjaTemplate, DictMethods) {
  ordered_json ctx = {{"d", {{"b", 1}, {"a", 2}}}};
  EXPECT_EQ(render("{{ d.items()|list }} {{ d.keys()|list }} {{ d.values()|list }} "
                   "{{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 0) }}",
                   ctx),
            "[('b', 1), ('a', 2)] ['b', 'a'] [1, 2] 2 None 0");
  EXPECT_TRUE(contains(render("{{ d.update({}) }}", ctx), "unsafe"));
  EXPECT_TRUE(contains(render("{{ [].append(1) }}"), "unsafe"));
}

// ---- filters ---------------------------------------------------------------------------------

TEST(JinjaTemplate, StringFilters) {
  EXPECT_EQ(render("{{ '  x  '|trim }}|{{ 'xyx'|trim('x') }}|{{ 'Ab'|upper }}|{{ 'Ab'|lower }}|"
                   "{{ 'hELLO wORLD'|capitalize }}|{{ \"it's a-b(c\"|title }}"),
            "x|y|AB|ab|Hello world|It's A-B(C");
  EXPECT_EQ(render("{{ 'aXa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }} "
                   "{{ 1|string + 'a' }} {{ none|string }} {{ [1]|string }}"),
            "bXb bba 1a None [1]");
  EXPECT_EQ(
      render("{{ 'abc'|center(7) }}|{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}"),
      "  abc  |a\n  b\n\n  c|  a\n  b");
  EXPECT_EQ(render("{{ '<a href=\"x\">&\\'</a>'|e }} {{ '<b>'|escape }} {{ '<i>'|safe }}"),
            "&lt;a href=&#34;x&#34;&gt;&amp;&#39;&lt;/a&gt; &lt;b&gt; <i>");
  EXPECT_EQ(render("{{ ('<'|e) + '<' }} {{ ('<'|safe) + '>' }}"), "&lt;&lt; <&gt;");
  EXPECT_EQ(render("{{ '%s-%d'|format('a', 3) }} {{ 'a b  c'|wordcount }}"), "a-3 3");
}

TEST(JinjaTemplate, ConversionFilters) {
  EXPECT_EQ(render("{{ '3'|int + 1 }} {{ 'x'|int }} {{ '3.5'|int }} {{ 3.7|int }} {{ ' 4 '|int }} "
                   "{{ none|int }} {{ '3.5'|float }} {{ 3|float }} {{ 'x'|float }} "
                   "{{ 'x'|int(-1) }}"),
            "4 0 3 3 4 0 3.5 3.0 0.0 -1");
  EXPECT_EQ(render("{{ 2.5|round }} {{ 3.5|round }} {{ 3.14159|round(2) }} "
                   "{{ 3.7|round(0, 'floor') }} {{ -5|abs }}"),
            "2.0 4.0 3.14 3.0 5");
  EXPECT_EQ(render("{{ 'ab'|list }} {{ {'a': 1}|list }} {{ (1, 2)|list }} {{ u|list }}"),
            "['a', 'b'] ['a'] [1, 2] []");
}

TEST(JinjaTemplate, SequenceFilters) {
  ordered_json ctx = {{"xs", {3, 1, 2}}, {"d", {{"b", 1}, {"a", 2}}}};
  EXPECT_EQ(render("{{ xs|length }} {{ xs|count }} {{ xs|first }} {{ xs|last }} {{ xs|sum }} "
                   "{{ xs|min }} {{ xs|max }} {{ 'abc'|first }} {{ []|first is defined }}",
                   ctx),
            "3 3 3 2 6 1 3 a False");
  EXPECT_EQ(render("{{ xs|sort }} {{ xs|sort(reverse=true) }} {{ ['b', 'A', 'a']|sort }} "
                   "{{ xs|reverse|list }} {{ 'abc'|reverse }} {{ [1, 1, 2]|unique|list }}",
                   ctx),
            "[1, 2, 3] [3, 2, 1] ['A', 'a', 'b'] [2, 1, 3] cba [1, 2]");
  EXPECT_EQ(render("{{ xs|join(', ') }} {{ xs|join }} {{ d|items|list }} {{ d|dictsort }} "
                   "{{ [1, 2, 3]|batch(2)|list }}",
                   ctx),
            "3, 1, 2 312 [('b', 1), ('a', 2)] [('a', 2), ('b', 1)] [[1, 2], [3]]");
  EXPECT_EQ(render("{{ u|default('x') }} {{ none|default('x') }} {{ none|d('x', true) }} "
                   "{{ ''|d('e', true) }} {{ 0|default(5) }}"),
            "x None x e 0");
}

TEST(JinjaTemplate, SelectMapFilters) {
  ordered_json ctx = {{"ms",
                       {{{"role", "system"}, {"content", "s"}},
                        {{"role", "user"}, {"content", "u"}},
                        {{"role", "assistant"}}}}};
  EXPECT_EQ(render("{{ ms|selectattr('role', 'equalto', 'user')|list|length }} "
                   "{{ ms|selectattr('content')|map(attribute='role')|join(',') }} "
                   "{{ ms|rejectattr('content')|map(attribute='role')|list }} "
                   "{{ ms|map(attribute='content', default='-')|join }} "
                   "{{ ms|selectattr('role', 'in', ['user', 'system'])|list|length }}",
                   ctx),
            "1 system,user ['assistant'] su- 2");
  EXPECT_EQ(render("{{ [1, 2, 3]|select('odd')|list }} {{ [1, 2, 3]|reject('odd')|list }} "
                   "{{ [0, 1, '']|select|list }} {{ ['a', 'b']|map('upper')|list }} "
                   "{{ ['x', 'code']|reject('equalto', 'code')|join }}"),
            "[1, 3] [2] [1] ['A', 'B'] x");
  // Like Jinja's generators: always true, no len(), and consumed by one pass.
  EXPECT_EQ(render("{{ 'yes' if []|select('odd') else 'no' }}"), "yes");
  EXPECT_TRUE(contains(render("{{ [1]|select('odd')|length }}"), "has no len()"));
  EXPECT_EQ(render("{% set g = [1, 2]|map('string') %}{{ g|join }}{{ g|join }}"), "12");
  // A falsy input gives an empty result instead of an error.
  EXPECT_EQ(render("{{ none|selectattr('a')|list }}"), "[]");
}

TEST(JinjaTemplate, ToJsonMatchesTransformers) {
  ordered_json ctx = {{"x",
                       {{"b", {1, 2.5, nullptr, true}},
                        {"a", "é\n\"<&>"},
                        {"e", ordered_json::object()},
                        {"l", ordered_json::array()}}}};
  EXPECT_EQ(render("{{ x|tojson }}", ctx),
            R"({"b": [1, 2.5, null, true], "a": "é\n\"<&>", "e": {}, "l": []})");
  EXPECT_EQ(render("{{ x|tojson(indent=2) }}", ctx),
            "{\n  \"b\": [\n    1,\n    2.5,\n    null,\n    true\n  ],\n  \"a\": \"é\\n\\\"<&>\","
            "\n  \"e\": {},\n  \"l\": []\n}");
  EXPECT_EQ(render("{{ x.b|tojson(separators=(',', ':')) }} {{ x|tojson(sort_keys=true) }}", ctx),
            "[1,2.5,null,true] {\"a\": \"é\\n\\\"<&>\", \"b\": [1, 2.5, null, true], \"e\": {}, "
            "\"l\": []}");
  EXPECT_EQ(
      render("{{ 'é😀\\x01'|tojson(ensure_ascii=true) }} {{ 1.0|tojson }} {{ (1, 2)|tojson }}"),
      "\"\\u00e9\\ud83d\\ude00\\u0001\" 1.0 [1, 2]");
  EXPECT_TRUE(contains(render("{{ u|tojson }}"), "not JSON serializable"));
}

// ---- tests -----------------------------------------------------------------------------------

TEST(JinjaTemplate, Tests) {
  ordered_json ctx = {{"n", nullptr}, {"s", "str"}, {"d", ordered_json::object()}, {"l", {1}}};
  EXPECT_EQ(render("{{ s is defined }}{{ u is defined }}{{ u is not defined }}{{ u is undefined }}"
                   "{{ n is none }}{{ s is not none }}",
                   ctx),
            "TrueFalseTrueTrueTrueTrue");
  EXPECT_EQ(render("{{ s is string }}{{ 1 is string }}{{ d is mapping }}{{ l is mapping }}"
                   "{{ l is iterable }}{{ s is iterable }}{{ 1 is iterable }}{{ l is sequence }}",
                   ctx),
            "TrueFalseTrueFalseTrueTrueFalseTrue");
  EXPECT_EQ(render("{{ 1 is number }}{{ 1.5 is number }}{{ 'a' is number }}{{ 1 is integer }}"
                   "{{ 1.0 is float }}{{ true is boolean }}{{ true is true }}{{ 1 is true }}"
                   "{{ false is false }}"),
            "TrueTrueFalseTrueTrueTrueTrueFalseTrue");
  EXPECT_EQ(render("{{ s is equalto 'str' }}{{ 1 is eq 1 }}{{ 2 is ne 1 }}{{ 3 is gt 1 }}"
                   "{{ 3 is lt 1 }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}"
                   "{{ 2 is in [1, 2] }}{{ none is sameas none }}{{ 'ab' is lower }}",
                   ctx),
            "TrueTrueTrueTrueFalseTrueTrueTrueTrueTrueTrue");
}

// ---- globals ---------------------------------------------------------------------------------

TEST(JinjaTemplate, Globals) {
  EXPECT_EQ(render("{{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(3, 0, -1)|list }}"),
            "[0, 1, 2] [1, 4, 7] [3, 2, 1]");
  EXPECT_EQ(render("{{ dict(a=1, b=2) }}"), "{'a': 1, 'b': 2}");
  EXPECT_EQ(render("{{ strftime_now('%Y-%m-%d|%d %b %Y|%B') }}"), "2024-07-26|26 Jul 2024|July");
  EXPECT_EQ(render("{{ strftime_now is defined }} {{ raise_exception is defined }}"), "True True");
  EXPECT_TRUE(contains(render("{{ range(100001)|length }}"), "Range too big"));
}

TEST(JinjaTemplate, StrftimeNowUsesWallClockByDefault) {
  StatusOr<JinjaTemplate> t = JinjaTemplate::parse("{{ strftime_now('%Y') }}");
  ASSERT_TRUE(t.ok());
  StatusOr<std::string> out = t->render(ordered_json::object());
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->size(), 4u);
  EXPECT_GE(std::atoi(out->c_str()), 2024);
}

TEST(JinjaTemplate, RaiseExceptionGivesTheMessage) {
  Status st = render_error(
      "{% if messages[0].role == 'system' %}"
      "{{ raise_exception('System role not supported') }}{% endif %}",
      {{"messages", {{{"role", "system"}}}}});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "System role not supported");
  EXPECT_EQ(render_error("{{ raise_exception('n=' ~ 2) }}").message(), "n=2");
}

// ---- errors ----------------------------------------------------------------------------------

TEST(JinjaTemplate, SyntaxErrorsReportLineAndColumn) {
  Status st = parse_error("line one\n{% if x %}\n  {{ x + }}\n{% endif %}");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(st.message(), "line 3, column 10")) << st.message();
  EXPECT_TRUE(contains(parse_error("{% for x in xs %}").message(), "line 1, column 18"))
      << parse_error("{% for x in xs %}").message();
  EXPECT_TRUE(contains(parse_error("{% for x in xs %}").message(), "'endfor'"));
  EXPECT_TRUE(contains(parse_error("ab\n  {{ x }").message(), "line 2, column 8: unexpected '}'"))
      << parse_error("ab\n  {{ x }").message();
  EXPECT_TRUE(contains(parse_error("{% endif %}").message(), "unknown tag 'endif'"));
  EXPECT_TRUE(contains(parse_error("{# open").message(), "Missing end of comment tag"));
  EXPECT_TRUE(contains(parse_error("{% raw %}open").message(), "Missing end of raw directive"));
  EXPECT_TRUE(contains(parse_error("{{ 'open }}").message(), "string literal"));
  EXPECT_TRUE(contains(parse_error("{{ (1 }}").message(), "unexpected '}'"))
      << parse_error("{{ (1 }}").message();
  EXPECT_TRUE(contains(parse_error("{% break %}").message(), "outside of a loop"));
  EXPECT_TRUE(contains(parse_error("{{ f(a=1, 2) }}").message(), "positional argument"));
  EXPECT_TRUE(contains(parse_error("{% macro m(a=1, b) %}{% endmacro %}").message(),
                       "non-default argument"));
  EXPECT_TRUE(parse_error("{{ }}").code() == StatusCode::kInvalidArgument);
}

TEST(JinjaTemplate, UnsupportedConstructsFailToParse) {
  EXPECT_TRUE(contains(parse_error("{% include 'x.jinja' %}").message(), "'include' tag is not"));
  EXPECT_TRUE(contains(parse_error("{% extends 'x' %}").message(), "not supported"));
  EXPECT_TRUE(contains(parse_error("{% call m() %}{% endcall %}").message(), "not supported"));
  EXPECT_TRUE(
      contains(parse_error("{% for x in xs recursive %}{% endfor %}").message(), "recursive"));
  Status st = parse_error("ok\n{{ x|nosuchfilter }}");
  EXPECT_TRUE(contains(st.message(), "line 2, column 6: no filter named 'nosuchfilter'"))
      << st.message();
  EXPECT_TRUE(contains(parse_error("{{ x is nosuchtest }}").message(), "no test named"));
  // Like Jinja 3.1, an unknown filter inside an if block only fails when it runs.
  EXPECT_EQ(render("{% if false %}{{ x|nosuchfilter }}{% endif %}ok"), "ok");
  EXPECT_TRUE(contains(render("{% if true %}{{ x|nosuchfilter }}{% endif %}"), "no filter named"));
}

TEST(JinjaTemplate, RuntimeErrorsReportTheLine) {
  Status st = render_error("a\nb\n{{ 1 + 'x' }}");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(st.message(), "line 3")) << st.message();
  EXPECT_TRUE(
      contains(render("{% for x in none %}{% endfor %}"), "'NoneType' object is not iterable"));
  EXPECT_TRUE(contains(render("{% for a, b in [[1, 2, 3]] %}{% endfor %}"), "too many values"));
  EXPECT_TRUE(contains(render("{{ messages[0]['role'] }}", {{"messages", ordered_json::array()}}),
                       "list object has no element 0"));
}

TEST(JinjaTemplate, ContextMustBeAnObject) {
  StatusOr<JinjaTemplate> t = JinjaTemplate::parse("x");
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->render(ordered_json::array()).ok());
  EXPECT_FALSE(t->render(nlohmann::json(5)).ok());
}

// ---- limits ----------------------------------------------------------------------------------

TEST(JinjaTemplate, HostileTemplatesHitLimitsNotCrashes) {
  auto code = [](std::string_view src, const JinjaRenderOptions& o = fixed_clock()) {
    return render_error(src, ordered_json::object(), o).code();
  };
  // Unbounded recursion.
  EXPECT_EQ(code("{% macro m(x) %}{{ m(x + 1) }}{% endmacro %}{{ m(0) }}"),
            StatusCode::kResourceExhausted);
  // Exponential recursion: bounded by the step limit.
  EXPECT_EQ(code("{% macro m(x) %}{% if x < 40 %}{{ m(x + 1) }}{{ m(x + 1) }}{% endif %}"
                 "{% endmacro %}{{ m(0) }}"),
            StatusCode::kResourceExhausted);
  // Long loops.
  EXPECT_EQ(
      code("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}"),
      StatusCode::kResourceExhausted);
  // Huge strings and lists.
  EXPECT_EQ(code("{{ 'a' * 1000000000 }}"), StatusCode::kResourceExhausted);
  EXPECT_EQ(code("{{ [1] * 1000000000 }}"), StatusCode::kResourceExhausted);
  EXPECT_EQ(code("{% set ns = namespace(s='ab') %}{% for i in range(100) %}"
                 "{% set ns.s = ns.s + ns.s %}{% endfor %}"),
            StatusCode::kResourceExhausted);
  EXPECT_EQ(code("{% set s = 'x' * 1000000 %}{% for i in range(100000) %}{{ s }}{% endfor %}"),
            StatusCode::kResourceExhausted);
  EXPECT_EQ(code("{% set l = ['x' * 1000000] * 1000 %}{{ l }}"), StatusCode::kResourceExhausted);
  EXPECT_EQ(code("{{ ('x' * 1000000)|replace('x', 'yyyyyyyyyy' * 100) }}"),
            StatusCode::kResourceExhausted);
  // Deeply nested values built in a loop.
  EXPECT_NE(code("{% set ns = namespace(v=[]) %}{% for i in range(100000) %}"
                 "{% set ns.v = [ns.v] %}{% endfor %}{{ ns.v|tojson }}"),
            StatusCode::kOk);
  // Reference cycles through namespaces neither hang nor leak (ASan checks the leak).
  EXPECT_EQ(code("{% set ns = namespace() %}{% set ns.self = ns %}{% set ns.l = [ns] %}ok"),
            StatusCode::kOk);
  EXPECT_NE(code("{% set ns = namespace() %}{% set ns.self = ns %}{{ ns|string }}"),
            StatusCode::kOk);
  // Deeply nested syntax is a parse error, not a stack overflow.
  std::string deep = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_EQ(parse_error(deep).code(), StatusCode::kInvalidArgument);
  std::string long_chain = "{{ 1";
  for (int i = 0; i < 5000; ++i) long_chain += " + 1";
  EXPECT_EQ(parse_error(long_chain + " }}").code(), StatusCode::kInvalidArgument);
  std::string nested_ifs;
  for (int i = 0; i < 3000; ++i) nested_ifs += "{% if true %}";
  for (int i = 0; i < 3000; ++i) nested_ifs += "{% endif %}";
  EXPECT_EQ(parse_error(nested_ifs).code(), StatusCode::kInvalidArgument);
  // Custom, smaller limits.
  JinjaRenderOptions small = fixed_clock();
  small.max_output_bytes = 10;
  EXPECT_EQ(code("{{ 'x' * 11 }}", small), StatusCode::kResourceExhausted);
  EXPECT_EQ(code("{% for i in range(11) %}x{% endfor %}", small), StatusCode::kResourceExhausted);
  EXPECT_EQ(render("{% for i in range(10) %}x{% endfor %}", ordered_json::object(), small),
            "xxxxxxxxxx");
  small = fixed_clock();
  small.max_steps = 5;
  EXPECT_EQ(code("{% for i in range(6) %}{% endfor %}", small), StatusCode::kResourceExhausted);
  small = fixed_clock();
  small.max_call_depth = 3;
  EXPECT_EQ(
      code("{% macro m(x) %}{% if x %}{{ m(x - 1) }}{% endif %}{% endmacro %}{{ m(3) }}", small),
      StatusCode::kResourceExhausted);
}

TEST(JinjaTemplate, DeepContextJsonIsAnError) {
  ordered_json v = 1;
  for (int i = 0; i < 400; ++i) v = ordered_json::array({v});
  StatusOr<JinjaTemplate> t = JinjaTemplate::parse("{{ x|length }}");
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->render(ordered_json{{"x", v}}).ok());
}

// ---- API properties ----------------------------------------------------------------------------

TEST(JinjaTemplate, KeyOrderFollowsTheJsonType) {
  const char* src = "{{ x|tojson }} {% for k in x %}{{ k }}{% endfor %}";
  StatusOr<JinjaTemplate> t = JinjaTemplate::parse(src);
  ASSERT_TRUE(t.ok());
  ordered_json ordered = {{"x", {{"b", 1}, {"a", 2}}}};
  nlohmann::json sorted = {{"x", {{"b", 1}, {"a", 2}}}};
  EXPECT_EQ(*t->render(ordered), "{\"b\": 1, \"a\": 2} ba");
  EXPECT_EQ(*t->render(sorted), "{\"a\": 2, \"b\": 1} ab");
}

TEST(JinjaTemplate, CopiesShareTheProgramAndRenderConcurrently) {
  StatusOr<JinjaTemplate> t = JinjaTemplate::parse(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
      "<{{ m.role }}>{{ m.content|trim }}{% endfor %}{{ ns.n }}{{ strftime_now('%Y') }}");
  ASSERT_TRUE(t.ok());
  JinjaTemplate copy = *t;
  ordered_json ctx = {{"messages", ordered_json::array()}};
  for (int i = 0; i < 50; ++i) {
    ctx["messages"].push_back({{"role", "user"}, {"content", " m" + std::to_string(i) + " "}});
  }
  std::string expected = *copy.render(ctx, fixed_clock());
  std::vector<std::thread> threads;
  std::vector<int> ok(8, 0);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      for (int r = 0; r < 50; ++r) {
        StatusOr<std::string> out = (i % 2 ? copy : *t).render(ctx, fixed_clock());
        ok[i] += out.ok() && *out == expected;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int i = 0; i < 8; ++i) EXPECT_EQ(ok[i], 50);
}

// ---- real chat templates ----------------------------------------------------------------------

// testdata/chat_templates of the source tree ($STRATA_JINJA_TESTDATA overrides it).
std::filesystem::path testdata_dir() {
  if (const char* env = std::getenv("STRATA_JINJA_TESTDATA")) return env;
  const char* src = std::getenv("STRATA_SOURCE_DIR");
  return std::filesystem::path(src ? src : STRATA_SOURCE_DIR) / "testdata" / "chat_templates";
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Where two strings first differ, with some text around it.
std::string first_difference(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  auto around = [&](const std::string& s) {
    size_t b = i > 40 ? i - 40 : 0;
    return ordered_json(s.substr(b, 100))
        .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  return "first difference at byte " + std::to_string(i) + "\n  expected: " + around(want) +
         "\n  got:      " + around(got);
}

TEST(JinjaTemplateRealTemplates, RenderLikeJinja2) {
  const std::filesystem::path dir = testdata_dir();
  std::ifstream in(dir / "expected.json", std::ios::binary);
  ASSERT_TRUE(in.good()) << "missing " << (dir / "expected.json")
                         << " (set STRATA_JINJA_TESTDATA to the testdata folder)";
  ordered_json data = ordered_json::parse(in);
  JinjaRenderOptions opts;
  opts.now_unix_seconds = data.at("now_unix_seconds").get<int64_t>();
  const ordered_json& convs = data.at("conversations");
  const ordered_json& tools = data.at("tools");

  std::map<std::string, StatusOr<JinjaTemplate>> parsed;
  std::map<std::string, int> cases_per_template;
  int passed = 0, total = 0;
  for (const ordered_json& c : data.at("cases")) {
    const std::string file = c.at("template").get<std::string>();
    const std::string name = file + " / " + c.at("name").get<std::string>();
    ++total;
    ++cases_per_template[file];
    auto it = parsed.find(file);
    if (it == parsed.end()) {
      it = parsed.emplace(file, JinjaTemplate::parse(read_file(dir / "templates" / file))).first;
    }
    if (!it->second.ok()) {
      ADD_FAILURE() << name << ": parse failed: " << it->second.status().to_string();
      continue;
    }
    ordered_json ctx = {{"messages", convs.at(c.at("conversation").get<std::string>())},
                        {"tools", c.at("with_tools").get<bool>() ? tools : ordered_json()},
                        {"documents", nullptr}};
    for (const auto& [k, v] : c.at("vars").items()) ctx[k] = v;
    StatusOr<std::string> out = it->second->render(ctx, opts);
    if (c.contains("output")) {
      const std::string want = c.at("output").get<std::string>();
      if (!out.ok()) {
        ADD_FAILURE() << name << ": render failed: " << out.status().to_string();
      } else if (*out != want) {
        ADD_FAILURE() << name << ": output differs from Jinja2; " << first_difference(want, *out);
      } else {
        ++passed;
      }
    } else {
      const std::string want = c.at("error").get<std::string>();
      if (out.ok()) {
        ADD_FAILURE() << name << ": expected an error (" << want << "), got output";
      } else if (c.at("raised").get<bool>() && out.status().message() != want) {
        ADD_FAILURE() << name << ": expected raise_exception message \"" << want << "\", got \""
                      << out.status().message() << "\"";
      } else {
        ++passed;
      }
    }
  }
  std::cout << "[ real templates ] " << passed << " passed, " << (total - passed) << " failed, of "
            << total << " cases over " << parsed.size() << " templates\n";
  EXPECT_EQ(passed, total);
  EXPECT_GE(parsed.size(), 8u);
  // Every template file is exercised.
  for (const auto& entry : std::filesystem::directory_iterator(dir / "templates")) {
    if (entry.path().extension() != ".jinja") continue;
    EXPECT_GE(cases_per_template[entry.path().filename().string()], 5)
        << entry.path().filename() << " has too few cases in expected.json";
  }
}

}  // namespace
}  // namespace strata
