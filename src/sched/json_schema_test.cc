#include "sched/json_schema.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "sched/token_mask.h"

namespace strata {
namespace {

using json = nlohmann::json;

std::shared_ptr<const JsonSchema> compile_ok(const json& schema) {
  auto s = JsonSchema::compile(schema);
  EXPECT_TRUE(s.ok()) << s.status().to_string() << " for " << schema.dump();
  return s.ok() ? *s : nullptr;
}

// The index of the first byte the checker refuses; -1 when every byte is accepted.
int64_t refused_at(const std::shared_ptr<const JsonSchema>& s, const std::string& text, bool* complete = nullptr) {
  JsonSchemaState st(s);
  for (size_t i = 0; i < text.size(); ++i)
    if (!st.feed(text[i])) return static_cast<int64_t>(i);
  if (complete) *complete = st.complete();
  return -1;
}

// Every prefix is accepted and incomplete; the whole text is accepted and complete.
void expect_valid(const std::shared_ptr<const JsonSchema>& s, const std::string& text) {
  JsonSchemaState st(s);
  for (size_t i = 0; i < text.size(); ++i) {
    ASSERT_FALSE(st.complete()) << text << " complete before byte " << i;
    ASSERT_TRUE(st.feed(text[i])) << text << " refused at byte " << i;
  }
  EXPECT_TRUE(st.complete()) << text;
}

const json kPerson = json::parse(R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 8},
    "age": {"type": "integer"},
    "score": {"type": "number"},
    "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
    "kind": {"const": "person"},
    "nick": {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "null"}]},
    "home": {"$ref": "#/$defs/Address"}
  },
  "required": ["name", "age"],
  "additionalProperties": false,
  "$defs": {"Address": {"type": "object", "properties": {"city": {"type": "string"}},
                        "required": ["city"]}}
})");

TEST(JsonSchemaTest, AcceptsValidDocumentsByteByByte) {
  auto s = compile_ok(kPerson);
  for (const char* good : {
           R"({"name":"Al","age":3})",
           R"({"age": -12, "name": "Zoé"})",
           R"({"name":"x","age":0,"score":-1.5e+3,"tags":["a","c"],"kind":"person"})",
           R"({"name":"x","age":1,"nick":null,"home":{"city":"Oslo"}})",
           R"({"name":"x","age":1,"nick":"abc","tags":[]})",
           R"({"name":"\u00e9\ud83d\ude00","age":1})",  // 2 code points
       }) {
    SCOPED_TRACE(good);
    expect_valid(s, good);
    EXPECT_TRUE(json::accept(good));
  }
}

TEST(JsonSchemaTest, RefusesAtTheOffendingByte) {
  auto s = compile_ok(kPerson);
  struct Case { const char* text; int64_t at; };
  for (const Case& c : std::vector<Case>{
           {R"({"name":"x"})", 11},                         // '}' with "age" missing
           {R"({"name":"x","age":1,"extra":1})", 21},       // 'e' starts no declared key
           {R"({"name":"x","name":"y"})", 14},              // a given key starts no other
           {R"({"name":"x","age":1.5})", 19},               // integer with a fraction
           {R"({"name":"x","age":1e3})", 19},               // integer with an exponent
           {R"({"name":"x","age":"1"})", 18},               // wrong type
           {R"({"name":"","age":1})", 9},                   // minLength 1
           {R"({"name":"123456789","age":1})", 17},         // maxLength 8: the 9th char
           {R"({"name":"x","age":1,"tags":["a","d"]})", 33},     // enum miss
           {R"({"name":"x","age":1,"tags":["a","b","c","a"]})", 39},  // maxItems 3: the ','
           {R"({"name":"x","age":1,"kind":"persons"})", 34},   // const miss
           {R"({"name":"x","age":1,"nick":"abcd"})", 31},       // anyOf: neither branch
           {R"({"name":"x","age":1,"home":{}})", 28},           // required city
           {R"({"name":"x","age":1}})", 20},                    // after the end
           {R"( {"name":"x","age":1})", 0},                     // space before the value
           {R"({"name":"x","age":1,   "a":1})", 22},            // 3 spaces
           {R"({"name":"\ud83d","age":1})", 15},                // lone high surrogate
           {R"({"name":"\ude00","age":1})", 12},                // lone low surrogate
           {"{\"name\":\"\xc3\x28\",\"age\":1}", 10},           // bad UTF-8 continuation
           {"{\"name\":\"\xe0\x80\x80\",\"age\":1}", 10},       // overlong
       }) {
    EXPECT_EQ(refused_at(s, c.text), c.at) << c.text;
  }
}

