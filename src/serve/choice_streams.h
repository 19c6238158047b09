// ChoiceStreams: the engine requests behind one OpenAI response -- one per choice (prompts
// x n, vLLM's order: choices[p * n + i] is sample i of prompt p) -- and how their events
// become the response: collected into one JSON body (non-streaming), or multiplexed into
// SSE chunks each naming its choice index (streaming).
//
// With a chat parser (ChoiceRenderOptions::chat_parser) each choice's text is split into
// reasoning_content / content / tool_calls (serve/deepseek_v4_parsers.h); the streamed deltas
// join to the non-streaming message.
//
// Usage adds up the choices' completion tokens and counts each prompt once (its first
// choice's prompt and cached tokens). A choice that ends in an error or is cancelled fails
// the whole response: the other choices are cancelled (non-streaming: the error status;
// streaming: an SSE error event ends the stream).
// Thread safety: one HTTP handler (or one content provider) at a time.
#pragma once

#include <httplib.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "model/tokenizer.h"
#include "sched/request.h"
#include "serve/deepseek_v4_parsers.h"
#include "serve/openai_api.h"

namespace strata {

class StateGraph;

struct ChoiceRun {
  int64_t index = 0;         // the choice's index in the response
  int64_t prompt_index = 0;  // which prompt it samples (usage counts each prompt once)
  std::shared_ptr<RequestStream> stream;
  std::vector<int32_t> prompt_ids;  // sent back when want_token_ids
};

struct ChoiceRenderOptions {
  ResponseMeta meta;
  const Tokenizer* tokenizer = nullptr;
  bool want_logprobs = false;
  bool want_token_ids = false;  // return_token_ids, or a model without a tokenizer
  bool include_usage = false;   // streaming: stream_options.include_usage
  // Chat with --reasoning-parser / --tool-call-parser: each choice's output goes through a
  // DeepSeek V4 parser (its id_seed is set per choice: response id + index).
  std::optional<DeepseekV4ParserOptions> chat_parser;
  // Lines for the response's "warnings" field (non-streaming; e.g. unknown prompt tokens).
  std::vector<std::string> warnings;
  // Validation mode (`--debug-state-digests`; non-streaming): each choice gets
  // "strata_state" (serve/state_rows.h) from its final event's exported state. Null: off.
  const StateGraph* state_graph = nullptr;
};

class ChoiceStreams {
 public:
  ChoiceStreams(std::vector<ChoiceRun> runs, ChoiceRenderOptions options);

  // Non-streaming: waits for every choice; polls `client_gone` about every 50 ms and cancels
  // every choice once it returns true. Returns the response body, or the first failed
  // choice's error (Cancelled when the client went away).
  StatusOr<std::string> collect(const std::function<bool()>& client_gone);

  // Streaming: one call of cpp-httplib's chunked content provider (waits up to ~200 ms for
  // events, writes them, keeps the connection alive with an SSE comment each second).
  // Returns false when the client went away (every choice is then cancelled).
  bool pump(httplib::DataSink& sink);
  // Cancels every choice that has not finished (client gone).
  void cancel_unfinished();
  bool done() const { return done_; }

 private:
  struct Choice {
    explicit Choice(ChoiceRun r) : run(std::move(r)) {}
    ChoiceRun run;
    bool first = true;
    bool finished = false;
    RequestEvent last;  // the final event
    std::string text;
    std::vector<TokenLogprob> logprobs;
    std::vector<int32_t> out_ids;
    std::unique_ptr<DeepseekV4StreamParser> parser;  // streaming with a chat parser
    ParsedChatOutput parsed;                         // non-streaming with a chat parser
  };
  DeepseekV4ParserOptions parser_options(const Choice& c) const;
  // Streaming with a parser: the chunks of one event (deltas, then the finish chunk).
  std::string render_parsed_event(Choice& c, const RequestEvent& ev);
  // Takes one event of choice c (non-streaming: accumulates it).
  void absorb(Choice& c, RequestEvent ev);
  UsageInfo usage() const;
  std::string render_event(Choice& c, const RequestEvent& ev);

  std::vector<Choice> choices_;
  ChoiceRenderOptions o_;
  bool done_ = false;
  std::chrono::steady_clock::time_point last_write_ = std::chrono::steady_clock::now();
};

}  // namespace strata
