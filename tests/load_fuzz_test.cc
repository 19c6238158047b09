// Seeded fuzz corpus of the embedded models' files (issue 24 item 3): each variant mutates one
// file of a copy of the model (safetensors header or data bytes, truncation, a config or
// tokenizer JSON value of another type or removed, byte flips in tokenizer.bin) and runs
// `strata inspect` and `strata generate` on it. Every run must exit with 0, 1 or 2 -- never
// a crash, an abort or a hang -- and a run that exits 0 must print finite output. Bounded:
// a fixed number of variants per model, each run under a time limit.
// Also: weights holding NaN/Inf are refused at load naming the tensor, and inspect says so.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "runner_fixtures.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::model_dir;

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
void write_file(const fs::path& p, const std::string& s) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << s;
}

// Every value node of a JSON document, as JSON pointers (the root excluded).
void pointers(const json& j, const std::string& at, std::vector<std::string>* out) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      std::string key = it.key();
      std::string esc;
      for (char c : key) esc += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
      out->push_back(at + "/" + esc);
      pointers(it.value(), at + "/" + esc, out);
    }
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size() && i < 64; ++i) {
      out->push_back(at + "/" + std::to_string(i));
      pointers(j[i], at + "/" + std::to_string(i), out);
    }
  }
}

struct Variant {
  std::string what;  // for the failure message
};

// Mutates `file` in `dir` with the seeded generator; describes what it did.
Variant mutate(const fs::path& dir, const std::string& file, std::mt19937_64& rng) {
  const fs::path p = dir / file;
  std::string s = read_file(p);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % std::max<size_t>(n, 1)); };
  const bool is_json = file.size() > 5 && file.substr(file.size() - 5) == ".json";
  if (is_json && rng() % 4 != 0) {
    json j = json::parse(s, nullptr, false);
    std::vector<std::string> ptrs;
    pointers(j, "", &ptrs);
    if (!ptrs.empty()) {
      const std::string at = ptrs[pick(ptrs.size())];
      const json values[] = {nullptr, -1, 0, 1, int64_t{1} << 40, 2147483647, -2147483648LL,
                             1e308, 0.5, "x", "", json::array(), json::array({1, 2}),
                             json::object(), true, false};
      const size_t v = pick(std::size(values) + 1);
      json::json_pointer jp(at);
      if (v == std::size(values)) {
        j[jp.parent_pointer()].is_object() ? (void)j[jp.parent_pointer()].erase(jp.back())
                                           : (void)0;
        write_file(p, j.dump());
        return {file + ": removed " + at};
      }
      j[jp] = values[v];
      write_file(p, j.dump());
      return {file + ": " + at + " = " + values[v].dump()};
    }
  }
  const int kind = static_cast<int>(rng() % 3);
  if (kind == 0 && !s.empty()) {  // truncate
    const size_t n = pick(s.size());
    s.resize(n);
    write_file(p, s);
    return {file + ": truncated to " + std::to_string(n)};
  }
  // byte flips: in the safetensors header (first 8 + header bytes) or anywhere
  size_t lo = 0, hi = s.size();
  if (file == "model.safetensors" && s.size() >= 8 && kind == 1) {
    uint64_t h = 0;
    std::memcpy(&h, s.data(), 8);
    hi = static_cast<size_t>(std::min<uint64_t>(8 + h, s.size()));
  }
  std::string what = file + ": bytes";
  const int n = 1 + static_cast<int>(rng() % 8);
  for (int i = 0; i < n && hi > lo; ++i) {
    const size_t at = lo + pick(hi - lo);
    s[at] = static_cast<char>(rng() & 0xff);
    what += " " + std::to_string(at);
  }
  write_file(p, s);
  return {what};
}

// Copies models/<name> into a fresh temporary directory.
fs::path fresh_copy(const std::string& name, const std::string& tag) {
  const fs::path d = fs::temp_directory_path() /
                     ("strata-fuzz-" + std::to_string(getpid()) + "-" + name + "-" + tag);
  fs::remove_all(d);
  fs::copy(model_dir(name), d);
  return d;
}

