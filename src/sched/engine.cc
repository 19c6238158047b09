#include "sched/engine.h"

#include <cmath>

#include <algorithm>

#include "base/check.h"
#include "dist/dcp_comm.h"
#include "dist/expert_comm.h"
#include "dist/pipe_comm.h"
#include "sched/json_constraint.h"
#include "sched/json_schema.h"
#include "sched/request_sampler.h"
#include "sched/stop_checker.h"
#include "state/handoff.h"

namespace strata {

using Clock = std::chrono::steady_clock;

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "abort";
    case FinishReason::kError: return "error";
  }
  return "";
}

// ---------------------------------------------------------------- RequestStream

std::optional<RequestEvent> RequestStream::next(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (queue_.empty() && final_) {
    RequestEvent e;
    e.finished = true;
    e.finish_reason = final_->finish_reason;
    e.error = final_->error;
    e.prompt_tokens = final_->prompt_tokens;
    e.completion_tokens = final_->completion_tokens;
    e.cached_tokens = final_->cached_tokens;
    e.replayed_tokens = final_->replayed_tokens;
    e.approximate_prefix = final_->approximate_prefix;
    return e;
  }
  if (!cv_.wait_for(lock, timeout, [&] { return !queue_.empty(); })) return std::nullopt;
  RequestEvent merged = std::move(queue_.front());
  queue_.pop_front();
  while (!queue_.empty() && !merged.finished) {
    RequestEvent& e = queue_.front();
    merged.tokens.insert(merged.tokens.end(), e.tokens.begin(), e.tokens.end());
    merged.logprobs.insert(merged.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
    merged.text += e.text;
    merged.finished = e.finished;
    merged.finish_reason = e.finish_reason;
    merged.error = e.error;
    merged.prompt_tokens = e.prompt_tokens;
    merged.completion_tokens = e.completion_tokens;
    merged.cached_tokens = e.cached_tokens;
    merged.replayed_tokens = e.replayed_tokens;
    merged.approximate_prefix = e.approximate_prefix;
    if (e.handoff) merged.handoff = e.handoff;
    queue_.pop_front();
  }
  if (merged.finished) final_ = merged;
  return merged;
}

void RequestStream::cancel() {
  if (engine_ != nullptr) engine_->cancel(id_);
}

void RequestStream::push(RequestEvent event) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(event));
  }
  cv_.notify_all();
}

// ---------------------------------------------------------------- Engine

struct Engine::Active {
  RequestId id = 0;
  SeqId seq;
  GenerationParams params;
  std::shared_ptr<RequestStream> stream;
  std::unique_ptr<RequestSampler> sampler;
  std::unique_ptr<StopChecker> stop;
  int64_t prompt_tokens = 0;
  int64_t max_new_tokens = 0;  // after clipping to the context
  int64_t generated = 0;
  std::string utf8_pending;    // bytes of an incomplete UTF-8 character
  int32_t prev_token = -1;
  Clock::time_point arrival;
  std::optional<Clock::time_point> first_scheduled;
  std::vector<Clock::time_point> token_times;
  bool prefill_counted = false;
  bool export_state = false;  // SubmitOptions::export_state
  bool export_final = false;  // SubmitOptions::export_final_state
  bool imported = false;      // admitted with an import_state
  int64_t last_step_tokens = 0;  // tokens the latest step computed for it
  bool last_step_verify = false; // the latest step verified speculative drafts
};

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Length of the UTF-8 sequence a lead byte starts; 0 for an invalid lead byte.
int utf8_length(unsigned char c) {
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return 2;
  if (c >= 0xE0 && c <= 0xEF) return 3;
  if (c >= 0xF0 && c <= 0xF4) return 4;
  return 0;
}

