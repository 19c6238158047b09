// Issue 23 end to end: prefill servers, a decode server and the router run as separate
// `strata` processes (tests/pd_process.h), talking HTTP and ZeroMQ over tcp:// and ipc://.
//   * MatchesColocated: for Llama (stories260K), V4.1 tiny and V4 tiny, prompts of length
//     1, 2, 3, every ratio +-1, the window 16 +-1, the unit +-1 and 2 units + 1 through the
//     router (2 prefill servers, one on tcp, one on ipc, round-robin; streaming and not) give
//     32 greedy tokens and top-5 logprobs equal (==, JSON round-trip floats) to a colocated
//     server's; the bytes the decode server counts per state kind, and the prefill servers
//     send, equal handoff_bytes() from the decode server's own prefix hit (the formula
//     `strata inspect --handoff` prints from 0); chat completions match too; a client that
//     hangs up mid-stream frees its request; no lease and no running request is left.
//   * ContractMismatch: every contract field changed on the decode server alone (the test
//     hook --kv-transfer-contract-override, and a real edit of config.json) fails the
//     handshake naming the field (409), the router answers 503 naming it, and no state byte
//     moves.
//   * FaultMatrix: the fault transport (drop, corrupt, truncate, duplicate, reorder, delay
//     past the lease, handshake) under both --kv-load-failure-policy values: fail gives
//     non-2xx errors without content, recompute gives the colocated output, and requests
//     without a fault succeed on the same pair; a prefill server killed between its answer
//     and the fetch gives an error (fail) or the colocated output (recompute); every lease is
//     freed (by ack or expiry) and no request is left running.
//   * Soak: 64 concurrent mixed-length requests through 2P1D routers with 5 % random faults
//     (recompute and fail deployments): each response equals the colocated one or is an
//     error; nothing leaks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "disagg/contract.h"
#include "exec/runner_factory.h"
#include "pd_process.h"
#include "runner_fixtures.h"
#include "serve/test_http_client.h"
#include "state/handoff.h"

