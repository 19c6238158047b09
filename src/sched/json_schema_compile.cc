// JsonSchema::compile: a JSON Schema (the subset in json_schema.h) to the node graph the
// checker walks.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "sched/json_schema.h"

namespace strata {

using json = nlohmann::json;

namespace {

const std::set<std::string, std::less<>> kAnnotations = {
    "title", "description", "default", "examples", "$schema", "$id", "$comment",
    "deprecated", "readOnly", "writeOnly", "$defs", "definitions"};
const std::set<std::string, std::less<>> kKeywords = {
    "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
    "minLength", "maxLength", "enum", "const", "anyOf", "oneOf", "$ref"};

// RFC 6901: '~' -> "~0", '/' -> "~1".
std::string pointer_token(const std::string& key) {
  std::string out;
  for (char c : key) out += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
  return out;
}

// Kinds of a value's first byte, to tell oneOf branches apart.
enum : uint8_t { kKindObject = 1, kKindArray = 2, kKindString = 4, kKindNumber = 8,
                 kKindTrue = 16, kKindFalse = 32, kKindNull = 64 };

uint8_t literal_kind(const std::string& text) {
  switch (text[0]) {
    case '"': return kKindString;
    case 't': return kKindTrue;
    case 'f': return kKindFalse;
    case 'n': return kKindNull;
    default: return kKindNumber;
  }
}

}  // namespace

class JsonSchemaCompiler {
 public:
  explicit JsonSchemaCompiler(const json& root) : root_(root), out_(std::make_shared<JsonSchema>()) {
    JsonSchema::Node any;  // node 0 (kAny): any value; its containers hold any values
    any.literals = {"true", "false", "null"};
    out_->nodes_.push_back(std::move(any));
  }

  StatusOr<std::shared_ptr<const JsonSchema>> run() {
    STRATA_ASSIGN_OR_RETURN(out_->root_, compile(root_, "#", 0));
    for (const auto& [idx, at] : one_ofs_) {
      uint8_t all = 0;
      for (int32_t b : out_->nodes_[idx].any_of) {
        std::set<int32_t> visiting;
        const uint8_t k = kinds(b, visiting);
        if (all & k)
          return invalid_argument("oneOf at {}: its branches admit the same JSON type; only oneOf "
                                  "over different types is supported (use anyOf)", at);
        all |= k;
      }
    }
    std::set<int32_t> visiting;
    if (kinds(out_->root_, visiting) == kKindNumber)
      return invalid_argument("the top-level value can only be a number, which has no last byte "
                              "a decoder can see: wrap it in an object or an array");
    return std::shared_ptr<const JsonSchema>(std::move(out_));
  }