// Moves the complete UTF-8 characters at the front of `pending` to the result; invalid
// bytes become U+FFFD. An incomplete character at the end stays in `pending`.
std::string take_complete_utf8(std::string& pending) {
  std::string out;
  size_t i = 0;
  while (i < pending.size()) {
    const auto c = static_cast<unsigned char>(pending[i]);
    const int len = utf8_length(c);
    if (len == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    if (i + len > pending.size()) {
      // Incomplete: keep it if the bytes so far are valid continuations.
      bool ok = true;
      for (size_t j = i + 1; j < pending.size(); ++j) {
        ok = ok && (static_cast<unsigned char>(pending[j]) & 0xC0) == 0x80;
      }
      if (ok) break;
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    bool ok = true;
    for (int j = 1; j < len; ++j) {
      ok = ok && (static_cast<unsigned char>(pending[i + j]) & 0xC0) == 0x80;
    }
    if (!ok) {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    out.append(pending, i, len);
    i += len;
  }
  pending.erase(0, i);
  return out;
}

}  // namespace

Engine::Engine(ModelRunner* runner, const Tokenizer* tokenizer, EngineOptions options)
    : runner_(runner),
      tokenizer_(tokenizer),
      options_(options),
      scheduler_(runner, options.scheduler) {
  prefix_alignment_ = runner_->prefix_alignment();
  proposer_ = make_proposer(options_.speculative, runner_);
  counters_.spec_decode_num_accepted_tokens_per_pos.assign(
      static_cast<size_t>(std::max(0, options_.speculative.num_speculative_tokens)), 0);
  publish_stats();
}

Engine::~Engine() { shutdown(); }

void Engine::set_observer(EngineObserver* observer) { observer_ = observer; }

void Engine::start() {
  std::lock_guard lock(mu_);
  STRATA_CHECK(!thread_.joinable() && !stopping_);
  thread_ = std::thread([this] { loop(); });
}

void Engine::shutdown() {
  {
    std::lock_guard lock(mu_);
    if (stopped_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Everything still queued or running ends with an error (never a silent success).
  {
    std::lock_guard lock(mu_);
    stopped_ = true;
    for (Incoming& in : incoming_) {
      RequestEvent e;
      e.finished = true;
      e.finish_reason = FinishReason::kError;
      e.error = Status(StatusCode::kUnavailable, "server is shutting down");
      e.prompt_tokens = static_cast<int64_t>(in.prompt.size());
      in.stream->push(std::move(e));
    }
    incoming_.clear();
    for (Probe& p : probes_) p.result->set_value(0);
    probes_.clear();
  }
  std::vector<RequestId> ids;
  for (auto& [id, a] : active_) ids.push_back(id);
  for (RequestId id : ids) {
    finish(*active_.at(id), FinishReason::kError,
           Status(StatusCode::kUnavailable, "server is shutting down"));
  }
  publish_stats();
}

bool Engine::serving() const {
  std::lock_guard lock(mu_);
  return !stopping_;
}

StatusOr<std::shared_ptr<RequestStream>> Engine::submit(std::vector<int32_t> prompt,
                                                        GenerationParams params,
                                                        SubmitOptions opts) {
  const ModelInfo& info = runner_->info();
  if (prompt.empty()) return invalid_argument("prompt is empty");
  for (int32_t t : prompt) {
    if (t < 0 || t >= info.vocab_size) {
      return invalid_argument("prompt token {} is outside the vocabulary [0, {})", t,
                              info.vocab_size);
    }
  }
  if (static_cast<int64_t>(prompt.size()) >= info.max_context) {
    return out_of_range(
        "This model's maximum context length is {} tokens, but the prompt has {} tokens "
        "(at least one token must be left for the completion)",
        info.max_context, prompt.size());
  }
  if (params.max_tokens < 1) return invalid_argument("max_tokens must be at least 1");
  const char* json_format = params.json_schema ? "json_schema" : params.json_object ? "json_object" : nullptr;
  if (json_format != nullptr && tokenizer_ == nullptr)
    return invalid_argument("response_format {} needs a model with a tokenizer", json_format);
  if (json_format != nullptr && info.eos_id < 0 && params.stop_token_ids.empty())
    return invalid_argument("response_format {} needs an EOS token or stop_token_ids "
                            "to end the value", json_format);
  if (params.min_tokens < 0 || params.min_tokens > params.max_tokens)
    return invalid_argument("min_tokens must be in [0, max_tokens = {}], got {}", params.max_tokens,
                            params.min_tokens);
  if (!(params.temperature >= 0.0)) return invalid_argument("temperature must be >= 0");
  if (!(params.top_p > 0.0 && params.top_p <= 1.0)) return invalid_argument("top_p must be in (0, 1]");
  if (!(params.min_p >= 0.0 && params.min_p <= 1.0)) return invalid_argument("min_p must be in [0, 1]");
  if (params.top_k < -1) return invalid_argument("top_k must be -1 or 0 (off) or positive, got {}", params.top_k);
  if (params.logprobs > 20) return invalid_argument("logprobs must be at most 20");
  for (int32_t t : params.stop_token_ids) {
    if (t < 0 || t >= info.vocab_size) return invalid_argument("stop token {} out of range", t);
  }
  if (!(params.presence_penalty >= -2.0 && params.presence_penalty <= 2.0))
    return invalid_argument("presence_penalty must be in [-2, 2]");
  if (!(params.frequency_penalty >= -2.0 && params.frequency_penalty <= 2.0))
    return invalid_argument("frequency_penalty must be in [-2, 2]");
  if (!(params.repetition_penalty > 0.0 && std::isfinite(params.repetition_penalty)))
    return invalid_argument("repetition_penalty must be > 0");
  for (const auto& [t, b] : params.logit_bias) {
    if (t < 0 || t >= info.vocab_size)
      return invalid_argument("logit_bias token {} is outside the vocabulary [0, {})", t, info.vocab_size);
    if (!(b >= -100.0f && b <= 100.0f)) return invalid_argument("logit_bias values must be in [-100, 100]");
  }
  std::shared_ptr<RequestStream> stream;
  int64_t waiting = 0;
  {
    std::lock_guard lock(stats_mu_);
    waiting = stats_.num_waiting;
  }
  {
    std::lock_guard lock(mu_);
    if (stopping_) return Status(StatusCode::kUnavailable, "server is shutting down");
    if (static_cast<int64_t>(incoming_.size()) + waiting >= options_.max_waiting) {
      return Status(StatusCode::kResourceExhausted, "too many waiting requests");
    }
    const RequestId id = next_id_++;
    stream = std::make_shared<RequestStream>(id, this);
    incoming_.push_back(
        {id, std::move(prompt), std::move(params), std::move(opts), stream, Clock::now()});
  }
  cv_.notify_all();
  return stream;
}

int64_t Engine::peek_cached_prefix(std::vector<int32_t> prompt) {
  auto result = std::make_shared<std::promise<int64_t>>();
  std::future<int64_t> f = result->get_future();
  {
    std::lock_guard lock(mu_);
    if (stopping_) return 0;
    probes_.push_back({std::move(prompt), result});
  }
  cv_.notify_all();
  return f.get();
}

void Engine::cancel(RequestId id) {
  {
    std::lock_guard lock(mu_);
    cancels_.push_back(id);
  }
  cv_.notify_all();
}

EngineStats Engine::stats() const {
  std::lock_guard lock(stats_mu_);
  return stats_;
}

void Engine::loop() {
  while (true) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] {
        return stopping_ || !incoming_.empty() || !cancels_.empty() || !probes_.empty() ||
               scheduler_.has_work();
      });
      if (stopping_) return;
    }
    iterate();
  }
}