TEST(JsonSchemaTest, TypesListsEnumsAndArrays) {
  auto s = compile_ok(json::parse(R"({"type": "array", "items": {"type": ["integer", "null", "boolean"]},
                                      "minItems": 2, "maxItems": 3})"));
  expect_valid(s, "[1,null]");
  expect_valid(s, "[true, -0, false]");
  EXPECT_EQ(refused_at(s, "[1]"), 2);
  EXPECT_EQ(refused_at(s, "[]"), 1);
  EXPECT_EQ(refused_at(s, "[1,2,3,"), 6);
  EXPECT_EQ(refused_at(s, "[\"a\"]"), 1);
  EXPECT_EQ(refused_at(s, "[nul]"), 4);
  // Numbers in an enum: one may be the prefix of another; the container ends it.
  auto e = compile_ok(json::parse(R"({"type": "array", "items": {"enum": [1, 10, 1.5, -2, "x", null]}})"));
  expect_valid(e, "[1,10,1.5,-2,\"x\",null,1]");
  EXPECT_EQ(refused_at(e, "[11]"), 2);
  EXPECT_EQ(refused_at(e, "[1.0]"), 3);  // 1.0 is not the dump of an enum value
  EXPECT_EQ(refused_at(e, "[-2.5]"), 3);
  // Enum filtered by type.
  auto t = compile_ok(json::parse(R"({"type": "object", "properties": {"k": {"type": "string", "enum": ["a", 1]}}})"));
  EXPECT_EQ(refused_at(t, R"({"k":1})"), 5);
  expect_valid(t, R"({"k":"a"})");
  expect_valid(t, R"({})");  // no required keys
}

TEST(JsonSchemaTest, AdditionalProperties) {
  // Absent with properties: only the declared keys (strict).
  auto strict = compile_ok(json::parse(R"({"type": "object", "properties": {"a": {"type": "integer"}}})"));
  EXPECT_EQ(refused_at(strict, R"({"b":1})"), 2);
  EXPECT_EQ(refused_at(strict, R"({"a":1,)"), 6);  // no key left to give
  // true: other keys with any value; a schema: other keys with that schema.
  auto open = compile_ok(json::parse(R"({"type": "object", "properties": {"a": {"type": "integer"}},
                                         "additionalProperties": true, "required": ["a", "z"]})"));
  expect_valid(open, R"({"b":[1,{"c":"d"}],"z":null,"a":1})");
  EXPECT_EQ(refused_at(open, R"({"a":"x"})"), 5);
  EXPECT_EQ(refused_at(open, R"({"a":1})"), 6);    // z is required
  EXPECT_EQ(refused_at(open, R"({"b":1,"b":2,"z":1,"a":1})"), 9);  // a repeated other key
  EXPECT_EQ(refused_at(open, R"({"\u0061":1})"), 2);  // other keys take no escapes
  auto typed = compile_ok(json::parse(R"({"type": "object", "additionalProperties": {"type": "boolean"}})"));
  expect_valid(typed, R"({"x":true,"y":false})");
  EXPECT_EQ(refused_at(typed, R"({"x":1})"), 5);
  // A free-form object.
  auto any = compile_ok(json::parse(R"({"type": "object"})"));
  expect_valid(any, R"({"x":{"y":[1,2.5,"z",null,{}]}})");
}

// A top level that may be a number or something else takes the something else only.
TEST(JsonSchemaTest, TopLevelNumbersAreLeftOut) {
  auto any = compile_ok(json::parse("{}"));
  EXPECT_EQ(refused_at(any, "1"), 0);
  EXPECT_EQ(refused_at(any, "-1"), 0);
  expect_valid(any, R"("x")");
  expect_valid(any, "[1,2]");
  expect_valid(any, "null");
  auto e = compile_ok(json::parse(R"({"enum": [1, "one"]})"));
  EXPECT_EQ(refused_at(e, "1"), 0);
  expect_valid(e, R"("one")");
}