 private:
  StatusOr<int32_t> compile(const json& s, const std::string& at, int ref_depth) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return JsonSchema::kAny;
      return invalid_argument("the schema false (no value allowed) at {} is not supported", at);
    }
    if (!s.is_object()) return invalid_argument("the schema at {} must be an object or a boolean", at);
    if (s.contains("$ref")) return resolve(s, at, ref_depth);
    const int32_t idx = static_cast<int32_t>(out_->nodes_.size());
    out_->nodes_.emplace_back();
    STRATA_RETURN_IF_ERROR(fill(idx, s, at));
    return idx;
  }

  StatusOr<int32_t> resolve(const json& s, const std::string& at, int ref_depth) {
    STRATA_RETURN_IF_ERROR(only_beside(s, "$ref", {}, at));
    const json& r = s["$ref"];
    if (!r.is_string() || r.get<std::string>().rfind('#', 0) != 0)
      return invalid_argument("$ref at {} must be a local JSON pointer such as \"#/$defs/Name\"", at);
    const std::string ref = r.get<std::string>();
    if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
    if (ref_depth > 16) return invalid_argument("$ref at {}: a chain of $refs is too long or circular", at);
    const json* target = nullptr;
    try {
      target = &root_.at(json::json_pointer(ref.substr(1)));
    } catch (const json::exception&) {
      return invalid_argument("$ref \"{}\" at {} does not resolve", ref, at);
    }
    if (target->is_object() && !target->contains("$ref")) {
      // Reserved before the target is compiled, so a recursive reference finds it.
      const int32_t idx = static_cast<int32_t>(out_->nodes_.size());
      out_->nodes_.emplace_back();
      refs_[ref] = idx;
      STRATA_RETURN_IF_ERROR(fill(idx, *target, ref));
      return idx;
    }
    STRATA_ASSIGN_OR_RETURN(const int32_t idx, compile(*target, ref, ref_depth + 1));
    refs_[ref] = idx;
    return idx;
  }

  // `keyword` may sit beside annotations and `allowed` only.
  static Status only_beside(const json& s, const char* keyword, std::set<std::string> allowed,
                            const std::string& at) {
    for (auto it = s.begin(); it != s.end(); ++it)
      if (it.key() != keyword && !kAnnotations.count(it.key()) && !allowed.count(it.key()))
        return invalid_argument("'{}' beside '{}' at {} is not supported", it.key(), keyword, at);
    return ok_status();
  }

  static StatusOr<int64_t> count(const json& s, const char* key, int64_t fallback, const std::string& at) {
    if (!s.contains(key)) return fallback;
    const json& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      return invalid_argument("'{}' at {} must be a non-negative integer", key, at);
    return v.get<int64_t>();
  }

  static StatusOr<uint8_t> types(const json& s, const std::string& at) {
    if (!s.contains("type")) return JsonSchema::kAnyType;
    static const std::map<std::string, uint8_t> kNames = {
        {"object", JsonSchema::kObject}, {"array", JsonSchema::kArray},
        {"string", JsonSchema::kString}, {"number", JsonSchema::kNumber | JsonSchema::kInteger},
        {"integer", JsonSchema::kInteger}, {"boolean", JsonSchema::kBoolean},
        {"null", JsonSchema::kNull}};
    const json& t = s["type"];
    const json list = t.is_array() ? t : json::array({t});
    uint8_t bits = 0;
    for (const json& name : list) {
      auto it = name.is_string() ? kNames.find(name.get<std::string>()) : kNames.end();
      if (it == kNames.end())
        return invalid_argument("'type' at {} must be one of object, array, string, number, "
                                "integer, boolean, null (or a list of them), got {}", at, name.dump());
      bits |= it->second;
    }
    if (bits == 0) return invalid_argument("'type' at {} is an empty list", at);
    return bits;
  }

  Status fill(int32_t idx, const json& s, const std::string& at) {
    for (auto it = s.begin(); it != s.end(); ++it)
      if (!kKeywords.count(it.key()) && !kAnnotations.count(it.key()))
        return invalid_argument("unsupported JSON Schema keyword '{}' at {}", it.key(), at);
    JsonSchema::Node n;
    if (s.contains("anyOf") || s.contains("oneOf")) {
      const bool one = !s.contains("anyOf");
      const char* kw = one ? "oneOf" : "anyOf";
      STRATA_RETURN_IF_ERROR(only_beside(s, kw, {}, at));
      const json& list = s[kw];
      if (!list.is_array() || list.empty())
        return invalid_argument("'{}' at {} must be a non-empty array of schemas", kw, at);
      for (size_t i = 0; i < list.size(); ++i) {
        STRATA_ASSIGN_OR_RETURN(const int32_t b, compile(list[i], at + "/" + kw + "/" + std::to_string(i), 0));
        n.any_of.push_back(b);
      }
      if (one) one_ofs_.emplace_back(idx, at);
      out_->nodes_[idx] = std::move(n);
      return ok_status();
    }
    STRATA_ASSIGN_OR_RETURN(n.types, types(s, at));
    if (s.contains("enum") || s.contains("const")) {
      const bool is_const = s.contains("const");
      const char* kw = is_const ? "const" : "enum";
      STRATA_RETURN_IF_ERROR(only_beside(s, kw, {"type"}, at));
      const json values = is_const ? json::array({s["const"]}) : s["enum"];
      if (!values.is_array()) return invalid_argument("'enum' at {} must be an array", at);
      for (const json& v : values) {
        if (v.is_object() || v.is_array())
          return invalid_argument("'{}' at {}: only strings, numbers, booleans and null are supported, "
                                  "got {}", kw, at, v.dump());
        const bool integral = v.is_number_integer() ||
                              (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
        const uint8_t t = v.is_string() ? JsonSchema::kString : v.is_boolean() ? JsonSchema::kBoolean
                        : v.is_null() ? JsonSchema::kNull : integral ? JsonSchema::kInteger : JsonSchema::kNumber;
        if (n.types & t) n.literals.push_back(v.dump());
      }
      if (n.literals.empty())
        return invalid_argument("'{}' at {} allows no value (empty, or none of its values has the "
                                "schema's type)", kw, at);
      n.is_enum = true;
      out_->nodes_[idx] = std::move(n);
      return ok_status();
    }
    if (n.types & JsonSchema::kBoolean) n.literals = {"true", "false"};
    if (n.types & JsonSchema::kNull) n.literals.push_back("null");
    STRATA_ASSIGN_OR_RETURN(n.min_items, count(s, "minItems", 0, at));
    STRATA_ASSIGN_OR_RETURN(n.max_items, count(s, "maxItems", INT64_MAX, at));
    STRATA_ASSIGN_OR_RETURN(n.min_length, count(s, "minLength", 0, at));
    STRATA_ASSIGN_OR_RETURN(n.max_length, count(s, "maxLength", INT64_MAX, at));
    if (n.min_items > n.max_items) return invalid_argument("minItems > maxItems at {}", at);
    if (n.min_length > n.max_length) return invalid_argument("minLength > maxLength at {}", at);
    if (s.contains("items")) {
      if (s["items"].is_array())
        return invalid_argument("'items' at {} as an array (a tuple) is not supported", at);
      STRATA_ASSIGN_OR_RETURN(n.items, compile(s["items"], at + "/items", 0));
    }
    STRATA_RETURN_IF_ERROR(fill_object(n, s, at));
    out_->nodes_[idx] = std::move(n);
    return ok_status();
  }

  Status fill_object(JsonSchema::Node& n, const json& s, const std::string& at) {
    if (s.contains("properties")) {
      const json& props = s["properties"];
      if (!props.is_object()) return invalid_argument("'properties' at {} must be an object", at);
      for (auto it = props.begin(); it != props.end(); ++it) {
        STRATA_ASSIGN_OR_RETURN(const int32_t k, compile(it.value(), at + "/properties/" + pointer_token(it.key()), 0));
        n.keys.push_back(json(it.key()).dump());
        n.key_nodes.push_back(k);
      }
    }
    // Absent additionalProperties: only the declared keys when there are any (strict).
    n.additional = s.contains("properties") ? JsonSchema::kForbidden : JsonSchema::kAny;
    if (s.contains("additionalProperties")) {
      const json& a = s["additionalProperties"];
      if (a.is_boolean()) {
        n.additional = a.get<bool>() ? JsonSchema::kAny : JsonSchema::kForbidden;
      } else {
        STRATA_ASSIGN_OR_RETURN(n.additional, compile(a, at + "/additionalProperties", 0));
      }
    }
    if (!s.contains("required")) return ok_status();
    const json& req = s["required"];
    if (!req.is_array()) return invalid_argument("'required' at {} must be an array of strings", at);
    for (const json& r : req) {
      if (!r.is_string()) return invalid_argument("'required' at {} must be an array of strings", at);
      const std::string key = r.dump();
      auto it = std::find(n.keys.begin(), n.keys.end(), key);
      if (it == n.keys.end()) {
        if (n.additional == JsonSchema::kForbidden)
          return invalid_argument("required property {} at {} is not in 'properties' and no other "
                                  "property is allowed", key, at);
        n.keys.push_back(key);  // declared now, with the other keys' schema
        n.key_nodes.push_back(n.additional);
        it = n.keys.end() - 1;
      }
      const int32_t i = static_cast<int32_t>(it - n.keys.begin());
      if (std::find(n.required.begin(), n.required.end(), i) == n.required.end()) n.required.push_back(i);
    }
    return ok_status();
  }

  // The kinds of value a node admits (recursion through $ref cycles stops at the cycle).
  uint8_t kinds(int32_t idx, std::set<int32_t>& visiting) const {
    if (!visiting.insert(idx).second) return 0;
    const JsonSchema::Node& n = out_->nodes_[idx];
    uint8_t k = 0;
    if (!n.any_of.empty()) {
      for (int32_t b : n.any_of) k |= kinds(b, visiting);
    } else if (n.is_enum) {
      for (const std::string& x : n.literals) k |= literal_kind(x);
    } else {
      if (n.types & JsonSchema::kObject) k |= kKindObject;
      if (n.types & JsonSchema::kArray) k |= kKindArray;
      if (n.types & JsonSchema::kString) k |= kKindString;
      if (n.types & (JsonSchema::kNumber | JsonSchema::kInteger)) k |= kKindNumber;
      if (n.types & JsonSchema::kBoolean) k |= kKindTrue | kKindFalse;
      if (n.types & JsonSchema::kNull) k |= kKindNull;
    }
    visiting.erase(idx);
    return k;
  }

  const json& root_;
  std::shared_ptr<JsonSchema> out_;
  std::map<std::string, int32_t> refs_;
  std::vector<std::pair<int32_t, std::string>> one_ofs_;
};

StatusOr<std::shared_ptr<const JsonSchema>> JsonSchema::compile(const json& schema) {
  return JsonSchemaCompiler(schema).run();
}

}  // namespace strata