bool Engine::step_once() { return iterate(); }

void Engine::check_invariants() const {
  scheduler_.check_invariants();
  STRATA_CHECK(static_cast<int64_t>(active_.size()) ==
               scheduler_.num_running() + scheduler_.num_waiting());
  for (const auto& [id, a] : active_) STRATA_CHECK(scheduler_.contains(a->seq));
}

void Engine::publish_stats(bool with_requests) {
  EngineStats s = counters_;
  s.num_running = scheduler_.num_running();
  s.num_waiting = scheduler_.num_waiting();
  const SchedulerCounters& c = scheduler_.counters();
  s.prefix_cache_queries_total = c.prefix_cache_queries;
  s.prefix_cache_hits_total = c.prefix_cache_hits;
  s.prefix_replayed_tokens_total = c.prefix_replayed_tokens;
  s.prefix_approximate_restores_total = c.prefix_approximate_restores;
  s.num_preemptions_total = c.preemptions;
  s.kv_transfer_imports_total = c.handoff_imports;
  s.kv_transfer_imported_tokens_total = c.handoff_imported_tokens;
  s.kv_transfer_import_failures_total = c.handoff_import_failures;
  // Written by this (the engine's) thread inside the forwards.
  if (std::shared_ptr<ExpertComm> ep = process_expert_comm()) s.moe_collective_seconds_total = ep->seconds();
  if (std::shared_ptr<DcpComm> dcp = process_dcp_comm()) s.dcp_exchange_seconds_total = dcp->seconds();
  if (std::shared_ptr<PipeComm> pp = process_pipe_comm()) s.pp_boundary_seconds_total = pp->seconds();
  s.kv_transfer_recomputed_tokens_total = c.handoff_recomputed_tokens;
  s.spec_decode_rollback_recomputes = c.spec_rollback_recomputes;
  s.spec_decode_rollback_recomputed_tokens = c.spec_rollback_recomputed_tokens;
  s.cache_usage = runner_->cache_usage();
  s.prefix_cache_bytes_per_unit = runner_->prefix_cache_bytes_per_unit();
  const auto now = Clock::now();
  for (const auto& [id, ap] : active_) {
    if (!with_requests || s.requests.size() >= EngineStats::kMaxRequestSnapshots) break;
    const Active& a = *ap;
    if (!scheduler_.contains(a.seq)) continue;  // finishing
    RequestSnapshot r;
    r.id = id;
    r.prompt_tokens = a.prompt_tokens;
    r.generated_tokens = a.generated;
    r.imported = a.imported;
    r.age_s = seconds(now - a.arrival);
    r.computed_tokens = scheduler_.num_computed(a.seq);
    r.cached_tokens = scheduler_.cached_prompt_tokens(a.seq);
    r.last_step_tokens = a.last_step_tokens;
    if (!scheduler_.is_running(a.seq)) r.phase = "waiting";
    else if (r.computed_tokens < a.prompt_tokens) r.phase = "prefill";
    else if (a.last_step_verify) r.phase = "verify";
    else r.phase = "decode";
    s.requests.push_back(std::move(r));
  }
  std::lock_guard lock(stats_mu_);
  if (!with_requests) s.requests = std::move(stats_.requests);  // the step's list, kept
  stats_ = std::move(s);
}

