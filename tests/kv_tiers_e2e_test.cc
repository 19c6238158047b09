// Tiers below the working pool, end to end through real `strata serve` processes:
//   * restart persistence: a server with --kv-cache-dir answers a set of prompts (lengths
//     around every unit boundary: unit*k - 1, unit*k, unit*k + 1), is stopped, and a new
//     server on the same directory answers them again from the disk tier -- cached_tokens is
//     the whole units below each prompt's last token and the token ids and logprobs are
//     bit-identical to the cold answers -- for Llama (stories260K), V4.1 and V4;
//   * corrupt objects: every stored file damaged between the runs is rejected (counted in
//     /metrics), the prompts are recomputed, the answers are still identical;
//   * a shared pool: two servers on one real redis-server (started here) hit each other's
//     prefixes, bit-identically;
//   * bad tier flags are refused at startup with a clear message.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "base/check.h"
#include "exec/runner_factory.h"
#include "pd_process.h"
#include "runner_fixtures.h"
#include "serve/test_http_client.h"
#include "tiers/redis_test_server.h"

namespace strata {
namespace {

using Json = nlohmann::json;
using testing::StrataProcess;
using testing::model_dir;
using testing::random_prompt;
namespace fs = std::filesystem;

struct Reply {
  int status = 0;
  std::vector<int32_t> ids;
  std::string logprobs;
  int64_t cached = -1;
  std::string body;
};

Reply complete(int port, const std::vector<int32_t>& prompt) {
  const Json j = {{"prompt", prompt}, {"max_tokens", 6}, {"temperature", 0}, {"logprobs", 3},
                  {"return_token_ids", true}, {"ignore_eos", true}};
  const testing::HttpReply h = testing::http_post(port, "/v1/completions", j.dump());
  Reply r;
  r.status = h.status;
  r.body = h.body;
  if (h.status != 200) return r;
  const Json b = Json::parse(h.body);
  for (int32_t t : b["choices"][0]["token_ids"]) r.ids.push_back(t);
  r.logprobs = b["choices"][0]["logprobs"].dump();
  r.cached = b["usage"]["prompt_tokens_details"].value("cached_tokens", int64_t{-1});
  return r;
}

double metric_sum(int port, const std::string& name) {
  const std::string text = testing::http_get(port, "/metrics").body;
  double sum = 0;
  size_t pos = 0;
  while ((pos = text.find("\n" + name + "{", pos)) != std::string::npos) {
    const size_t eol = text.find('\n', pos + 1);
    const std::string line = text.substr(pos + 1, eol - pos - 1);
    sum += std::stod(line.substr(line.rfind(' ') + 1));
    pos = eol;
  }
  return sum;
}

struct Model {
  int64_t unit = 0;
  int32_t vocab = 0;
};

Model model_facts(const std::string& name) {
  RunnerOptions ro;
  ro.threads = 1;
  auto r = make_model_runner(model_dir(name), ro);
  STRATA_CHECK_MSG(r.ok(), "{}", r.status().to_string());
  return {(*r)->prefix_alignment(), (*r)->info().vocab_size};
}

std::unique_ptr<StrataProcess> serve(const std::string& model, const std::string& log,
                                     std::vector<std::string> extra) {
  std::vector<std::string> a = {"serve", "--model", model_dir(model), "--port", "0",
                                "--threads", "1", "--disable-log-requests"};
  a.insert(a.end(), extra.begin(), extra.end());
  return StrataProcess::start(a, log);
}

struct TempDir {
  explicit TempDir(const std::string& tag)
      : path((fs::temp_directory_path() / fmt::format("strata-kvtiers-{}-{}", ::getpid(), tag))
                 .string()) {
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string path;
};

// Prompt lengths around the first units, within a 512-token context with room for 6 tokens.
std::vector<int64_t> lengths_around_units(int64_t unit) {
  std::vector<int64_t> out;
  for (int64_t k = 1; k <= 3; ++k)
    for (int64_t d : {-1, 0, 1})
      if (unit * k + d + 6 <= 512 && unit * k + d > 1) out.push_back(unit * k + d);
  return out;
}

void restart_persistence(const std::string& name, bool corrupt) {
  const Model m = model_facts(name);
  ASSERT_GT(m.unit, 0);
  TempDir dir(name + (corrupt ? "-corrupt" : ""));
  const std::vector<std::string> flags = {"--kv-cache-dir", dir.path, "--host-cache-bytes",
                                          "1MiB"};
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t len : lengths_around_units(m.unit))
    prompts.push_back(random_prompt(len, static_cast<uint32_t>(len * 31 + 7), m.vocab));
  std::vector<Reply> cold;
  {
    auto s = serve(name, name + "-cold", flags);
    ASSERT_TRUE(s);
    for (const auto& p : prompts) {
      cold.push_back(complete(s->port(), p));
      ASSERT_EQ(cold.back().status, 200) << cold.back().body;
      EXPECT_EQ(cold.back().cached, 0);  // distinct random prompts: nothing to share
    }
  }  // SIGTERM: the server shuts down, flushing its host tier to the directory
  int64_t files = 0;
  for (const auto& de : fs::directory_iterator(dir.path)) {
    if (de.path().extension() != ".unit") continue;
    ++files;
    if (corrupt) {  // one flipped byte in the middle of every object
      std::fstream f(de.path(), std::ios::in | std::ios::out | std::ios::binary);
      const auto size = static_cast<std::streamoff>(fs::file_size(de.path()));
      f.seekg(size / 2);
      char c = 0;
      f.read(&c, 1);
      c ^= 0x10;
      f.seekp(size / 2);
      f.write(&c, 1);
    }
  }
  int64_t want_units = 0;
  // Positions computed per request: the prompt and 5 of the 6 generated tokens (the last
  // one is never fed back).
  for (const auto& p : prompts) want_units += (static_cast<int64_t>(p.size()) + 5) / m.unit;
  EXPECT_EQ(files, want_units) << "every whole unit of every request is on disk";
  auto s = serve(name, name + "-warm", flags);
  ASSERT_TRUE(s);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const Reply r = complete(s->port(), prompts[i]);
    ASSERT_EQ(r.status, 200) << r.body;
    const int64_t len = static_cast<int64_t>(prompts[i].size());
    EXPECT_EQ(r.cached, corrupt ? 0 : ((len - 1) / m.unit) * m.unit) << name << " len " << len;
    EXPECT_EQ(r.ids, cold[i].ids) << name << " len " << len;
    EXPECT_EQ(r.logprobs, cold[i].logprobs) << name << " len " << len;
  }
  if (corrupt) {
    EXPECT_GT(metric_sum(s->port(), "strata:kv_tier_rejected_total"), 0);
  } else {
    EXPECT_GT(metric_sum(s->port(), "strata:kv_tier_hits_total"), 0);
    EXPECT_EQ(metric_sum(s->port(), "strata:kv_tier_rejected_total"), 0);
    // The cost model measured at startup: loading a unit from host or disk beats recomputing
    // it on these models, so both tiers store (1 each); the measured times are exported.
    EXPECT_EQ(metric_sum(s->port(), "strata:kv_tier_store_decision"), 2);
    EXPECT_GT(metric_sum(s->port(), "strata:prefix_unit_recompute_seconds"), 0);
    // Every load is in the latency histogram (the +Inf bucket counts them all).
    const std::string m = testing::http_get(s->port(), "/metrics").body;
    EXPECT_NE(m.find("strata:kv_tier_load_seconds_bucket{model_name="), std::string::npos);
    EXPECT_EQ(metric_sum(s->port(), "strata:kv_tier_load_seconds_count"),
              metric_sum(s->port(), "strata:kv_tier_hits_total"));  // one timed load per hit
  }
}

TEST(KvTiersE2e, RestartHitsTheDiskTierLlama) { restart_persistence("stories260K", false); }
TEST(KvTiersE2e, RestartHitsTheDiskTierV41) { restart_persistence("deepseek-v41-tiny", false); }
TEST(KvTiersE2e, RestartHitsTheDiskTierV4) { restart_persistence("deepseek-v4flash-tiny", false); }
TEST(KvTiersE2e, CorruptObjectsAreRecomputedV41) { restart_persistence("deepseek-v41-tiny", true); }

TEST(KvTiersE2e, TwoServersShareARedisPool) {
  if (RedisTestServer::binary().empty()) GTEST_SKIP() << "redis-server not installed";
  RedisTestServer redis;
  ASSERT_TRUE(redis.ready());
  const std::string name = "deepseek-v41-tiny";
  const Model m = model_facts(name);
  auto a = serve(name, "pool-a", {"--kv-pool", redis.url()});
  auto b = serve(name, "pool-b", {"--kv-pool", redis.url()});
  ASSERT_TRUE(a && b);
  for (int64_t len : {m.unit + 1, 2 * m.unit, 3 * m.unit + 1}) {
    const auto p = random_prompt(len, static_cast<uint32_t>(len), m.vocab);
    const Reply ra = complete(a->port(), p);
    ASSERT_EQ(ra.status, 200) << ra.body;
    EXPECT_EQ(ra.cached, 0);
    const Reply rb = complete(b->port(), p);
    ASSERT_EQ(rb.status, 200) << rb.body;
    EXPECT_EQ(rb.cached, ((len - 1) / m.unit) * m.unit) << "len " << len;
    EXPECT_EQ(rb.ids, ra.ids) << "len " << len;
    EXPECT_EQ(rb.logprobs, ra.logprobs) << "len " << len;
  }
  EXPECT_GT(metric_sum(b->port(), "strata:kv_tier_hits_total"), 0);
  EXPECT_GT(metric_sum(a->port(), "strata:kv_tier_stores_total"), 0);
}

// Engram tables read from disk on demand (a tiny hot-row cache: rows are evicted and read
// again) answer exactly as the default placement; the counters are on /metrics.
TEST(KvTiersE2e, EngramDiskPlacementAnswersIdentically) {
  const std::string name = "deepseek-v41-tiny";
  const Model m = model_facts(name);
  auto a = serve(name, "engram-mmap", {});
  auto b = serve(name, "engram-disk", {"--engram-placement", "disk", "--engram-cache-bytes", "2KiB"});
  ASSERT_TRUE(a && b);
  for (int64_t len : {5, 40, 150}) {
    const auto p = random_prompt(len, static_cast<uint32_t>(len + 1000), m.vocab);
    const Reply ra = complete(a->port(), p);
    const Reply rb = complete(b->port(), p);
    ASSERT_EQ(ra.status, 200) << ra.body;
    ASSERT_EQ(rb.status, 200) << rb.body;
    EXPECT_EQ(rb.ids, ra.ids) << "len " << len;
    EXPECT_EQ(rb.logprobs, ra.logprobs) << "len " << len;
  }
  const double lookups = metric_sum(b->port(), "strata:engram_row_lookups_total");
  EXPECT_GT(lookups, 0);
  EXPECT_EQ(metric_sum(b->port(), "strata:engram_row_hits_total") +
                metric_sum(b->port(), "strata:engram_row_misses_total"),
            lookups);
  EXPECT_GT(metric_sum(b->port(), "strata:engram_read_bytes_total"), 0);
  EXPECT_LE(metric_sum(b->port(), "strata:engram_cache_bytes"), 2048 + 64);
}

// Restore policies in the response: a `replay` hit says how many positions it recomputed and
// that it is approximate; a `replay-exact` hit of 128 tokens replays them all from 0 (exact);
// a `stored` hit says neither. /metrics counts both.
TEST(KvTiersE2e, ReplayedPrefixIsMarkedInTheResponse) {
  const std::string name = "deepseek-v41-tiny";
  const auto p = random_prompt(150, 4242, 512);
  struct Want {
    const char* policy;
    int64_t replayed;  // -1: absent
    bool approximate;
  };
  for (const Want& w : {Want{"replay", 16, true}, Want{"replay-exact", 128, false},
                        Want{"stored", -1, false}}) {
    auto s = serve(name, std::string("restore-") + w.policy, {"--prefix-restore", w.policy});
    ASSERT_TRUE(s);
    const Json j = {{"prompt", p}, {"max_tokens", 2}, {"temperature", 0}};
    ASSERT_EQ(testing::http_post(s->port(), "/v1/completions", j.dump()).status, 200);
    const testing::HttpReply h = testing::http_post(s->port(), "/v1/completions", j.dump());
    ASSERT_EQ(h.status, 200) << h.body;
    const Json d = Json::parse(h.body)["usage"]["prompt_tokens_details"];
    EXPECT_EQ(d.value("cached_tokens", int64_t{-1}), 128) << w.policy << " " << d.dump();
    EXPECT_EQ(d.value("replayed_tokens", int64_t{-1}), w.replayed) << w.policy << " " << d.dump();
    EXPECT_EQ(d.value("approximate", false), w.approximate) << w.policy << " " << d.dump();
    EXPECT_EQ(metric_sum(s->port(), "strata:prefix_replayed_tokens_total"),
              w.replayed > 0 ? w.replayed : 0) << w.policy;
    EXPECT_EQ(metric_sum(s->port(), "strata:prefix_approximate_restores_total"),
              w.approximate ? 1 : 0) << w.policy;
  }
}

TEST(KvTiersE2e, BadTierFlagsAreRefused) {
  std::string out;
  const std::string m = " --model " + model_dir("stories260K") + " --port 0";
  EXPECT_EQ(tools::run_strata("serve" + m + " --host-cache-bytes lots", &out, true), 2);
  EXPECT_NE(out.find("not a byte size"), std::string::npos) << out;
  EXPECT_EQ(tools::run_strata("serve" + m + " --disk-cache-bytes 1GiB", &out, true), 2);
  EXPECT_NE(out.find("--disk-cache-bytes needs --kv-cache-dir"), std::string::npos) << out;
  EXPECT_EQ(tools::run_strata("serve" + m + " --engram-cache-bytes 1GiB", &out, true), 2);
  EXPECT_NE(out.find("--engram-cache-bytes needs --engram-placement disk"), std::string::npos)
      << out;
  // A disk budget below one unit object is allowed but said: it would store nothing.
  const std::string dir = "/tmp/strata-tiny-budget-" + std::to_string(::getpid());
  EXPECT_EQ(tools::run_strata("generate -m " + model_dir("stories260K") +
                                  " --prompt-ids 1,2,3 -n 2 --kv-cache-dir " + dir +
                                  " --disk-cache-bytes 100",
                              &out, true),
            0);
  EXPECT_NE(out.find("disk tier: its budget of 100 bytes is below one cached unit"),
            std::string::npos) << out;
  std::filesystem::remove_all(dir);
  EXPECT_EQ(tools::run_strata("serve" + m + " --kv-pool redis://127.0.0.1:1", &out, true), 1);
  EXPECT_NE(out.find("cannot connect"), std::string::npos) << out;
  EXPECT_EQ(tools::run_strata("serve" + m + " --kv-pool memcached://x:1", &out, true), 1);
  EXPECT_NE(out.find("expected redis://HOST:PORT"), std::string::npos) << out;
}

}  // namespace
}  // namespace strata
