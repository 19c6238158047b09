#include "serve/http_server.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <chrono>
#include <ctime>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "disagg/kv_transfer.h"
#include "serve/chat_prompt.h"
#include "serve/choice_streams.h"
#include "serve/client_socket.h"
#include "serve/dashboard_page.h"
#include "serve/dashboard_state.h"
#include "serve/http_front_end.h"
#include "serve/openai_api.h"
#include "state/handoff.h"

namespace strata {

using Clock = std::chrono::steady_clock;

namespace {

std::atomic<int64_t> g_next_response_id{1};

// "cmpl-" / "chatcmpl-" + this process's random tag + a counter: unique across the servers
// of one deployment too (the start time alone repeated between servers started in the same
// second).
std::string new_response_id(ApiEndpoint ep) {
  static const uint32_t process_tag = std::random_device{}();
  return fmt::format("{}-{:08x}{:08x}", ep == ApiEndpoint::kChat ? "chatcmpl" : "cmpl",
                     process_tag, g_next_response_id.fetch_add(1));
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.http_status;
  res.set_content(render_error(e), "application/json");
}

void send_status(httplib::Response& res, const Status& st) { send_error(res, api_error_for(st)); }

// A failed handoff (fetch, contract, verification): 502, the prompt's state did not arrive
// intact; never a 200 with content.
void send_kv_error(httplib::Response& res, const Status& st) {
  send_error(res, {502, "kv_transfer_error", status_code_name(st.code()),
                   fmt::format("KV transfer failed: {}", st.message())});
}

// Replaces the "strata:" prefix of every metric name (sample lines and HELP / TYPE lines).
std::string rename_metrics(const std::string& text, const std::string& prefix) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::string line = text.substr(pos, eol - pos);
    for (const char* head : {"", "# HELP ", "# TYPE "}) {
      const std::string h = std::string(head) + "strata:";
      if (line.rfind(h, 0) == 0) {
        line = std::string(head) + prefix + line.substr(h.size());
        break;
      }
    }
    out += line;
    if (eol < text.size()) out += '\n';
    pos = eol + 1;
  }
  return out;
}

// vLLM's "kv_transfer_params" object of a request body (null when absent or not an object).
nlohmann::json kv_transfer_params(const std::string& body) {
  try {
    StatusOr<nlohmann::json> parsed = parse_json_body(body);
    if (!parsed.ok()) return nullptr;
    const nlohmann::json& j = *parsed;
    if (j.is_object() && j.contains("kv_transfer_params") && j["kv_transfer_params"].is_object())
      return j["kv_transfer_params"];
  } catch (const std::exception&) {
  }
  return nullptr;
}

// Tokenizes a completions prompt (`prompt`), or the chat conversation of `r` (prompt null).
// Text the tokenizer maps to its unknown token adds a line to *warnings (a response field
// and a log line: the answer is to a prompt the model did not see as written).
// Errors: InvalidArgument (no tokenizer, bad messages).
StatusOr<std::vector<int32_t>> build_prompt(const ParsedRequest& r, const ParsedRequest::Prompt* prompt,
                                            const Engine& engine, const ChatPrompt* chat_prompt,
                                            std::string_view request_body, std::vector<std::string>* warnings) {
  if (prompt != nullptr && !prompt->tokens.empty()) return prompt->tokens;
  const Tokenizer* tok = engine.tokenizer();
  if (tok == nullptr) return invalid_argument("this model has no tokenizer; send token ids");
  const ModelInfo& info = engine.model_info();
  std::vector<int32_t> ids;
  std::string text;
  bool add_bos = info.bos_id >= 0;
  if (r.endpoint == ApiEndpoint::kChat && chat_prompt != nullptr) {
    STRATA_ASSIGN_OR_RETURN(text, chat_prompt->render(request_body));
    add_bos = false;  // a template writes bos_token itself where it wants one
  } else if (r.endpoint == ApiEndpoint::kChat) {
    const ChatFormat fmt = chat_format_for_architecture(info.architecture);
    STRATA_ASSIGN_OR_RETURN(text, render_chat(fmt, r.messages, r.chat_options));
    if (fmt == ChatFormat::kDeepSeek) add_bos = false;  // the template writes BOS as text
  } else {
    text = prompt != nullptr ? prompt->text.value_or("") : "";
  }
  if (add_bos) ids.push_back(info.bos_id);
  std::vector<int32_t> body = tok->encode(text, /*parse_special=*/true);
  if (const std::optional<int32_t> unk = tok->unk_id(); unk && !body.empty()) {
    const auto n = std::count(body.begin(), body.end(), *unk);
    if (n > 0)
      warnings->push_back(fmt::format(
          "{} of the prompt's {} tokens are the tokenizer's unknown token '{}': text outside its "
          "vocabulary was not seen by the model as written", n, body.size(), tok->id_to_token(*unk)));
  }
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

}  // namespace

