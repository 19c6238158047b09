// HttpServer: the OpenAI-compatible HTTP front end (cpp-httplib) over an Engine.
//
// Endpoints:
//   POST /v1/completions, POST /v1/chat/completions  (JSON, or SSE with "stream": true,
//        ending in "data: [DONE]"; an error after the stream started is sent as
//        data: {"error": {...}} and the stream ends without [DONE])
//   GET  /v1/models   (one model; "max_model_len" as vLLM; Strata adds "vocab_size" and
//        "prefix_alignment", the prefix-cache hit granularity in tokens, 0 = none)
//   GET  /health      (200 while serving, 503 after shutdown began)
//   GET  /metrics     (Prometheus text; see server_metrics.h)
//   GET  /dashboard   (a live HTML dashboard polling the two endpoints below; self-contained,
//        works offline; serve/dashboard_page.h)
//   GET  /v1/dashboard/state  (JSON: state graph, requests with phases, cache usage, recent
//        PD handoffs; serve/dashboard_state.h)
//   GET  /v1/disaggregation, POST /v1/disaggregation/handshake  (PD roles; see below)
// Errors use the OpenAI body (openai_api.h) with 4xx/5xx codes; bodies larger than
// max_body_bytes get 413, unknown routes 404, an unknown "model" 404.
// Prompts: text is tokenized (BOS prepended when the model has one; special tokens in the
// text are parsed); chat messages go through the model's chat template (chat_template.h).
// A client that disconnects mid-stream cancels its request (the engine frees its state).
// SSE streams send a comment line every ~1 s while idle, so disconnects are noticed even
// while a request waits in the queue.
//
// HTTP/1.1 on serve/http_front_end.h (libmicrohttpd, event-driven): slow or idle
// connections hold no thread; pipelined and half-closed requests are answered. Each
// request being generated holds one of `threads` workers (a stream until it ends), so that
// pool bounds concurrent generations; GET endpoints have their own workers.
// Thread safety: start/stop from one controlling thread; handlers run on the workers.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <thread>

#include "base/status.h"
#include "model/tokenizer.h"
#include "sched/engine.h"
#include "serve/handoff_log.h"
#include "serve/request_guard.h"
#include "serve/server_metrics.h"

namespace strata {

class ChatPrompt;
class KvTransferSender;
class HttpFrontEnd;
class KvTransferReceiver;

struct HttpServerOptions {
  std::string host = "127.0.0.1";  // loopback by default
  int port = 8000;                 // 0: any free port (see port())
  int threads = 64;                // request workers (each SSE stream holds one)
  size_t max_body_bytes = 8 << 20; // larger request bodies get 413
  std::string model_name;          // served model id (default: ModelInfo::name)
  // PD disaggregation (issue 23; README "Prefill/decode disaggregation"): "" = colocated,
  // "prefill" (needs kv_sender) or "decode" (needs kv_receiver). Both must outlive the server.
  std::string disaggregation_mode;
  KvTransferSender* kv_sender = nullptr;
  KvTransferReceiver* kv_receiver = nullptr;
  // --kv-load-failure-policy: false = fail (the request ends with an error, 502), true =
  // recompute (the prompt is computed locally; the output equals a colocated run's).
  bool kv_load_failure_recompute = false;
  // --max-model-len: the context limit per request (0: the model's). A prompt plus an
  // explicit max_tokens past it is a 400 context_length_exceeded (vLLM); without max_tokens,
  // generation stops at the limit.
  int64_t max_model_len = 0;
  // Chat output parsers (vLLM's --reasoning-parser / --tool-call-parser): "" = off, or
  // "deepseek_v4" (serve/deepseek_v4_parsers.h; DeepSeek V4 / V4.1 models only): the reasoning
  // goes to `reasoning_content`, DSML tool calls to `tool_calls` (and a request's `tools`
  // are accepted only with a tool-call parser).
  std::string reasoning_parser;
  std::string tool_call_parser;
  // --chat-template (a file or the template text; "" = none) and the template the serving
  // stack resolved from it or from the checkpoint (serve/chat_prompt.h); null: the built-in
  // format.
  std::string chat_template;
  std::shared_ptr<const ChatPrompt> chat_prompt;
  // Prefix of every /metrics name ("strata:"; "vllm:" makes vLLM's dashboards work).
  std::string metrics_prefix = "strata:";
  // --debug-state-digests (validation mode): every request exports its state when it ends and
  // non-streaming responses carry it hashed row by row (serve/state_rows.h); costs a copy of
  // each request's state. Needs a runner with a state graph and export (not under DCP).
  bool state_digests = false;
  // API key, allowed hosts, CORS (serve/request_guard.h).
  RequestGuardOptions guard;
};

class HttpServer {
 public:
  // `engine` (with its tokenizer) and `metrics` must outlive the server.
  HttpServer(Engine* engine, ServerMetrics* metrics, HttpServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and starts listening on a background thread. Unavailable if the address cannot
  // be bound.
  Status start();
  int port() const { return port_; }
  const std::string& model_name() const { return model_name_; }
  // Stops accepting and joins the listener. Call engine->shutdown() first so that open
  // streams end (with an error event) instead of waiting.
  void stop();
  // Blocks until stop() is called from another thread or the listener ends.
  void wait();

 private:
  void install_routes();

  Engine* engine_;
  ServerMetrics* metrics_;
  HttpServerOptions options_;
  std::string model_name_;
  std::unique_ptr<HttpFrontEnd> server_;
  int port_ = -1;
  std::atomic<bool> stopping_{false};
  HandoffLog handoffs_;  // the last 32 PD exports / imports, for the dashboard
};

}  // namespace strata
