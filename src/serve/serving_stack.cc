#include "serve/serving_stack.h"

#include <spdlog/spdlog.h>

#include "base/log.h"
#include "sched/spec_decode.h"
#include "serve/chat_prompt.h"
#include "serve/chat_template.h"

#include <chrono>

#include <fmt/format.h>

namespace strata {

namespace {
// The store-vs-recompute cost model, measured now (docs/tiers.md): one unit's recompute time
// from a forward of unit - 1 tokens on a scratch sequence (less than a unit: nothing is
// published), each tier's load time for one unit's bytes; a tier keeps units only where
// loading beats recomputing.
ServerMetrics::TierPlan measure_tier_plan(ModelRunner& r, UnitStore& store) {
  ServerMetrics::TierPlan p;
  const int64_t unit = r.prefix_alignment();
  const SeqId probe{-424242};
  std::vector<int32_t> ids(static_cast<size_t>(unit - 1));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = 3 + static_cast<int32_t>(i % 5);
  double t = 0;
  if (r.add_sequence(probe).ok()) {
    StepItem item{probe, ids, true, static_cast<int64_t>(ids.size())};
    std::vector<float> logits;
    const auto t0 = std::chrono::steady_clock::now();
    const Status st = r.step({&item, 1}, &logits);
    t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.release_sequence(probe);
    if (!st.ok()) t = 0;
  }
  p.recompute_s = t > 0 ? t * static_cast<double>(unit) / static_cast<double>(unit - 1) : 0;
  p.load_s = store.measure_load_seconds(r.prefix_cache_bytes_per_unit());
  const std::vector<TierStats> stats = store.stats();
  std::string line;
  for (size_t i = 0; i < p.load_s.size() && i < stats.size(); ++i) {
    // Unmeasured recompute (probe failed): keep storing.
    const bool store_here = p.load_s[i] >= 0 && (p.recompute_s <= 0 || p.load_s[i] < p.recompute_s);
    p.tiers.push_back(stats[i].tier);
    p.store.push_back(store_here);
    line += fmt::format("{}{} load {:.3f} ms -> {}", line.empty() ? "" : ", ", stats[i].tier,
                        p.load_s[i] * 1e3, store_here ? "store" : "recompute");
  }
  store.set_admission(p.store);
  spdlog::info("strata: tiers: one unit ({} tokens, {} B) recomputes in {:.3f} ms; {}", unit,
               r.prefix_cache_bytes_per_unit(), p.recompute_s * 1e3, line);
  return p;
}
}  // namespace

StatusOr<std::unique_ptr<ServingStack>> ServingStack::start(const ServeOptions& options) {
  init_logging();  // spdlog's default logger: stderr, lines as given (base/log.h)
  std::unique_ptr<ServingStack> s(new ServingStack());
  RunnerOptions runner_options = options.runner;
  STRATA_RETURN_IF_ERROR(prepare_runner_tiers(options.model_dir, &runner_options));
  STRATA_ASSIGN_OR_RETURN(s->runner_, make_model_runner(options.model_dir, runner_options));
  if (options.wrap_runner) s->runner_ = options.wrap_runner(std::move(s->runner_));
  STRATA_RETURN_IF_ERROR(check_speculative_config(options.engine.speculative, *s->runner_));
  auto tok = load_tokenizer_from_dir(options.model_dir);
  if (tok.ok()) {
    s->tokenizer_ = std::move(*tok);
  } else if (tok.status().code() != StatusCode::kNotFound) {
    return tok.status().with_context("loading the tokenizer");
  }
  const std::string name =
      options.http.model_name.empty() ? s->runner_->info().name : options.http.model_name;
  s->metrics_ = std::make_unique<ServerMetrics>(name);
  s->metrics_->set_unit_store(runner_options.unit_store);
  s->metrics_->set_engram_tables(s->runner_->engram_tables());
  if (runner_options.unit_store && s->runner_->prefix_alignment() > 1)
    s->metrics_->set_tier_plan(measure_tier_plan(*s->runner_, *runner_options.unit_store));
  s->engine_ = std::make_unique<Engine>(s->runner_.get(), s->tokenizer_.get(), options.engine);
  s->metrics_->set_log_requests(options.log.log_requests);
  s->engine_->set_observer(s->metrics_.get());
  s->engine_->start();
  HttpServerOptions http = options.http;
  http.model_name = name;
  {
    const bool builtin =
        chat_format_for_architecture(s->runner_->info().architecture) == ChatFormat::kDeepSeek;
    STRATA_ASSIGN_OR_RETURN(http.chat_prompt, ChatPrompt::load(http.chat_template, options.model_dir,
                                                               builtin, s->tokenizer_.get()));
  }
  for (const auto& [flag, parser] : {std::pair{"--reasoning-parser", &http.reasoning_parser},
                                     std::pair{"--tool-call-parser", &http.tool_call_parser}}) {
    if (parser->empty()) continue;
    if (*parser != "deepseek_v4")
      return invalid_argument("{} '{}' is not known (deepseek_v4)", flag, *parser);
    if (chat_format_for_architecture(s->runner_->info().architecture) != ChatFormat::kDeepSeek)
      return invalid_argument("{} deepseek_v4 needs a DeepSeek V4/V4.1 model, not {}", flag,
                              s->runner_->info().architecture);
  }
  const DisaggregationOptions& d = options.disagg;
  if (!d.mode.empty()) {
    if (d.mode != "prefill" && d.mode != "decode")
      return invalid_argument("--disaggregation-mode must be prefill or decode, not '{}'", d.mode);
    STRATA_ASSIGN_OR_RETURN(HandoffContract contract,
                            make_handoff_contract(*s->runner_, options.model_dir,
                                                  d.contract_overrides));
    const StateGraph& graph = *s->runner_->state_graph();
    if (d.mode == "prefill") {
      STRATA_ASSIGN_OR_RETURN(s->kv_sender_,
                              KvTransferSender::start(std::move(contract), graph, d.transfer));
      http.kv_sender = s->kv_sender_.get();
    } else {
      std::unique_ptr<TransportClient> client = make_zmq_client();
      if (d.backend == "fault") {
        STRATA_ASSIGN_OR_RETURN(FaultSpec spec, parse_fault_spec(d.fault_spec));
        client = make_fault_client(std::move(client), spec);
      } else if (d.backend != "zmq") {
        return invalid_argument("--disaggregation-transfer-backend must be zmq or fault, not '{}'",
                                d.backend);
      }
      s->kv_receiver_ = std::make_unique<KvTransferReceiver>(std::move(contract), graph,
                                                             std::move(client), d.transfer);
      http.kv_receiver = s->kv_receiver_.get();
      http.kv_load_failure_recompute = d.load_failure_recompute;
    }
    http.disaggregation_mode = d.mode;
  }
  s->http_ = std::make_unique<HttpServer>(s->engine_.get(), s->metrics_.get(), http);
  Status st = s->http_->start();
  if (!st.ok()) {
    s->shutdown();
    return st;
  }
  if (options.log.stats_interval_s > 0) {
    ServingStack* self = s.get();
    const double iv = options.log.stats_interval_s;
    s->stats_thread_ = std::thread([self, iv] { self->log_stats_loop(iv); });
  }
  return s;
}

ServingStack::~ServingStack() { shutdown(); }

void ServingStack::log_stats_loop(double interval_s) {
  EngineStats prev = engine_->stats();
  auto t_prev = std::chrono::steady_clock::now();
  std::unique_lock lock(stats_mu_);
  while (!stats_cv_.wait_for(lock, std::chrono::duration<double>(interval_s),
                             [&] { return stats_stop_; })) {
    const EngineStats s = engine_->stats();
    const auto now = std::chrono::steady_clock::now();
    const double dt = std::chrono::duration<double>(now - t_prev).count();
    const int64_t dp = s.prompt_tokens_total - prev.prompt_tokens_total;
    const int64_t dg = s.generation_tokens_total - prev.generation_tokens_total;
    const int64_t dq = s.prefix_cache_queries_total - prev.prefix_cache_queries_total;
    const int64_t dh = s.prefix_cache_hits_total - prev.prefix_cache_hits_total;
    if (dp > 0 || dg > 0 || s.num_running > 0 || s.num_waiting > 0)
      spdlog::info(
                 "strata: avg prompt throughput {:.1f} tokens/s, avg generation throughput {:.1f} "
                 "tokens/s, running {} reqs, waiting {} reqs, prefix cache hit rate {:.1f}%, "
                 "preemptions {}",
                 dp / dt, dg / dt, s.num_running, s.num_waiting, dq > 0 ? 100.0 * dh / dq : 0.0,
                 s.num_preemptions_total - prev.num_preemptions_total);
    prev = s;
    t_prev = now;
  }
}

void ServingStack::shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  {
    std::lock_guard lock(stats_mu_);
    stats_stop_ = true;
  }
  stats_cv_.notify_all();
  if (stats_thread_.joinable()) stats_thread_.join();
  if (engine_) engine_->shutdown();
  if (http_) http_->stop();
  if (kv_sender_) kv_sender_->stop();
}

}  // namespace strata