namespace strata {
namespace {

using Json = nlohmann::json;
using testing::StrataProcess;

using testing::model_dir;

std::unique_ptr<StrataProcess> serve(const std::string& model, const std::string& name,
                                     std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {"serve", "--model", model_dir(model), "--port", "0", "--threads", "1"};
  a.insert(a.end(), extra.begin(), extra.end());
  return StrataProcess::start(a, name);
}

std::unique_ptr<StrataProcess> router(const std::vector<const StrataProcess*>& p,
                                      const std::vector<const StrataProcess*>& d,
                                      const std::string& name) {
  std::string ps, ds;
  for (auto* x : p) ps += (ps.empty() ? "" : ",") + x->url();
  for (auto* x : d) ds += (ds.empty() ? "" : ",") + x->url();
  return StrataProcess::start({"router", "--prefill", ps, "--decode", ds, "--port", "0"}, name);
}

struct Reply {
  int status = 0;
  std::vector<int32_t> ids;
  std::string logprobs;  // the choices' logprobs, concatenated JSON
  std::string body;
  int64_t cached = -1;  // usage.prompt_tokens_details.cached_tokens
};

Json request(const std::vector<int32_t>& prompt, int max_tokens, bool stream) {
  Json j = {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0},
            {"logprobs", 5},    {"return_token_ids", true}, {"ignore_eos", true},
            {"stream", stream}};
  if (stream) j["stream_options"] = {{"include_usage", true}};
  return j;
}

Reply post(int port, const Json& body) {
  const testing::HttpReply h = testing::http_post(port, "/v1/completions", body.dump());
  Reply r;
  r.status = h.status;
  r.body = h.body;
  if (h.status != 200) return r;
  std::vector<std::string> parts = h.data;
  if (parts.empty()) parts.push_back(h.body);
  // Per token: (logprob, top alternatives), whatever the stream's chunking.
  Json per_token = Json::array();
  for (const std::string& p : parts) {
    const Json j = Json::parse(p, nullptr, false);
    if (!j.is_discarded() && j.contains("usage") && j["usage"].is_object() &&
        j["usage"].contains("prompt_tokens_details"))
      r.cached = j["usage"]["prompt_tokens_details"].value("cached_tokens", int64_t{-1});
    if (j.is_discarded() || !j.contains("choices") || j["choices"].empty()) continue;
    const Json& c = j["choices"][0];
    if (c.contains("token_ids"))
      for (int32_t t : c["token_ids"]) r.ids.push_back(t);
    if (c.contains("logprobs") && !c["logprobs"].is_null())
      for (size_t i = 0; i < c["logprobs"]["token_logprobs"].size(); ++i)
        per_token.push_back({c["logprobs"]["token_logprobs"][i], c["logprobs"]["top_logprobs"][i]});
  }
  if (!per_token.empty()) r.logprobs = per_token.dump();
  if (r.ids.empty()) {  // keep what came (an error event of a stream) for the message
    for (const std::string& p : parts) r.body += p + "\n";
    // A stream that ends with an error event before any token is an error response (599
    // here), not content.
    if (!h.data.empty() && r.body.find("\"error\"") != std::string::npos) r.status = 599;
  }
  return r;
}

// Sum of a Prometheus metric over the lines that start with `name` (labels included in it).
double metric(int port, const std::string& name) {
  const std::string text = testing::http_get(port, "/metrics").body;
  double sum = 0;
  size_t pos = 0;
  while ((pos = text.find("\n" + name, pos)) != std::string::npos) {
    const size_t eol = text.find('\n', pos + 1);
    const std::string line = text.substr(pos + 1, eol - pos - 1);
    const size_t sp = line.rfind(' ');
    const std::string key = line.substr(0, sp);
    if (key == name || key.rfind(name + "{", 0) == 0 || name.back() == '}')
      sum += std::stod(line.substr(sp + 1));
    pos = eol;
  }
  return sum;
}

// Colocated reference replies, by prompt length.
std::vector<int32_t> prompt_of(int64_t n, uint32_t seed, int32_t vocab) {
  return testing::random_prompt(n, seed, vocab);
}

// spec_on_decode: a --speculative-config for the decode server only (prefill runs without
// it); the handed-off state must carry what its drafter reads.
void matches_colocated(const std::string& model, const std::string& spec_on_decode = "") {
  RunnerOptions ro;
  ro.threads = 1;
  auto runner = make_model_runner(model_dir(model), ro);
  ASSERT_TRUE(runner.ok());
  const StateGraph& g = *(*runner)->state_graph();
  const int64_t unit = (*runner)->prefix_alignment();
  const int64_t ctx = (*runner)->info().max_context;
  const int32_t vocab = (*runner)->info().vocab_size;

  auto col = serve(model, model + "-colocated");
  auto p1 = serve(model, model + "-p1", {"--disaggregation-mode", "prefill"});
  const std::string ipc = "ipc:///tmp/strata-test-" + std::to_string(getpid()) + "-" + model + ".ipc";
  auto p2 = serve(model, model + "-p2",
                  {"--disaggregation-mode", "prefill", "--kv-transfer-endpoint", ipc});
  std::vector<std::string> dargs = {"--disaggregation-mode", "decode"};
  if (!spec_on_decode.empty()) {
    dargs.push_back("--speculative-config");
    dargs.push_back(spec_on_decode);
  }
  auto d = serve(model, model + "-d", dargs);
  ASSERT_TRUE(col && p1 && p2 && d);
  EXPECT_EQ(p2->endpoint(), ipc);
  EXPECT_EQ(p1->endpoint().rfind("tcp://127.0.0.1:", 0), 0u) << p1->endpoint();
  auto r = router({p1.get(), p2.get()}, {d.get()}, model + "-router");
  ASSERT_TRUE(r);

  std::set<int64_t> lens = {1, 2, 3, 15, 16, 17, unit - 1, unit, unit + 1, 2 * unit + 1};
  for (int ratio : g.growth_ratios())
    for (int64_t dd : {-1, 0, 1}) lens.insert(ratio + dd);
  const std::vector<int32_t> base = prompt_of(ctx, 99, vocab);
  std::map<std::string, int64_t> want_bytes;
  int n = 0;
  int64_t total_cached = 0;
  for (int64_t T : lens) {
    if (T < 1 || T + 33 >= ctx) continue;
    SCOPED_TRACE(model + " T=" + std::to_string(T));
    const std::vector<int32_t> prompt(base.begin(), base.begin() + T);
    const bool stream = n % 3 == 2;
    const Reply want = post(col->port(), request(prompt, 32, stream));
    const Reply got = post(r->port(), request(prompt, 32, stream));
    ASSERT_EQ(want.status, 200) << want.body;
    ASSERT_EQ(got.status, 200) << got.body;
    EXPECT_EQ(got.ids.size(), 32u);
    EXPECT_EQ(got.ids, want.ids);
    EXPECT_EQ(got.logprobs, want.logprobs);
    EXPECT_FALSE(got.logprobs.empty());
    // The decode server fetched only the rows past its own prefix hit (reported as the
    // response's cached tokens).
    ASSERT_GE(got.cached, 0);
    for (const auto& [k, b] : handoff_bytes(g, T - 1, got.cached).per_kind) want_bytes[k] += b;
    total_cached += got.cached;
    ++n;
  }
  EXPECT_GE(n, 6);
  // Chat completions take the same path (the template is applied on P and D alike).
  {
    const Json chat = {{"messages", Json::array({{{"role", "user"}, {"content", "tok1 tok2 tok3"}}})},
                       {"max_tokens", 8}, {"temperature", 0}, {"return_token_ids", true},
                       {"ignore_eos", true}};
    const testing::HttpReply a = testing::http_post(col->port(), "/v1/chat/completions", chat.dump());
    const testing::HttpReply b = testing::http_post(r->port(), "/v1/chat/completions", chat.dump());
    if (a.status == 200) {  // models without a tokenizer refuse text (400) on both
      ASSERT_EQ(b.status, 200) << b.body;
      EXPECT_EQ(Json::parse(a.body)["choices"][0]["token_ids"],
                Json::parse(b.body)["choices"][0]["token_ids"]);
      const int64_t pt = Json::parse(b.body)["usage"]["prompt_tokens"];
      for (const auto& [k, bytes] : handoff_bytes(g, pt - 1, Json::parse(b.body)["usage"]
                                                  ["prompt_tokens_details"]["cached_tokens"]).per_kind)
        want_bytes[k] += bytes;
      ++n;
    } else {
      EXPECT_EQ(b.status, a.status) << b.body;
    }
  }
  // A client that hangs up mid-stream frees the request on the decode server.
  {
    const std::vector<int32_t> prompt(base.begin(), base.begin() + 9);
    const testing::HttpReply h =
        testing::http_post(r->port(), "/v1/completions", request(prompt, 200, true).dump(), 2);
    EXPECT_EQ(h.status, 200);
    for (const auto& [k, bytes] : handoff_bytes(g, 8, 0).per_kind) want_bytes[k] += bytes;
    for (int i = 0; i < 100 && metric(d->port(), "strata:num_requests_running") > 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ++n;  // one more import
  }
  EXPECT_GT(total_cached, 0) << "no request reused the decode server's prefix cache";
  // Bytes counted on both ends equal the state-graph formula, kind by kind.
  double sent_total = 0;
  for (const auto& [k, b] : want_bytes) {
    const std::string recv = "strata:kv_transfer_received_bytes_total{kind=\"" + k + "\"}";
    const std::string sent = "strata:kv_transfer_sent_bytes_total{kind=\"" + k + "\"}";
    EXPECT_EQ(metric(d->port(), recv), static_cast<double>(b)) << k;
    EXPECT_EQ(metric(p1->port(), sent) + metric(p2->port(), sent), static_cast<double>(b)) << k;
    sent_total += static_cast<double>(b);
  }
  EXPECT_GT(sent_total, 0);
  // Both prefill servers were used (round-robin), every lease was acked, nothing runs.
  EXPECT_GT(metric(p1->port(), "strata:kv_transfer_leases_total"), 0);
  EXPECT_GT(metric(p2->port(), "strata:kv_transfer_leases_total"), 0);
  EXPECT_EQ(metric(p1->port(), "strata:kv_transfer_leases_active"), 0);
  EXPECT_EQ(metric(p2->port(), "strata:kv_transfer_leases_active"), 0);
  EXPECT_EQ(metric(d->port(), "strata:kv_transfer_imports_total"), n);
  EXPECT_EQ(metric(d->port(), "strata:num_requests_running"), 0);
  if (!spec_on_decode.empty()) {
    EXPECT_GT(metric(d->port(), "strata:spec_decode_num_drafts"), 0) << "no verify on the decode side";
  }
}

TEST(PdDisagg, MatchesColocatedLlama) { matches_colocated("stories260K"); }
TEST(PdDisagg, MatchesColocatedV4TinyWithMtpOnDecode) {
  matches_colocated("deepseek-v4flash-tiny", R"({"method":"mtp","num_speculative_tokens":3})");
}
TEST(PdDisagg, MatchesColocatedV41TinyWithDsparkOnDecode) {
  matches_colocated("deepseek-v41-tiny", R"({"method":"dspark","num_speculative_tokens":3})");
}
TEST(PdDisagg, MatchesColocatedV41Tiny) { matches_colocated("deepseek-v41-tiny"); }
TEST(PdDisagg, MatchesColocatedV4Tiny) { matches_colocated("deepseek-v4flash-tiny"); }

TEST(PdDisagg, ContractMismatch) {
  const std::string model = "stories260K";
  RunnerOptions ro;
  ro.threads = 1;
  auto runner = make_model_runner(model_dir(model), ro);
  ASSERT_TRUE(runner.ok());
  auto contract = make_handoff_contract(**runner, model_dir(model));
  ASSERT_TRUE(contract.ok());
  EXPECT_GE(contract->fields.size(), 11u);
  auto p = serve(model, "cm-p", {"--disaggregation-mode", "prefill"});
  ASSERT_TRUE(p);
  const Json hs = {{"remote_endpoint", p->endpoint()}};
  int checked = 0;
  for (const auto& [field, value] : contract->fields) {
    SCOPED_TRACE(field);
    auto d = serve(model, "cm-d-" + field,
                   {"--disaggregation-mode", "decode", "--kv-transfer-contract-override",
                    field + "=changed-on-decode"});
    ASSERT_TRUE(d);
    const testing::HttpReply h = testing::http_post(d->port(), "/v1/disaggregation/handshake", hs.dump());
    EXPECT_EQ(h.status, 409) << h.body;
    EXPECT_NE(h.body.find("'" + field + "'"), std::string::npos) << h.body;
    if (checked == 0) {  // through the router: 503 naming the field, no content
      auto r = router({p.get()}, {d.get()}, "cm-router");
      ASSERT_TRUE(r);
      const Reply rep = post(r->port(), request({1, 2, 3, 4, 5}, 4, false));
      EXPECT_EQ(rep.status, 503);
      EXPECT_NE(rep.body.find("'" + field + "'"), std::string::npos) << rep.body;
      EXPECT_EQ(rep.body.find("choices"), std::string::npos);
    }
    ++checked;
  }
  // A real difference: the decode server's config.json differs by one byte.
  namespace fs = std::filesystem;
  const fs::path copy = fs::temp_directory_path() / ("strata-cm-" + std::to_string(getpid()));
  fs::remove_all(copy);
  fs::copy(model_dir(model), copy);
  { std::ofstream(copy / "config.json", std::ios::app) << " "; }
  auto d = StrataProcess::start({"serve", "--model", copy.string(), "--port", "0",
                                 "--disaggregation-mode", "decode"}, "cm-d-config");
  ASSERT_TRUE(d);
  const testing::HttpReply h = testing::http_post(d->port(), "/v1/disaggregation/handshake", hs.dump());
  EXPECT_EQ(h.status, 409);
  EXPECT_NE(h.body.find("'config_hash'"), std::string::npos) << h.body;
  d.reset();
  fs::remove_all(copy);
  // No state byte moved and nothing was leased.
  EXPECT_EQ(metric(p->port(), "strata:kv_transfer_sent_bytes_total"), 0);
  EXPECT_EQ(metric(p->port(), "strata:kv_transfer_leases_total"), 0);  // the router refused first
  EXPECT_GE(metric(p->port(), "strata:kv_transfer_sent_failures_total{reason=\"handshake\"}"),
            checked);
}

// P then D by hand (what the router does), so a test can act between the two.
Json prefill(int p_port, const std::vector<int32_t>& prompt, int max_tokens, int* status) {
  Json b = request(prompt, max_tokens, false);
  b["kv_transfer_params"] = {{"do_remote_decode", true}};
  const testing::HttpReply h = testing::http_post(p_port, "/v1/completions", b.dump());
  *status = h.status;
  if (h.status != 200) return nullptr;
  return Json::parse(h.body).at("kv_transfer_params");
}

Reply decode(int d_port, const std::vector<int32_t>& prompt, int max_tokens, const Json& kvp,
             bool stream = false) {
  Json b = request(prompt, max_tokens, stream);
  b["kv_transfer_params"] = kvp;
  return post(d_port, b);
}

TEST(PdDisagg, FaultMatrix) {
  const std::string model = "stories260K";
  auto col = serve(model, "fm-colocated");
  auto p = serve(model, "fm-p", {"--disaggregation-mode", "prefill", "--kv-transfer-lease-ms", "1500"});
  ASSERT_TRUE(col && p);
  const std::vector<int32_t> base = prompt_of(200, 7, 512);
  std::map<int64_t, Reply> want;
  auto colocated = [&](int64_t T) -> const Reply& {
    if (!want.count(T))
      want[T] = post(col->port(), request({base.begin(), base.begin() + T}, 12, false));
    return want[T];
  };
  int leased = 0;
  for (const std::string policy : {"fail", "recompute"}) {
    for (const std::string kind :
         {"drop", "corrupt", "truncate", "duplicate", "reorder", "delay", "handshake"}) {
      SCOPED_TRACE(policy + " " + kind);
      // A handshake is made once per endpoint and kept once it succeeded: its fault is
      // injected on every hello (so every request of the pair meets it).
      const bool always = kind == "handshake";
      const std::string spec = kind + (always ? ":p=1" : ":p=0.5:seed=11") +
                               (kind == "delay" ? ":delay_ms=2500" : "");
      auto d = serve(model, "fm-d-" + policy + "-" + kind,
                     {"--disaggregation-mode", "decode", "--disaggregation-transfer-backend",
                      "fault", "--kv-transfer-fault", spec, "--kv-load-failure-policy", policy,
                      "--kv-transfer-timeout-ms", "1000"});
      ASSERT_TRUE(d);
      int ok = 0, errors = 0;
      for (int i = 0; i < 6; ++i) {
        const int64_t T = 20 + 23 * i;
        const std::vector<int32_t> prompt(base.begin(), base.begin() + T);
        int ps = 0;
        const Json kvp = prefill(p->port(), prompt, 12, &ps);
        ASSERT_EQ(ps, 200);
        ++leased;
        const Reply got = decode(d->port(), prompt, 12, kvp, i % 2 == 1);
        if (got.status == 200) {
          EXPECT_EQ(got.ids, colocated(T).ids) << "a 200 must carry the colocated output";
          EXPECT_EQ(got.logprobs, colocated(T).logprobs);
          ++ok;
        } else {
          EXPECT_GE(got.status, 400);
          EXPECT_EQ(got.body.find("\"choices\""), std::string::npos) << got.body;
          EXPECT_NE(got.body.find("kv_transfer_error"), std::string::npos) << got.body;
          ++errors;
        }
      }
      const double faults = metric(d->port(), "strata:kv_transfer_received_failures_total");
      EXPECT_GT(faults, 0) << "the fault spec injected nothing";
      if (policy == "recompute") {
        EXPECT_EQ(errors, 0);
        if (!always) {
          EXPECT_GT(metric(d->port(), "strata:kv_transfer_imports_total"), 0);
        }
      } else {
        EXPECT_GT(errors, 0);
        if (!always) {
          EXPECT_GT(ok, 0) << "requests without a fault must still succeed on this pair";
        }
      }
      EXPECT_EQ(metric(d->port(), "strata:num_requests_running"), 0);
    }
  }
  // The prefill server dies between its answer and the fetch.
  for (const std::string policy : {"fail", "recompute"}) {
    auto p2 = serve(model, "fm-p2-" + policy, {"--disaggregation-mode", "prefill"});
    auto d = serve(model, "fm-dk-" + policy,
                   {"--disaggregation-mode", "decode", "--kv-load-failure-policy", policy,
                    "--kv-transfer-timeout-ms", "1000"});
    ASSERT_TRUE(p2 && d);
    const std::vector<int32_t> prompt(base.begin(), base.begin() + 77);
    int ps = 0;
    const Json kvp = prefill(p2->port(), prompt, 12, &ps);
    ASSERT_EQ(ps, 200);
    p2->stop(SIGKILL);
    const Reply got = decode(d->port(), prompt, 12, kvp);
    if (policy == "fail") {
      EXPECT_EQ(got.status, 502) << got.body;
    } else {
      ASSERT_EQ(got.status, 200) << got.body;
      EXPECT_EQ(got.ids, colocated(77).ids);
    }
  }
  // Forged, reused and malformed handles.
  {
    auto d = serve(model, "fm-dh", {"--disaggregation-mode", "decode"});
    ASSERT_TRUE(d);
    const std::vector<int32_t> prompt(base.begin(), base.begin() + 40);
    int ps = 0;
    Json kvp = prefill(p->port(), prompt, 12, &ps);
    ++leased;
    ASSERT_EQ(decode(d->port(), prompt, 12, kvp).status, 200);
    const Reply reused = decode(d->port(), prompt, 12, kvp);
    EXPECT_EQ(reused.status, 502);
    EXPECT_NE(reused.body.find("no leased state"), std::string::npos) << reused.body;
    Json forged = kvp;
    forged["remote_handle"] = "00000000000000000000dead";
    EXPECT_EQ(decode(d->port(), prompt, 12, forged).status, 502);
    kvp = prefill(p->port(), prompt, 12, &ps);
    ++leased;
    std::vector<int32_t> other = prompt;
    other[3] ^= 1;  // the decode server's prompt differs from the one prefilled
    const Reply mismatch = decode(d->port(), other, 12, kvp);
    EXPECT_EQ(mismatch.status, 502);
    EXPECT_NE(mismatch.body.find("differs"), std::string::npos) << mismatch.body;
    EXPECT_EQ(metric(d->port(), "strata:num_requests_running"), 0);
  }
  // Every lease was freed exactly once, by an ack or at expiry.
  std::this_thread::sleep_for(std::chrono::milliseconds(1800));
  EXPECT_EQ(metric(p->port(), "strata:kv_transfer_leases_active"), 0);
  EXPECT_EQ(metric(p->port(), "strata:kv_transfer_leases_total"), leased);
  EXPECT_EQ(metric(p->port(), "strata:kv_transfer_acks_total") +
                metric(p->port(), "strata:kv_transfer_leases_expired_total"),
            leased);
}

TEST(PdDisagg, Soak) {
  const std::string model = "stories260K";
  auto col = serve(model, "soak-colocated");
  auto p1 = serve(model, "soak-p1", {"--disaggregation-mode", "prefill", "--kv-transfer-lease-ms", "2000"});
  auto p2 = serve(model, "soak-p2", {"--disaggregation-mode", "prefill", "--kv-transfer-lease-ms", "2000"});
  const std::vector<std::string> faulty = {"--disaggregation-transfer-backend", "fault",
                                           "--kv-transfer-fault",
                                           "drop,corrupt,truncate,duplicate,reorder:p=0.05:seed=5",
                                           "--kv-transfer-timeout-ms", "1000"};
  auto with = [&](std::vector<std::string> a, const std::string& policy) {
    a.insert(a.begin(), {"--disaggregation-mode", "decode", "--kv-load-failure-policy", policy});
    return a;
  };
  auto dr = serve(model, "soak-d-recompute", with(faulty, "recompute"));
  auto df = serve(model, "soak-d-fail", with(faulty, "fail"));
  ASSERT_TRUE(col && p1 && p2 && dr && df);
  auto rr = router({p1.get(), p2.get()}, {dr.get()}, "soak-router-recompute");
  auto rf = router({p1.get(), p2.get()}, {df.get()}, "soak-router-fail");
  ASSERT_TRUE(rr && rf);
  const std::vector<int32_t> base = prompt_of(400, 21, 512);
  std::mt19937 rng(5);
  std::vector<int64_t> lens(64);
  for (auto& l : lens) l = std::uniform_int_distribution<int64_t>(1, 300)(rng);
  std::vector<Reply> want(64);
  for (int i = 0; i < 64; ++i)
    want[i] = post(col->port(), request({base.begin(), base.begin() + lens[i]}, 16, false));
  for (const StrataProcess* r : {rr.get(), rf.get()}) {
    std::vector<Reply> got(64);
    std::vector<std::thread> th;
    for (int i = 0; i < 64; ++i)
      th.emplace_back([&, i] {
        got[i] = post(r->port(), request({base.begin(), base.begin() + lens[i]}, 16, i % 4 == 0));
      });
    for (auto& t : th) t.join();
    int equal = 0, errors = 0;
    for (int i = 0; i < 64; ++i) {
        if (got[i].status == 200) {
        EXPECT_EQ(got[i].ids, want[i].ids) << "request " << i << ": " << got[i].body;
        EXPECT_EQ(got[i].logprobs, want[i].logprobs) << "request " << i;
        equal += got[i].ids == want[i].ids;
      } else {
        EXPECT_EQ(got[i].body.find("\"choices\""), std::string::npos);
        if (r == rr.get()) ADD_FAILURE() << "recompute deployment, request " << i << ": "
                                         << got[i].status << " " << got[i].body;
        ++errors;
      }
    }
    if (r == rr.get()) {
      EXPECT_EQ(errors, 0);
    }
    EXPECT_EQ(equal + errors, 64);
  }
  EXPECT_GT(metric(dr->port(), "strata:kv_transfer_received_failures_total") +
                metric(df->port(), "strata:kv_transfer_received_failures_total"),
            0);
  std::this_thread::sleep_for(std::chrono::milliseconds(2300));
  for (const StrataProcess* s : {p1.get(), p2.get()})
    EXPECT_EQ(metric(s->port(), "strata:kv_transfer_leases_active"), 0);
  for (const StrataProcess* s : {dr.get(), df.get()}) {
    EXPECT_EQ(metric(s->port(), "strata:num_requests_running"), 0);
    EXPECT_EQ(metric(s->port(), "strata:num_requests_waiting"), 0);
  }
}

TEST(PdDisagg, ApiKeysThroughTheRouter) {
  const std::string model = "stories260K";
  auto p = serve(model, "key-p", {"--disaggregation-mode", "prefill", "--api-key", "backend"});
  auto d = serve(model, "key-d", {"--disaggregation-mode", "decode", "--api-key", "backend"});
  ASSERT_TRUE(p && d);
  auto r = StrataProcess::start({"router", "--prefill", p->url(), "--decode", d->url(), "--port",
                                 "0", "--api-key", "front", "--backend-api-key", "backend"},
                                "key-router");
  ASSERT_TRUE(r);
  const std::string body = request({1, 2, 3, 4}, 4, false).dump();
  httplib::Client c("127.0.0.1", r->port());
  auto no = c.Post("/v1/completions", body, "application/json");
  ASSERT_TRUE(no);
  EXPECT_EQ(no->status, 401);
  auto yes = c.Post("/v1/completions", {{"Authorization", "Bearer front"}}, body, "application/json");
  ASSERT_TRUE(yes);
  EXPECT_EQ(yes->status, 200) << yes->body;
  // The servers themselves refuse a request without their key.
  EXPECT_EQ(testing::http_post(d->port(), "/v1/completions", body).status, 401);
}

}  // namespace
}  // namespace strata