bool Engine::iterate() {
  const auto t0 = Clock::now();
  // 1. New requests and cancellations.
  std::deque<Incoming> incoming;
  std::vector<RequestId> cancels;
  std::vector<Probe> probes;
  {
    std::lock_guard lock(mu_);
    incoming.swap(incoming_);
    cancels.swap(cancels_);
    probes.swap(probes_);
  }
  for (Probe& p : probes) p.result->set_value(runner_->peek_cached_prefix(p.tokens));
  const ModelInfo& info = runner_->info();
  for (Incoming& in : incoming) {
    auto a = std::make_unique<Active>();
    a->id = in.id;
    a->seq = SeqId{in.id};
    a->params = std::move(in.params);
    a->stream = std::move(in.stream);
    std::vector<int32_t> stop_ids = a->params.stop_token_ids;  // what min_tokens holds back
    if (!a->params.ignore_eos)
      for (int32_t t : {info.eos_id, info.bos_id})
        if (t >= 0) stop_ids.push_back(t);
    a->sampler = std::make_unique<RequestSampler>(a->params, splitmix64(options_.seed ^ splitmix64(in.id)),
                                                  in.prompt, std::move(stop_ids));
    if (a->params.json_object || a->params.json_schema) {
      std::vector<int32_t> ends = a->params.stop_token_ids;  // what may follow the value
      if (info.eos_id >= 0) ends.push_back(info.eos_id);
      if (a->params.json_schema)
        a->sampler->set_json_constraint(std::make_unique<ByteTokenMask<JsonSchemaState>>(
            json_token_bytes(), std::move(ends), JsonSchemaState(a->params.json_schema)));
      else
        a->sampler->set_json_constraint(std::make_unique<JsonTokenMask>(json_token_bytes(), std::move(ends)));
    }
    a->stop = std::make_unique<StopChecker>(a->params.stop);
    a->prompt_tokens = static_cast<int64_t>(in.prompt.size());
    a->max_new_tokens = std::min(a->params.max_tokens, info.max_context - a->prompt_tokens);
    a->arrival = in.arrival;
    a->export_state = in.opts.export_state;
    a->export_final = in.opts.export_final_state;
    a->imported = in.opts.import_state != nullptr;
    runner_->prefetch_cached_prefix(in.prompt);  // slow tiers -> fast, while it waits
    scheduler_.add(a->seq, std::move(in.prompt), a->params.priority, std::move(in.opts.import_state),
                   in.opts.fail_on_import_error);
    active_[in.id] = std::move(a);
  }
  for (RequestId id : cancels) {
    auto it = active_.find(id);
    if (it != active_.end()) finish(*it->second, FinishReason::kCancelled);
  }
  if (!scheduler_.has_work()) {
    publish_stats();
    return !incoming.empty() || !cancels.empty();
  }

  // 2. Plan (drafts first: a verify item is planned like a decode of k+1 tokens).
  if (proposer_) propose_drafts();
  SchedulePlan plan = scheduler_.plan();
  for (FailedRequest& f : plan.failed) {
    auto it = active_.find(f.seq.value);
    if (it != active_.end()) finish(*it->second, FinishReason::kError, f.status);
  }
  if (plan.items.empty()) {
    publish_stats();
    return !plan.failed.empty() || !plan.preempted.empty();
  }
  for (const ScheduledItem& s : plan.scheduled) {
    Active& a = *active_.at(s.seq.value);
    if (!a.first_scheduled) a.first_scheduled = t0;
    a.last_step_tokens = s.num_tokens;
    a.last_step_verify = s.all_logits;
  }

  // 3. Forward.
  std::vector<float> logits;
  const auto t1 = Clock::now();
  Status st = runner_->step(plan.items, &logits);
  const auto t2 = Clock::now();
  counters_.forward_seconds_total += seconds(t2 - t1);
  ++counters_.steps_total;
  if (st.code() == StatusCode::kResourceExhausted) {
    for (FailedRequest& f : scheduler_.preempt_for_retry(plan)) {
      auto it = active_.find(f.seq.value);
      if (it != active_.end()) finish(*it->second, FinishReason::kError, f.status);
    }
    counters_.schedule_seconds_total += seconds(t1 - t0);
    publish_stats();
    return true;
  }
  if (!st.ok()) {
    // Nothing advanced; the requests in this step cannot be trusted to continue.
    for (const ScheduledItem& s : plan.scheduled) {
      auto it = active_.find(s.seq.value);
      if (it != active_.end()) {
        finish(*it->second, FinishReason::kError, st.with_context("model step failed"));
      }
    }
    counters_.schedule_seconds_total += seconds(t1 - t0);
    publish_stats();
    return true;
  }
  scheduler_.commit(plan);

  // 4. Sample one token per logits row.
  const int64_t vocab = info.vocab_size;
  int64_t rows = 0;
  for (const StepItem& item : plan.items)
    rows += item.want_logits ? (item.all_logits ? static_cast<int64_t>(item.tokens.size()) : 1) : 0;
  STRATA_CHECK_MSG(static_cast<int64_t>(logits.size()) == rows * vocab,
                   "runner returned {} logits for {} rows of {}", logits.size(), rows, vocab);
  int64_t row = 0;
  for (const ScheduledItem& s : plan.scheduled) {
    if (!s.want_logits) continue;
    if (s.all_logits) {  // a speculative verify: k drafts after the last token
      std::span<const float> rows_k(logits.data() + row * vocab, s.num_tokens * vocab);
      row += s.num_tokens;
      accept_drafts(*active_.at(s.seq.value), rows_k, s.num_tokens - 1);
      continue;
    }
    std::span<const float> lrow(logits.data() + row * vocab, vocab);
    ++row;
    Active& a = *active_.at(s.seq.value);
    if (!a.prefill_counted) {
      a.prefill_counted = true;
      counters_.prompt_tokens_total += a.prompt_tokens;
    }
    // A NaN or +inf logit is a numerical fault, not a distribution: the request ends with
    // an error instead of a token drawn from garbage.
    if (Status st = check_logits(lrow); !st.ok()) {
      finish(a, FinishReason::kError, st.with_context("request ended"));
      continue;
    }
    if (a.export_state) {  // prefill role: hand the prompt's state off instead of sampling
      auto st = std::make_shared<HandoffState>();
      Status ex = runner_->export_handoff(a.seq, 0, scheduler_.tokens(a.seq), st.get());
      if (!ex.ok()) {
        finish(a, FinishReason::kError, ex.with_context("state export"));
      } else {
        ++counters_.kv_transfer_exports_total;
        finish(a, FinishReason::kStop, Status(), std::move(st));
      }
      continue;
    }
    SampleResult tok = a.sampler->sample(lrow);
    handle_token(a, tok.token, a.params.logprobs >= 0 ? &tok.logprob : nullptr);
  }
  counters_.schedule_seconds_total += seconds(t1 - t0) + seconds(Clock::now() - t2);
  publish_stats();
  return true;
}