// STRATA_FUZZ_VARIANTS / STRATA_FUZZ_SEED (optional) widen a local run: more variants, other
// seeds. CI runs the defaults.
void fuzz_model(const std::string& name, const std::vector<std::string>& files,
                const std::string& generate_args, int variants, uint64_t seed) {
  if (const char* e = std::getenv("STRATA_FUZZ_VARIANTS")) variants = std::atoi(e);
  if (const char* e = std::getenv("STRATA_FUZZ_SEED")) seed ^= std::strtoull(e, nullptr, 0);
  std::mt19937_64 rng(seed);
  int accepted = 0;
  for (int v = 0; v < variants; ++v) {
    const fs::path d = fresh_copy(name, std::to_string(v));
    const Variant m = mutate(d, files[rng() % files.size()], rng);
    SCOPED_TRACE(name + " variant " + std::to_string(v) + ": " + m.what);
    std::string out;
    const int inspect = tools::run_strata("inspect " + d.string(), &out, false, 60);
    EXPECT_TRUE(inspect == 0 || inspect == 1 || inspect == 2) << "inspect exit " << inspect;
    out.clear();
    const int gen = tools::run_strata(
        "generate --model " + d.string() + " --threads 1 -n 4 -t 0 " + generate_args, &out, false,
        60);
    EXPECT_TRUE(gen == 0 || gen == 1 || gen == 2) << "generate exit " << gen;
    if (gen == 0) {
      ++accepted;
      EXPECT_EQ(out.find("nan"), std::string::npos) << out;
    }
    fs::remove_all(d);
  }
  // The corpus reaches past the loaders' first checks: some variants still load and run.
  fprintf(stderr, "%s: %d of %d variants accepted\n", name.c_str(), accepted, variants);
}

// Every run below uses STRATA_HUGE_PAGES=0 (no re-exec) and a time limit per command.
class LoadFuzz : public ::testing::Test {
 protected:
  void SetUp() override { setenv("STRATA_HUGE_PAGES", "0", 1); }
};

TEST_F(LoadFuzz, Stories260KNeverCrashes) {
  fuzz_model("stories260K", {"model.safetensors", "config.json", "tokenizer.bin"},
             "--prompt 'Once upon a time'", 60, 0x5eed0001);
}
TEST_F(LoadFuzz, DeepseekV41TinyNeverCrashes) {
  fuzz_model("deepseek-v41-tiny", {"model.safetensors", "config.json", "tokenizer.json",
                                   "inference-config.json"},
             "--prompt-ids 5,6,7", 40, 0x5eed0002);
}
TEST_F(LoadFuzz, DeepseekV4TinyNeverCrashes) {
  fuzz_model("deepseek-v4flash-tiny", {"model.safetensors", "config.json", "inference-config.json"},
             "--prompt-ids 5,6,7", 40, 0x5eed0003);
}

// A NaN in one weight: generate refuses to load naming the tensor; inspect reports it.
TEST_F(LoadFuzz, NonFiniteWeightsAreRefusedAndReported) {
  const fs::path d = fresh_copy("stories260K", "nan");
  std::string s = read_file(d / "model.safetensors");
  uint64_t h = 0;
  std::memcpy(&h, s.data(), 8);
  const json header = json::parse(s.substr(8, h));
  const std::string name = "model.layers.0.self_attn.q_proj.weight";
  ASSERT_TRUE(header.contains(name)) << header.dump().substr(0, 300);
  ASSERT_EQ(header[name]["dtype"], "F32");
  const size_t at = 8 + h + header[name]["data_offsets"][0].get<size_t>() + 4 * 7;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(&s[at], &nan, 4);
  write_file(d / "model.safetensors", s);
  std::string out;
  EXPECT_EQ(tools::run_strata("generate --model " + d.string() + " -n 2 --prompt x", &out, true), 1);
  EXPECT_NE(out.find(name), std::string::npos) << out;
  EXPECT_NE(out.find("NaN/Inf"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(tools::run_strata("inspect " + d.string(), &out, true), 1);
  EXPECT_NE(out.find("non-finite: tensor '" + name + "' holds 1 NaN/Inf"), std::string::npos) << out;
  fs::remove_all(d);
}

}  // namespace
}  // namespace strata
