// Issue 24 items 1-2: every field of the embedded models' config.json replaced by a value of
// each other JSON type (number, string, null, bool, array, object) must give a clear error
// or a valid config from the parsers every command uses -- never an exception; and token ids
// a tokenizer.json cannot warrant (2^31-1, 2^40, negative, non-integer) are a DataLoss error
// naming the token, not a multi-GB allocation.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "model/deepseek_config.h"
#include "model/llama_config.h"
#include "model/tokenizer.h"

namespace strata {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

std::string models() {
  const char* e = std::getenv("STRATA_SOURCE_DIR");
  return std::string(e ? e : STRATA_SOURCE_DIR) + "/models/";
}

json read_json(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return json::parse(ss.str());
}

TEST(ConfigTypes, EveryFieldEveryTypeIsAnErrorOrValid) {
  const std::vector<json> values = {json(7), json(-1), json(2.5), json("x"), json(nullptr),
                                    json(true), json::array({1, "a"}), json::object({{"k", 1}})};
  int parsed = 0, refused = 0;
  for (const char* m : {"stories260K", "deepseek-v41-tiny", "deepseek-v4flash-tiny"}) {
    const json base = read_json(models() + m + "/config.json");
    for (auto it = base.begin(); it != base.end(); ++it) {
      for (const json& v : values) {
        json mutated = base;
        mutated[it.key()] = v;
        const std::string text = mutated.dump();
        SCOPED_TRACE(std::string(m) + " " + it.key() + "=" + v.dump());
        EXPECT_NO_THROW({
          (void)looks_like_deepseek_config(text);
          auto d = parse_deepseek_config_json(text);
          auto l = parse_llama_config_json(text);
          (d.ok() ? parsed : refused)++;
          if (!d.ok()) {
            EXPECT_FALSE(d.status().message().empty());
          }
          (void)l;
        });
      }
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(parsed, 0);
  // The one the fuzzer found: a non-string model_type names the field.
  json c = read_json(models() + "deepseek-v41-tiny/config.json");
  c["model_type"] = 12;
  auto d = parse_deepseek_config_json(c.dump());
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("model_type"), std::string::npos) << d.status().message();
}

TEST(TokenizerIds, IdsBeyondTheFileAreDataLoss) {
  const json base = read_json(models() + "deepseek-v41-tiny/tokenizer.json");
  const fs::path dir = fs::temp_directory_path() / ("strata-tokids-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string first = base["model"]["vocab"].begin().key();
  for (const json& bad : {json(2147483647), json(int64_t{1} << 40), json(-3), json(1.5), json("7")}) {
    SCOPED_TRACE(bad.dump());
    json t = base;
    t["model"]["vocab"][first] = bad;
    const std::string path = (dir / "tokenizer.json").string();
    std::ofstream(path) << t.dump();
    auto tok = load_tokenizer(path);
    ASSERT_FALSE(tok.ok());
    EXPECT_NE(tok.status().message().find(first), std::string::npos) << tok.status().message();
  }
  json t = base;
  t["added_tokens"] = json::array({{{"id", 100000000}, {"content", "<huge>"}, {"special", true}}});
  std::ofstream((dir / "tokenizer.json").string()) << t.dump();
  EXPECT_FALSE(load_tokenizer((dir / "tokenizer.json").string()).ok());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace strata