std::shared_ptr<const std::vector<std::string>> Engine::json_token_bytes() {
  if (json_token_bytes_) return json_token_bytes_;
  // Every token's bytes; special tokens (BOS/EOS and "<|...|>" / "<｜...｜>" / "<s>"-style
  // names) add nothing the JSON may contain, so they get no bytes (never allowed inside).
  const ModelInfo& info = runner_->info();
  auto t = std::make_shared<std::vector<std::string>>(static_cast<size_t>(info.vocab_size));
  auto special = [](const std::string& b) {
    auto wrapped = [&](std::string_view open, std::string_view close) {
      return b.size() >= open.size() + close.size() && b.compare(0, open.size(), open) == 0 &&
             b.compare(b.size() - close.size(), close.size(), close) == 0;
    };
    return wrapped("<|", "|>") || wrapped("<\xef\xbd\x9c", "\xef\xbd\x9c>") || b == "<s>" ||
           b == "</s>" || b == "<unk>" || b == "<pad>";
  };
  for (int32_t id = 0; id < info.vocab_size; ++id) {
    if (id == info.bos_id || id == info.eos_id || id >= tokenizer_->vocab_size()) continue;
    std::string b = tokenizer_->token_bytes(id);
    if (!special(b)) (*t)[id] = std::move(b);
  }
  json_token_bytes_ = std::move(t);
  return json_token_bytes_;
}