TEST(JsonSchemaTest, RecursiveRefAndOneOf) {
  auto tree = compile_ok(json::parse(R"({"$ref": "#/$defs/Node", "$defs": {"Node": {"type": "object",
      "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
      "required": ["v"]}}})"));
  expect_valid(tree, R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[{"v":4}]}]})");
  EXPECT_EQ(refused_at(tree, R"({"v":1,"kids":[{}]})"), 16);
  auto one = compile_ok(json::parse(R"({"type": "object", "properties": {"x": {"oneOf": [
      {"type": "string"}, {"type": "object", "properties": {"y": {"type": "integer"}}, "required": ["y"]}]}}})"));
  expect_valid(one, R"({"x":"s"})");
  expect_valid(one, R"({"x":{"y":2}})");
  EXPECT_EQ(refused_at(one, R"({"x":1})"), 5);
  // Top-level anyOf over objects: the paths split and merge.
  auto u = compile_ok(json::parse(R"({"anyOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                                               {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "null"}}}]})"));
  expect_valid(u, R"({"a":1})");
  expect_valid(u, R"({"a":"s","b":null})");
  EXPECT_EQ(refused_at(u, R"({"a":1,"b":null})"), 6);  // a=1 left the first branch, which has no key left
  expect_valid(u, R"({})");
}

