#include "sched/json_constraint.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <random>
#include <string>

namespace strata {
namespace {

using json = nlohmann::json;

bool accepts(const std::string& s, bool* complete = nullptr) {
  JsonPrefix p;
  const bool ok = p.feed(s);
  if (complete) *complete = ok && p.complete();
  return ok;
}

TEST(JsonPrefix, HandWrittenCases) {
  for (const char* good : {R"({})", R"({"a":1})", R"({ "a" : [ ] , "b" : [1, -0.5e+3, true, null] } )",
                           R"({"s":"x\"\\\/\b\f\n\r\t\u00e9y","n":{"m":{}}})", R"({"a":[[],[{}]]})",
                           R"({"z":0,"e":1E9,"f":-12.75})"}) {
    bool done = false;
    EXPECT_TRUE(accepts(good, &done)) << good;
    EXPECT_TRUE(done) << good;
    EXPECT_TRUE(json::accept(good)) << good;  // the reference agrees
  }
  for (const char* bad : {"[1]", "\"x\"", "1", R"({"a"})", R"({"a":01})", R"({"a":1,})",
                          R"({,})", R"({"a":[1,]})", R"({"a":tru})", R"({"a":"\x"})",
                          R"({"a":"\u12G4"})", "{\"a\":\"\x01\"}", R"({"a":1}x)", R"({a:1})",
                          R"({"a":-})", R"({"a":1.})", R"({"a":1e})", R"({"a":[}])"}) {
    bool done = false;
    const bool ok = accepts(bad, &done);
    EXPECT_FALSE(ok && done) << bad;
    EXPECT_FALSE(json::accept(bad) && json::parse(bad).is_object() && ok) << bad;
  }
  // Prefixes are accepted without being complete.
  bool done = true;
  EXPECT_TRUE(accepts(R"({"key": [1, 2, {"x": "ab)", &done));
  EXPECT_FALSE(done);
}

json random_value(std::mt19937_64& rng, int depth) {
  switch (depth > 3 ? rng() % 5 : rng() % 7) {
    case 0: return nullptr;
    case 1: return rng() % 2 == 0;
    case 2: return static_cast<int64_t>(rng() % 2000) - 1000;
    case 3: return std::ldexp(static_cast<double>(rng() % 100000), -static_cast<int>(rng() % 20));
    case 4: {
      std::string s;
      static const char* const kPieces[] = {"a", "b", "\"", "\\", "\n", "\t", "\xc3\xa9",
                                            " ", "{", "}", "[", "]", ":", ","};
      for (int i = 0, n = static_cast<int>(rng() % 6); i < n; ++i) s += kPieces[rng() % 14];
      return s;
    }
    case 5: {
      json a = json::array();
      for (int i = 0, n = static_cast<int>(rng() % 4); i < n; ++i) a.push_back(random_value(rng, depth + 1));
      return a;
    }
    default: {
      json o = json::object();
      for (int i = 0, n = static_cast<int>(rng() % 4); i < n; ++i)
        o["k" + std::to_string(rng() % 10)] = random_value(rng, depth + 1);
      return o;
    }
  }
}

// Every prefix of a valid object (nlohmann's dump) is accepted and the whole completes.
TEST(JsonPrefix, EveryPrefixOfValidObjectsIsAccepted) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 2000; ++i) {
    json o = json::object();
    for (int k = 0, n = static_cast<int>(rng() % 5); k < n; ++k)
      o["f" + std::to_string(k)] = random_value(rng, 1);
    std::string s = o.dump();
    if (rng() % 2) {  // a space after every ':' and ',' outside strings (<= kMaxSpaces)
      std::string spaced;
      bool in_string = false, escaped = false;
      for (char c : s) {
        spaced += c;
        if (in_string) {
          if (escaped) escaped = false;
          else if (c == '\\') escaped = true;
          else if (c == '"') in_string = false;
        } else if (c == '"') {
          in_string = true;
        } else if (c == ':' || c == ',') {
          spaced += ' ';
        }
      }
      s = spaced;
    }
    JsonPrefix p;
    for (size_t j = 0; j < s.size(); ++j) {
      ASSERT_TRUE(p.feed(s[j])) << s << " at " << j;
      ASSERT_EQ(p.complete(), j + 1 == s.size()) << s << " at " << j;
    }
  }
}

// Soundness against the reference parser: random byte strings the checker completes are
// JSON objects by nlohmann's parser.
TEST(JsonPrefix, CompletedTextsAreObjects) {
  std::mt19937_64 rng(11);
  const std::string alphabet = "{}[]\":,-+.0123456789eEtrufalsn \\u/abcx";
  int completed = 0;
  for (int i = 0; i < 200000; ++i) {
    std::string s = "{";
    JsonPrefix p;
    ASSERT_TRUE(p.feed('{'));
    for (int j = 0; j < 24 && !p.complete(); ++j) {
      // pick a byte the checker accepts (retry a few times), else stop
      bool moved = false;
      for (int t = 0; t < 8 && !moved; ++t) {
        const char c = alphabet[rng() % alphabet.size()];
        JsonPrefix q = p;
        if (q.feed(c)) {
          p = q;
          s += c;
          moved = true;
        }
      }
      if (!moved) break;
    }
    if (p.complete()) {
      ++completed;
      ASSERT_TRUE(json::accept(s)) << s;
      ASSERT_TRUE(json::parse(s).is_object()) << s;
    }
  }
  EXPECT_GT(completed, 100);
}

TEST(JsonPrefix, BoundsOnDepthAndWhitespace) {
  JsonPrefix p;
  EXPECT_TRUE(p.feed(std::string("{\"a\":") + std::string(JsonPrefix::kMaxDepth - 1, '[')));
  EXPECT_FALSE(p.feed('['));
  JsonPrefix w;
  EXPECT_TRUE(w.feed("{" + std::string(JsonPrefix::kMaxSpaces, ' ')));
  EXPECT_FALSE(w.feed(' '));
  JsonPrefix lead;
  EXPECT_FALSE(lead.feed(' '));  // nothing before the object
}

// The token mask: tokens that would break the JSON are -inf; the stop id only at the end.
TEST(JsonTokenMask, MasksAndAdvances) {
  auto bytes = std::make_shared<const std::vector<std::string>>(
      std::vector<std::string>{"", "{", "}", "\"a\"", ":", "1", "x", "{\"", "a\":1}"});
  JsonTokenMask m(bytes, {0});
  std::vector<float> l(9, 0.0f);
  m.apply(l);
  for (int t = 0; t < 9; ++t) EXPECT_EQ(std::isinf(l[t]), !(t == 1 || t == 7)) << t;
  m.accept(7);  // {"
  l.assign(9, 0.0f);
  m.apply(l);
  EXPECT_FALSE(std::isinf(l[8]));  // a":1}
  EXPECT_FALSE(std::isinf(l[6]));  // x (inside the key)
  EXPECT_TRUE(std::isinf(l[0]));
  m.accept(8);
  EXPECT_TRUE(m.complete());
  l.assign(9, 0.0f);
  m.apply(l);
  for (int t = 0; t < 9; ++t) EXPECT_EQ(std::isinf(l[t]), t != 0) << t;
}

}  // namespace
}  // namespace strata