std::string Engine::decode_piece(Active& a, int32_t token) {
  if (tokenizer_ == nullptr) return {};
  a.utf8_pending += tokenizer_->token_bytes(token, a.prev_token);
  a.prev_token = token;
  return take_complete_utf8(a.utf8_pending);
}

void Engine::propose_drafts() {
  const ModelInfo& info = runner_->info();
  const SpeculativeConfig& sc = options_.speculative;
  for (auto& [id, ap] : active_) {
    Active& a = *ap;
    if (a.export_state || !scheduler_.is_running(a.seq)) continue;
    const std::vector<int32_t>& tokens = scheduler_.tokens(a.seq);
    const int64_t len = static_cast<int64_t>(tokens.size());
    if (scheduler_.num_computed(a.seq) + 1 != len || len <= a.prompt_tokens) continue;
    // Every draft must be emittable: within max_tokens and the context (the target's own
    // next token comes on top).
    const int64_t k = std::min<int64_t>({sc.num_speculative_tokens, a.max_new_tokens - a.generated - 1,
                                         info.max_context - len - 1});
    if (k <= 0) continue;
    const std::vector<int32_t> drafts = proposer_->propose(a.seq, tokens, static_cast<int>(k));
    if (!drafts.empty()) scheduler_.set_drafts(a.seq, drafts);
  }
}