TEST(JsonSchemaTest, RefusesWhatItDoesNotImplement) {
  struct Case { const char* schema; const char* needle; };
  for (const Case& c : std::vector<Case>{
           {R"({"type": "object", "properties": {"s": {"type": "string", "pattern": "^a"}}})", "'pattern' at #/properties/s"},
           {R"({"type": "object", "properties": {"s": {"type": "string", "format": "date"}}})", "'format' at #/properties/s"},
           {R"({"type": "object", "properties": {"n": {"type": "number", "minimum": 0}}})", "'minimum' at #/properties/n"},
           {R"({"type": "array", "items": {"allOf": [{}]}})", "'allOf' at #/items"},
           {R"({"type": "array", "items": [{}]})", "'items' at # as an array"},
           {R"({"type": "array", "uniqueItems": true})", "'uniqueItems' at #"},
           {R"({"type": "object", "properties": {"a/b": false}})", "false"},
           {R"({"type": "object", "properties": {"a/b": {"enum": []}}})", "'enum' at #/properties/a~1b"},
           {R"({"type": "object", "properties": {"e": {"enum": [{"a": 1}]}}})", "'enum' at #/properties/e"},
           {R"({"type": "object", "properties": {"e": {"type": "integer", "enum": ["a"]}}})", "allows no value"},
           {R"({"type": "string", "minLength": 3, "maxLength": 2})", "minLength > maxLength"},
           {R"({"type": "object", "properties": {}, "required": ["x"]})", "required property \"x\""},
           {R"({"type": "integer"})", "top-level value can only be a number"},
           {R"({"enum": [1, 2]})", "top-level value can only be a number"},
           {R"({"anyOf": [{"type": "number"}, {"enum": [-1]}]})", "top-level value can only be a number"},
           {R"({"type": "object", "properties": {"x": {"oneOf": [{"type": "string"}, {"enum": ["a"]}]}}})", "oneOf at #/properties/x"},
           {R"({"type": "object", "properties": {"x": {"$ref": "#/$defs/Nope"}}})", "does not resolve"},
           {R"({"type": "object", "properties": {"x": {"$ref": "http://x/y"}}})", "local JSON pointer"},
           {R"({"type": "object", "properties": {"x": {"$ref": "#/$defs/A", "type": "string"}}, "$defs": {"A": {}}})", "'type' beside '$ref'"},
           {R"({"type": "object", "properties": {"x": {"type": "strin"}}})", "'type' at #/properties/x"},
           {R"({"type": "object", "properties": {"x": {"type": "string", "maxLength": -1}}})", "'maxLength' at #/properties/x"},
           {R"({"type": "object", "properties": {"x": {"anyOf": [{"type": "string"}], "type": "string"}}})", "'type' beside 'anyOf'"},
           {R"({"type": "object", "properties": {"x": {"const": "a", "minLength": 1}}})", "'minLength' beside 'const'"},
       }) {
    auto r = JsonSchema::compile(json::parse(c.schema));
    ASSERT_FALSE(r.ok()) << c.schema;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos) << r.status().message();
  }
  // Annotations are ignored.
  compile_ok(json::parse(R"({"title": "T", "description": "d", "$schema": "x", "type": "object",
                             "properties": {"a": {"type": "string", "default": "q", "examples": ["q"]}}})"));
}

// ---- Property test: random texts the checker lets through, checked by an independent
// validator (JSON Schema semantics for the subset, written from the spec, not the checker).

size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool validate(const json& schema, const json& v, const json& root);

bool validate_all(const json& schema, const json& v, const json& root) {
  if (schema.is_boolean()) return schema.get<bool>();
  if (schema.contains("$ref")) return validate(root.at(json::json_pointer(schema["$ref"].get<std::string>().substr(1))), v, root);
  if (schema.contains("anyOf")) {
    for (const json& b : schema["anyOf"]) if (validate(b, v, root)) return true;
    return false;
  }
  if (schema.contains("oneOf")) {
    int n = 0;
    for (const json& b : schema["oneOf"]) n += validate(b, v, root);
    return n == 1;
  }
  if (schema.contains("const") && v != schema["const"]) return false;
  if (schema.contains("enum")) {
    bool found = false;
    for (const json& e : schema["enum"]) found = found || e == v;
    if (!found) return false;
  }
  if (schema.contains("type")) {
    const json types = schema["type"].is_array() ? schema["type"] : json::array({schema["type"]});
    bool ok = false;
    for (const json& t : types) {
      const std::string n = t;
      ok = ok || (n == "object" && v.is_object()) || (n == "array" && v.is_array()) ||
           (n == "string" && v.is_string()) || (n == "number" && v.is_number()) ||
           (n == "boolean" && v.is_boolean()) || (n == "null" && v.is_null()) ||
           (n == "integer" && (v.is_number_integer() ||
                               (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>())));
    }
    if (!ok) return false;
  }
  if (v.is_string()) {
    const size_t n = code_points(v.get<std::string>());
    if (schema.contains("minLength") && n < schema["minLength"].get<size_t>()) return false;
    if (schema.contains("maxLength") && n > schema["maxLength"].get<size_t>()) return false;
  }
  if (v.is_array()) {
    if (schema.contains("minItems") && v.size() < schema["minItems"].get<size_t>()) return false;
    if (schema.contains("maxItems") && v.size() > schema["maxItems"].get<size_t>()) return false;
    if (schema.contains("items"))
      for (const json& x : v) if (!validate(schema["items"], x, root)) return false;
  }
  if (v.is_object()) {
    if (schema.contains("required"))
      for (const json& k : schema["required"]) if (!v.contains(k.get<std::string>())) return false;
    const json props = schema.value("properties", json::object());
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (props.contains(it.key())) {
        if (!validate(props[it.key()], it.value(), root)) return false;
      } else if (schema.contains("additionalProperties") && !validate(schema["additionalProperties"], it.value(), root)) {
        return false;
      }
    }
  }
  return true;
}

bool validate(const json& schema, const json& v, const json& root) { return validate_all(schema, v, root); }

// Random bytes from a small alphabet, each one the checker allows, until the value is
// complete; past `soft` bytes closing bytes are preferred so the text ends.
std::string generate(const std::shared_ptr<const JsonSchema>& s, std::mt19937_64& rng, bool* dead_end) {
  static const std::string kAlphabet = std::string("{}[],:\" \n\\/-+.eE0123456789abcdefghijklmnopqrstuvwxyzAB") +
                                       "\xc3\xa9\xf0\x9f\x98\x80";
  JsonSchemaState st(s);
  std::string out;
  *dead_end = false;
  while (!st.complete()) {
    std::vector<char> ok, closing;
    for (char c : kAlphabet) {
      JsonSchemaState next = st;
      if (!next.feed(c)) continue;
      ok.push_back(c);
      if (c == '"' || c == '}' || c == ']') closing.push_back(c);
    }
    if (ok.empty()) {
      *dead_end = true;
      return out;
    }
    const bool close = out.size() > 60 && !closing.empty() && rng() % 4 != 0;
    const std::vector<char>& from = close ? closing : ok;
    const char c = from[rng() % from.size()];
    EXPECT_TRUE(st.feed(c));
    out += c;
    if (out.size() > 20000) {
      *dead_end = true;
      return out;
    }
  }
  return out;
}

TEST(JsonSchemaTest, RandomTextsValidateIndependently) {
  const std::vector<json> schemas = {
      kPerson,
      json::parse(R"({"type": "array", "items": {"enum": [1, 10, 1.5, -2, "x", "\"q\"", null, true]}, "minItems": 1, "maxItems": 4})"),
      json::parse(R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "array",
          "items": {"type": "string", "maxLength": 2}, "minItems": 2}}, "additionalProperties": {"type": "number"}})"),
      json::parse(R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "array",
          "items": {"type": "string", "maxLength": 2}, "minItems": 2}}, "required": ["b", "a"]})"),
      json::parse(R"({"type": "object"})"),
      json::parse(R"({"type": ["array", "string", "boolean", "null"], "items": {"type": "number"}})"),
      json::parse(R"({"$ref": "#/$defs/Node", "$defs": {"Node": {"type": "object",
          "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "maxItems": 2, "items": {"$ref": "#/$defs/Node"}}},
          "required": ["v"]}}})"),
      json::parse(R"({"type": "object", "properties": {"u": {"oneOf": [{"type": "string", "minLength": 2},
          {"type": "array", "items": {"anyOf": [{"type": "integer"}, {"type": "object", "properties": {"k": {"const": "ab"}}, "required": ["k"]}]}}]},
          "w": {"anyOf": [{"type": "string", "maxLength": 1}, {"type": "string", "minLength": 3}]}}, "required": ["u", "w"]})"),
  };
  // The validator is not vacuous.
  EXPECT_TRUE(validate(kPerson, json::parse(R"({"name":"x","age":1,"home":{"city":"c"}})"), kPerson));
  for (const char* bad : {R"({"name":"x"})", R"({"name":"x","age":1.5})", R"({"name":"","age":1})",
                          R"({"name":"x","age":1,"tags":["d"]})", R"({"name":"x","age":1,"home":{}})",
                          R"({"name":"x","age":1,"nick":"abcd"})", R"({"name":"x","age":1,"kind":"p"})"})
    EXPECT_FALSE(validate(kPerson, json::parse(bad), kPerson)) << bad;
  std::mt19937_64 rng(0x5c4e);
  for (const json& schema : schemas) {
    auto s = compile_ok(schema);
    ASSERT_TRUE(s);
    int checked = 0;
    for (int i = 0; i < 150; ++i) {
      bool dead = false;
      const std::string text = generate(s, rng, &dead);
      ASSERT_FALSE(dead) << schema.dump() << "\n" << text;
      ASSERT_TRUE(json::accept(text)) << schema.dump() << "\n" << text;
      EXPECT_TRUE(validate(schema, json::parse(text), schema)) << schema.dump() << "\n" << text;
      ++checked;
    }
    EXPECT_EQ(checked, 150);
  }
}

TEST(JsonSchemaTest, TokenMaskKeepsToTheSchema) {
  auto s = compile_ok(json::parse(R"({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]})"));
  auto bytes = std::make_shared<const std::vector<std::string>>(
      std::vector<std::string>{"{", "}", "\"ok\"", "\"no\"", ":", "true", "1", "", "tr"});
  ByteTokenMask<JsonSchemaState> mask(bytes, {7}, JsonSchemaState(s));
  auto allowed = [&] {
    std::vector<float> logits(bytes->size(), 0.f);
    mask.apply(logits);
    std::string out;
    for (size_t t = 0; t < logits.size(); ++t)
      if (logits[t] == 0.f) out += std::to_string(t);
    return out;
  };
  EXPECT_EQ(allowed(), "0");
  for (int32_t t : {0, 2, 4}) mask.accept(t);
  EXPECT_EQ(allowed(), "58");
  mask.accept(5);
  EXPECT_EQ(allowed(), "1");
  mask.accept(1);
  EXPECT_TRUE(mask.complete());
  EXPECT_EQ(allowed(), "7");  // only the stop id
}

}  // namespace
}  // namespace strata