HttpServer::HttpServer(Engine* engine, ServerMetrics* metrics, HttpServerOptions options)
    : engine_(engine), metrics_(metrics), options_(std::move(options)) {
  model_name_ = options_.model_name.empty() ? engine_->model_info().name : options_.model_name;
  HttpFrontEndOptions fo;
  fo.host = options_.host;
  fo.port = options_.port;
  fo.threads = std::max(2, options_.threads);
  fo.max_body_bytes = options_.max_body_bytes;
  server_ = std::make_unique<HttpFrontEnd>(std::move(fo));
  install_routes();
}

HttpServer::~HttpServer() { stop(); }

Status HttpServer::start() {
  STRATA_RETURN_IF_ERROR(server_->start());
  port_ = server_->port();
  return ok_status();
}

void HttpServer::stop() {
  stopping_ = true;
  if (server_) server_->stop();
}

void HttpServer::wait() {
  if (server_) server_->wait();
}

void HttpServer::install_routes() {
  HttpFrontEnd& s = *server_;
  const std::vector<KnownRoute> routes = {
      {"/health", "GET"},           {"/metrics", "GET"},
      {"/v1/models", "GET"},        {"/v1/disaggregation", "GET"},
      {"/v1/completions", "POST"},  {"/v1/chat/completions", "POST"},
      {"/v1/disaggregation/handshake", "POST"}, {"/dashboard", "GET"},
      {"/v1/dashboard/state", "GET"}};
  install_request_guard(s, options_.guard, routes);

  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (!engine_->serving() || stopping_) {
      send_error(res, {503, "service_unavailable", "", "shutting down"});
      return;
    }
    res.set_content("{}", "application/json");
  });

  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    nlohmann::json card = {{"id", model_name_},
                           {"object", "model"},
                           {"created", static_cast<int64_t>(std::time(nullptr))},
                           {"owned_by", "strata"},
                           {"root", model_name_},
                           {"max_model_len", options_.max_model_len > 0
                                                 ? std::min(options_.max_model_len,
                                                            engine_->model_info().max_context)
                                                 : engine_->model_info().max_context},
                           {"vocab_size", engine_->model_info().vocab_size},
                           {"prefix_alignment", engine_->prefix_alignment()}};
    nlohmann::json j = {{"object", "list"}, {"data", nlohmann::json::array({card})}};
    res.set_content(j.dump(), "application/json");
  });

  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    std::string text = metrics_->render(engine_->stats());
    if (options_.kv_sender != nullptr) text += options_.kv_sender->metrics_text();
    if (options_.kv_receiver != nullptr) text += options_.kv_receiver->metrics_text();
    if (options_.metrics_prefix != "strata:") text = rename_metrics(text, options_.metrics_prefix);
    res.set_content(text, "text/plain; version=0.0.4");
  });

  s.Get("/dashboard", [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Cache-Control", "no-cache");
    res.set_content(std::string(dashboard_page_html()), "text/html; charset=utf-8");
  });
  s.Get("/v1/dashboard/state", [this](const httplib::Request&, httplib::Response& res) {
    DashboardServerInfo info{model_name_,
                             options_.disaggregation_mode.empty() ? "colocated"
                                                                  : options_.disaggregation_mode,
                             options_.metrics_prefix};
    const nlohmann::json j = dashboard_state_json(info, engine_->stats(), engine_->state_graph(),
                                                  handoffs_.recent(), handoffs_.total());
    res.set_header("Cache-Control", "no-store");
    res.set_content(j.dump(), "application/json");
  });

  // PD disaggregation: the role, and (prefill) where its state is fetched from.
  s.Get("/v1/disaggregation", [this](const httplib::Request&, httplib::Response& res) {
    nlohmann::json j = {{"mode", options_.disaggregation_mode.empty()
                                     ? std::string("colocated")
                                     : options_.disaggregation_mode},
                        {"protocol_version", kPdProtocolVersion}};
    if (options_.kv_sender != nullptr) j["kv_transfer_endpoint"] = options_.kv_sender->endpoint();
    if (options_.kv_receiver != nullptr)
      j["kv_load_failure_policy"] = options_.kv_load_failure_recompute ? "recompute" : "fail";
    res.set_content(j.dump(), "application/json");
  });
  // Decode role: verify the contract with a prefill server's endpoint now (the router calls
  // it for every pair before routing): 200, or 409 naming the differing field.
  s.Post("/v1/disaggregation/handshake", [this](const httplib::Request& req, httplib::Response& res) {
    if (options_.kv_receiver == nullptr)
      return send_error(res, {400, "invalid_request_error", "", "this server is not a decode server"});
    std::string ep;
    try {
      ep = nlohmann::json::parse(req.body).at("remote_endpoint").get<std::string>();
    } catch (const std::exception&) {
      return send_error(res, {400, "invalid_request_error", "",
                              "expected {\"remote_endpoint\": \"tcp://...\"}"});
    }
    Status st = options_.kv_receiver->handshake(ep);
    if (!st.ok())
      return send_error(res, {st.code() == StatusCode::kFailedPrecondition ? 409 : 502,
                              "kv_transfer_error", "handshake", st.message()});
    res.set_content("{\"ok\":true}", "application/json");
  });

  // Prefill role (a request with kv_transfer_params.do_remote_decode): computes positions
  // [0, T-1) of the T-token prompt, leases their state to the transfer endpoint and answers
  // with the handle; the decode server computes position T-1 and everything after it.
  auto prefill_for_remote_decode = [this](ApiEndpoint ep, const ParsedRequest& r,
                                          const std::vector<int32_t>& prompt,
                                          httplib::Response& res) {
    const int64_t T = static_cast<int64_t>(prompt.size());
    std::shared_ptr<const HandoffState> st = std::make_shared<HandoffState>();
    int64_t cached = 0;
    const auto t0 = Clock::now();
    if (T > 1) {
      GenerationParams p;
      p.max_tokens = 1;
      p.priority = r.params.priority;
      SubmitOptions so;
      so.export_state = true;
      auto submitted = engine_->submit(std::vector<int32_t>(prompt.begin(), prompt.end() - 1), p, so);
      if (!submitted.ok()) return send_status(res, submitted.status());
      RequestEvent last;
      while (true) {
        auto ev = (*submitted)->next(std::chrono::milliseconds(500));
        if (ev && ev->finished) {
          last = std::move(*ev);
          break;
        }
      }
      if (last.finish_reason != FinishReason::kStop || !last.handoff) {
        Status err = last.error.ok() ? Status(StatusCode::kCancelled, "prefill cancelled") : last.error;
        ApiError e = api_error_for(err);
        if (e.http_status < 500) e.http_status = 500;
        return send_error(res, e);
      }
      st = last.handoff;
      cached = last.cached_tokens;
    }
    const std::string handle = options_.kv_sender->lease(st);
    HandoffRecord rec;
    rec.direction = "export";
    rec.num_tokens = st->num_tokens;
    rec.from_pos = st->from_pos;
    rec.payload_bytes = st->payload_bytes();
    rec.bytes_per_kind = handoff_bytes_per_kind(*st);
    rec.latency_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    rec.endpoint = options_.kv_sender->endpoint();
    handoffs_.record(std::move(rec));
    nlohmann::json j = {
        {"id", new_response_id(ep)},
        {"object", "strata.prefill"},
        {"created", static_cast<int64_t>(std::time(nullptr))},
        {"model", model_name_},
        {"choices", nlohmann::json::array()},
        {"kv_transfer_params",
         {{"remote_handle", handle},
          {"remote_endpoint", options_.kv_sender->endpoint()},
          {"num_tokens", st->num_tokens},
          {"payload_bytes", st->payload_bytes()}}},
        {"usage",
         {{"prompt_tokens", T},
          {"completion_tokens", 0},
          {"total_tokens", T},
          {"prompt_tokens_details", {{"cached_tokens", cached}}}}}};
    res.set_content(j.dump(), "application/json");
  };

  auto generate = [this, prefill_for_remote_decode](ApiEndpoint ep, const httplib::Request& req,
                                                    httplib::Response& res) {
    StatusOr<ParsedRequest> parsed = parse_openai_request(ep, req.body);
    if (!parsed.ok()) return send_status(res, parsed.status());
    ParsedRequest& r = *parsed;
    if (!r.ignored_fields.empty())  // as vLLM: a warning, the request goes on
      spdlog::warn("strata: warning: request fields ignored (not used by this server): {}",
                   fmt::join(r.ignored_fields, ", "));
    if (!r.model.empty() && r.model != model_name_) {
      return send_status(res, not_found("The model '{}' does not exist", r.model));
    }
    if (r.tools_enabled && options_.tool_call_parser.empty())
      return send_status(res, invalid_argument("'tools' need a server started with "
                                               "--tool-call-parser (deepseek_v4)"));
    if (!engine_->serving()) {
      return send_status(res, Status(StatusCode::kUnavailable, "server is shutting down"));
    }
    const int64_t model_context = engine_->model_info().max_context;
    const int64_t max_context = options_.max_model_len > 0
                                    ? std::min(options_.max_model_len, model_context)
                                    : model_context;
    // One entry per prompt (chat: the rendered conversation), with its own output budget.
    std::vector<std::vector<int32_t>> prompts;
    std::vector<GenerationParams> params;
    const size_t n_prompts = ep == ApiEndpoint::kChat ? 1 : r.prompts.size();
    std::vector<std::string> warnings;
    for (size_t i = 0; i < n_prompts; ++i) {
      StatusOr<std::vector<int32_t>> prompt =
          build_prompt(r, ep == ApiEndpoint::kChat ? nullptr : &r.prompts[i], *engine_,
                       options_.chat_prompt.get(), req.body, &warnings);
      if (!prompt.ok()) return send_status(res, prompt.status());
      const int64_t prompt_len = static_cast<int64_t>(prompt->size());
      if (prompt_len >= max_context) {
        return send_status(
            res, out_of_range("This model's maximum context length is {} tokens. However, your "
                              "prompt has {} tokens (at least one must be left for the output).",
                              max_context, prompt_len));
      }
      // As vLLM: an explicit max_tokens that does not fit is an error, not a silent clip.
      GenerationParams g = r.params;
      if (r.max_tokens_given && g.max_tokens > max_context - prompt_len) {
        return send_status(
            res, out_of_range("This model's maximum context length is {} tokens. However, you "
                              "requested {} tokens ({} in the prompt, {} for the completion).",
                              max_context, static_cast<__int128>(prompt_len) + g.max_tokens,
                              prompt_len, g.max_tokens));
      }
      if (!r.max_tokens_given) g.max_tokens = std::min(g.max_tokens, max_context - prompt_len);
      if (ep == ApiEndpoint::kChat && !r.max_tokens_given) g.max_tokens = max_context - prompt_len;
      prompts.push_back(std::move(*prompt));
      params.push_back(std::move(g));
    }
    // Without a tokenizer the text is empty: the ids are the output.
    const bool want_token_ids = r.return_token_ids || engine_->tokenizer() == nullptr;
    const nlohmann::json kvp = kv_transfer_params(req.body);
    SubmitOptions so;
    if (kvp.is_object() && (prompts.size() > 1 || r.n > 1))
      return send_status(res, invalid_argument("kv_transfer_params needs a single choice "
                                               "(one prompt, n = 1)"));
    if (options_.kv_sender != nullptr && kvp.is_object() && kvp.value("do_remote_decode", false))
      return prefill_for_remote_decode(ep, r, prompts[0], res);
    if (options_.kv_receiver != nullptr && kvp.is_object() && kvp.contains("remote_handle")) {
      StatusOr<std::shared_ptr<HandoffState>> st = invalid_argument("kv_transfer_params needs "
          "string remote_handle and remote_endpoint");
      HandoffRecord rec;
      rec.direction = "import";
      auto t0 = Clock::now();
      if (kvp["remote_handle"].is_string() && kvp.contains("remote_endpoint") &&
          kvp["remote_endpoint"].is_string()) {
        rec.endpoint = kvp["remote_endpoint"].get<std::string>();
        // Only the rows this server does not hold cross: growing rows from its own prefix
        // hit on (a unit multiple; the import recomputes if the hit is gone by admission).
        const int64_t from = engine_->peek_cached_prefix(prompts[0]);
        t0 = Clock::now();  // the fetch's latency (not the wait for the engine step above)
        st = options_.kv_receiver->fetch(kvp["remote_endpoint"].get<std::string>(),
                                         kvp["remote_handle"].get<std::string>(), from);
      }
      if (st.ok()) st = [&]() -> StatusOr<std::shared_ptr<HandoffState>> {
        STRATA_RETURN_IF_ERROR(check_handoff_ids(prompts[0], **st));
        return st;
      }();
      rec.latency_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      rec.ok = st.ok();
      if (st.ok()) {
        rec.num_tokens = (*st)->num_tokens;
        rec.from_pos = (*st)->from_pos;
        rec.payload_bytes = (*st)->payload_bytes();
        rec.bytes_per_kind = handoff_bytes_per_kind(**st);
      } else {
        rec.error = st.status().to_string();
      }
      handoffs_.record(std::move(rec));
      if (st.ok()) {
        so.import_state = *st;
        so.fail_on_import_error = !options_.kv_load_failure_recompute;
      } else if (!options_.kv_load_failure_recompute) {
        return send_kv_error(res, st.status());
      }
      // recompute: the prompt is computed here, as a colocated server would.
    }
    so.export_final_state = options_.state_digests;
    // Choice k = p * n + i samples prompt p; with a seed, sample i uses seed + i.
    std::vector<ChoiceRun> runs;
    for (size_t p = 0; p < prompts.size(); ++p) {
      for (int64_t i = 0; i < r.n; ++i) {
        GenerationParams g = params[p];
        if (g.seed) g.seed = *g.seed + static_cast<uint64_t>(i);
        auto submitted = engine_->submit(prompts[p], std::move(g), so);
        if (!submitted.ok()) {
          for (ChoiceRun& run : runs) run.stream->cancel();
          return send_status(res, submitted.status());
        }
        ChoiceRun run{static_cast<int64_t>(p) * r.n + i, static_cast<int64_t>(p), *submitted, {}};
        if (want_token_ids) run.prompt_ids = prompts[p];
        runs.push_back(std::move(run));
      }
    }
    ChoiceRenderOptions ro{ResponseMeta{ep, new_response_id(ep),
                                        static_cast<int64_t>(std::time(nullptr)), model_name_},
                           engine_->tokenizer(), r.params.logprobs >= 0, want_token_ids,
                           r.include_usage, std::nullopt, warnings};
    for (const std::string& w : warnings) spdlog::warn("strata: warning: {}", w);
    if (options_.state_digests && !r.stream) ro.state_graph = engine_->state_graph();
    if (ep == ApiEndpoint::kChat &&
        (!options_.reasoning_parser.empty() || !options_.tool_call_parser.empty())) {
      DeepseekV4ParserOptions po;
      // Without a reasoning parser everything is content (as vLLM).
      po.thinking = !options_.reasoning_parser.empty() && r.chat_options.thinking;
      po.tools_enabled = !options_.tool_call_parser.empty() && r.tools_enabled;
      po.dialect = engine_->model_info().architecture == "deepseek_v41" ? DsmlDialect::kV41
                                                                          : DsmlDialect::kV4;
      ro.chat_parser = po;
    }
    auto choices = std::make_shared<ChoiceStreams>(std::move(runs), std::move(ro));
    if (r.stream) {
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider(
          "text/event-stream",
          [choices](size_t, httplib::DataSink& sink) { return choices->pump(sink); },
          [choices](bool) {
            if (!choices->done()) choices->cancel_unfinished();  // client went away
          });
      return;
    }
    // A client that hangs up while its request runs frees it, as a streaming one does.
    ClientSocket client(HttpFrontEnd::client_fd(), req.version == "HTTP/1.1");
    StatusOr<std::string> body = choices->collect([&client] { return client.peer_closed(); });
    if (!body.ok()) {
      ApiError e = api_error_for(body.status());
      // A failure while generating is ours (500) -- unless it is the request's own size
      // (more state than the whole pool holds: InvalidArgument, a 400 as at admission).
      if (e.http_status < 500 && body.status().code() != StatusCode::kInvalidArgument)
        e.http_status = 500;
      return send_error(res, e);
    }
    res.set_content(*body, "application/json");
  };

  auto guarded = [this, generate](ApiEndpoint ep) {
    return [this, generate, ep](const httplib::Request& req, httplib::Response& res) {
      try {
        generate(ep, req, res);
      } catch (const std::exception& e) {
        send_error(res, {500, "internal_error", "", fmt::format("internal error: {}", e.what())});
      }
    };
  };
  s.Post("/v1/completions", guarded(ApiEndpoint::kCompletions));
  s.Post("/v1/chat/completions", guarded(ApiEndpoint::kChat));
}

}  // namespace strata