void Engine::accept_drafts(Active& a, std::span<const float> rows, int64_t k) {
  const int64_t vocab = runner_->info().vocab_size;
  const std::vector<int32_t>& tokens = scheduler_.tokens(a.seq);
  const std::vector<int32_t> drafts(tokens.end() - k, tokens.end());
  // Sample the rows in order, as decoding would, until a sample differs from its draft.
  std::vector<SampleResult> emitted;
  std::vector<int> closed;  // the response_format value closed at this token
  for (int64_t i = 0; i <= k; ++i) {
    std::span<const float> lrow = rows.subspan(static_cast<size_t>(i * vocab), static_cast<size_t>(vocab));
    if (Status st = check_logits(lrow); !st.ok()) {  // nothing of this step is committed
      finish(a, FinishReason::kError, st.with_context("request ended"));
      return;
    }
    emitted.push_back(a.sampler->sample(lrow));
    closed.push_back(a.sampler->json_complete() ? 1 : 0);
    // A token that closes a response_format value ends the answer: nothing after it.
    if (i == k || emitted.back().token != drafts[i] ||
        options_.speculative.force_reject_at == i + 1 || closed.back())
      break;
  }
  const int64_t accepted = static_cast<int64_t>(emitted.size()) - 1;
  ++counters_.spec_decode_num_drafts;
  counters_.spec_decode_num_draft_tokens += k;
  counters_.spec_decode_num_accepted_tokens += accepted;
  for (int64_t i = 0; i < accepted; ++i) ++counters_.spec_decode_num_accepted_tokens_per_pos.at(i);
  scheduler_.resolve_drafts(a.seq, accepted);
  const RequestId id = a.id;
  for (int64_t i = 0; i <= accepted; ++i) {
    handle_token(a, emitted[i].token, a.params.logprobs >= 0 ? &emitted[i].logprob : nullptr,
                 /*appended=*/i < accepted, closed[i]);
    if (!active_.count(id)) return;  // finished (EOS, stop, length): the rest is dropped
  }
}

void Engine::handle_token(Active& a, int32_t token, const TokenLogprob* logprob, bool appended,
                          int value_closed) {
  const auto now = Clock::now();
  a.token_times.push_back(now);
  ++a.generated;
  ++counters_.generation_tokens_total;
  const ModelInfo& info = runner_->info();

  RequestEvent e;
  FinishReason reason = FinishReason::kNone;
  // A sampled EOS ends the sequence; so does a sampled BOS (a new document would start;
  // llama2.c semantics, as exec/generate.h).
  const bool is_eos = !a.params.ignore_eos && ((info.eos_id >= 0 && token == info.eos_id) ||
                                               (info.bos_id >= 0 && token == info.bos_id));
  const bool is_stop_token = std::find(a.params.stop_token_ids.begin(),
                                       a.params.stop_token_ids.end(),
                                       token) != a.params.stop_token_ids.end();
  if (is_eos || is_stop_token) {
    // The stop token is part of the output ids (and of completion_tokens), not of the text
    // (as vLLM's token_ids and usage).
    reason = FinishReason::kStop;
    e.tokens.push_back(token);
    if (logprob != nullptr) e.logprobs.push_back(*logprob);
  } else {
    e.tokens.push_back(token);
    if (logprob != nullptr) e.logprobs.push_back(*logprob);
    e.text = a.stop->push(decode_piece(a, token));
    if (a.stop->matched()) reason = FinishReason::kStop;
    // response_format json_object / json_schema: the answer is the value; nothing may follow it.
    if (value_closed < 0 ? a.sampler->json_complete() : value_closed > 0)
      reason = FinishReason::kStop;
  }
  if (reason == FinishReason::kNone && a.generated >= a.max_new_tokens) {
    reason = FinishReason::kLength;
  }
  if (reason == FinishReason::kNone) {
    a.stream->push(std::move(e));
    if (!appended) scheduler_.append_token(a.seq, token);
    return;
  }
  // Final: flush held text (not after a stop string match).
  if (!a.stop->matched()) {
    if (!a.utf8_pending.empty()) {
      a.utf8_pending.clear();
      e.text += a.stop->push("\xEF\xBF\xBD");
    }
    e.text += a.stop->flush();
  }
  a.stream->push(std::move(e));
  finish(a, reason);
}

void Engine::finish(Active& a, FinishReason reason, Status error,
                    std::shared_ptr<const HandoffState> handoff) {
  const auto now = Clock::now();
  const int64_t cached =
      scheduler_.contains(a.seq) ? scheduler_.cached_prompt_tokens(a.seq) : 0;
  const PrefixRestoreInfo restore =
      scheduler_.contains(a.seq) ? scheduler_.prefix_restore(a.seq) : PrefixRestoreInfo{};
  std::string state_error;
  if (a.export_final && reason != FinishReason::kError && !handoff) {
    // Validation mode: the state of every position computed so far (the last sampled token
    // was never fed).
    if (!scheduler_.contains(a.seq)) {
      state_error = "the request held no state";
    } else {
      const std::vector<int32_t>& all = scheduler_.tokens(a.seq);
      const int64_t n = scheduler_.num_computed(a.seq);
      auto st = std::make_shared<HandoffState>();
      Status ex = n > 0 ? runner_->export_handoff(
                              a.seq, 0, std::span<const int32_t>(all.data(), static_cast<size_t>(n)),
                              st.get())
                        : Status(StatusCode::kFailedPrecondition, "no position computed");
      if (ex.ok()) handoff = std::move(st);
      else state_error = ex.message();
    }
  }
  scheduler_.remove(a.seq);  // releases every state kind right away

  RequestTimings t;
  t.queue_s = a.first_scheduled ? seconds(*a.first_scheduled - a.arrival) : 0.0;
  t.ttft_s = a.token_times.empty() ? -1.0 : seconds(a.token_times.front() - a.arrival);
  t.e2e_s = seconds(now - a.arrival);
  for (size_t i = 1; i < a.token_times.size(); ++i) {
    t.itl_s.push_back(seconds(a.token_times[i] - a.token_times[i - 1]));
  }
  t.prompt_tokens = a.prompt_tokens;
  t.generation_tokens = a.generated;
  t.finish_reason = reason;
  t.id = a.id;
  t.cached_tokens = cached;
  if (!error.ok()) t.error = error.message();
  ++counters_.requests_finished_total;
  if (reason == FinishReason::kError) ++counters_.requests_failed_total;
  if (observer_ != nullptr) observer_->on_request_finished(t);
  // Metrics first, then the final event: a client that saw its request end and then reads
  // /metrics sees the request's state released and its latencies recorded. (The request list
  // is rebuilt once per step, not per finished request: O(active) each time.)
  publish_stats(/*with_requests=*/false);

  RequestEvent e;
  e.finished = true;
  e.finish_reason = reason;
  e.error = std::move(error);
  e.prompt_tokens = a.prompt_tokens;
  e.completion_tokens = a.generated;
  e.cached_tokens = cached;
  e.replayed_tokens = restore.replayed_tokens;
  e.approximate_prefix = restore.approximate;
  e.handoff = std::move(handoff);
  e.state_error = std::move(state_error);
  a.stream->push(std::move(e));
  active_.erase(a.id);  // `a` is gone after this line
}

}  // namespace strata
