// OpenAI API protocol: request parsing/validation and response rendering for
// /v1/completions and /v1/chat/completions (JSON + SSE chunks), and OpenAI error bodies.
//
// Parsing rules (OpenAI-compatible): unknown fields are ignored and listed in
// ParsedRequest::ignored_fields (the server logs them, as vLLM does); OpenAI fields Strata
// does not implement (functions, tool_choice other than "auto"/"none", response_format other than "text",
// "json_object" (constrained decoding, GenerationParams::json_object) and "json_schema"
// (GenerationParams::json_schema; a schema outside sched/json_schema.h's subset is an
// InvalidArgument naming the keyword and its JSON pointer),
// suffix, echo, ...) are an InvalidArgument naming the field; a known field with the
// wrong JSON type, max_tokens <= 0, n outside [1, 64] or prompts x n past 64, or malformed JSON is an
// InvalidArgument naming the field; null means "not given". Supported extras (as vLLM):
// top_k, min_p, seed, ignore_eos, stop_token_ids, priority, stream_options.include_usage,
// chat_template_kwargs.thinking, repetition_penalty, return_token_ids; OpenAI's presence_penalty,
// frequency_penalty and logit_bias ({"token id": bias}) are applied (sched/request.h). Completions accept `prompt` as a string or as an array of
// token ids (also nested once: [[ids]] or ["text"]).
//
// Error mapping (api_error_for): InvalidArgument/OutOfRange -> 400, NotFound -> 404,
// ResourceExhausted -> 429, Unavailable -> 503, anything else -> 500. Body:
//   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
// JSON output replaces invalid UTF-8 (partial tokens in logprobs) with U+FFFD.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "model/tokenizer.h"
#include "sched/request.h"
#include "serve/chat_template.h"
#include "serve/deepseek_v4_parsers.h"

namespace strata {

enum class ApiEndpoint { kCompletions, kChat };

struct ParsedRequest {
  ApiEndpoint endpoint = ApiEndpoint::kCompletions;
  std::string model;                       // empty when not given
  // Completions: one entry per prompt ("prompt" as a string, a token-id list, or a list of
  // either); each entry is a text or a token-id list. Chat: empty.
  struct Prompt {
    std::optional<std::string> text;
    std::vector<int32_t> tokens;
  };
  std::vector<Prompt> prompts;
  int64_t n = 1;                           // choices per prompt (1..kMaxChoices)
  std::vector<ChatMessage> messages;       // chat
  ChatTemplateOptions chat_options;
  GenerationParams params;
  bool max_tokens_given = false;
  bool stream = false;
  bool include_usage = false;
  bool chat_logprobs = false;              // chat: logprobs: true
  bool return_token_ids = false;           // vLLM's return_token_ids
  std::vector<std::string> ignored_fields; // top-level fields no rule reads
  bool tools_enabled = false;              // chat: tools given and tool_choice != "none"
};

// Limits on a request body's shape, checked while parsing (a deep or huge body is refused
// before it is built): nesting depth of arrays/objects, entries and bytes of `stop`.
inline constexpr int kMaxJsonDepth = 64;
inline constexpr size_t kMaxStopSequences = 64;
inline constexpr size_t kMaxStopBytes = 1024;
// Choices one request may ask for: prompts x n.
inline constexpr int64_t kMaxChoices = 64;

// Parses a request body as JSON, refusing nesting deeper than kMaxJsonDepth as soon as the
// parser reaches it (an 8 MB body of 4 million nested arrays used to allocate ~300 MB).
// InvalidArgument for malformed JSON or too deep nesting.
StatusOr<nlohmann::json> parse_json_body(std::string_view body);

StatusOr<ParsedRequest> parse_openai_request(ApiEndpoint endpoint, std::string_view body);

struct ApiError {
  int http_status = 500;
  std::string type;     // "invalid_request_error", "not_found_error", ...
  std::string code;     // e.g. "context_length_exceeded", "model_not_found"; may be empty
  std::string message;
};
ApiError api_error_for(const Status& status);
std::string render_error(const ApiError& error);

struct ResponseMeta {
  ApiEndpoint endpoint = ApiEndpoint::kCompletions;
  std::string id;       // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;  // unix seconds
  std::string model;
};

struct UsageInfo {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
  // Strata extensions in prompt_tokens_details (only when non-zero / true): positions of the
  // cached prefix recomputed to rebuild ring state ("replayed_tokens"), and "approximate": the
  // prefix was restored by the bounded `replay` policy, so the answer may differ from a cold
  // run's (docs/state.md section 5).
  int64_t replayed_tokens = 0;
  bool approximate_prefix = false;
};

// Token ids to put in a response (vLLM's return_token_ids; the server also sets them for a
// model without a tokenizer, whose text is empty): `prompt` -> "prompt_token_ids" (on the
// choice for completions, top level for chat; in streaming only on the first chunk),
// `output` -> the choice's "token_ids" (in streaming: the chunk's new tokens). Null pointers
// add nothing.
struct TokenIdsOut {
  const std::vector<int32_t>* prompt = nullptr;
  const std::vector<int32_t>* output = nullptr;
};

// One choice of a response: choices[index] (index = prompt * n + sample, as vLLM orders them).
struct ChoiceOut {
  int64_t index = 0;
  std::string text;
  FinishReason reason = FinishReason::kNone;
  const std::vector<TokenLogprob>* logprobs = nullptr;  // null: "logprobs": null
  TokenIdsOut ids;
  // Chat with an output parser: the message's content / reasoning_content / tool_calls come
  // from here (text unused); with tool calls a "stop" finish reads "tool_calls".
  const ParsedChatOutput* parsed = nullptr;
};

// A whole (non-streaming) response: the choices in the given order, one usage for all.
// `warnings` (may be empty) become a top-level "warnings" list.
std::string render_response(const ResponseMeta& meta, const std::vector<ChoiceOut>& choices,
                            const UsageInfo& usage, const Tokenizer* tokenizer,
                            const std::vector<std::string>& warnings = {});
// The same for a single choice (index 0).
std::string render_response(const ResponseMeta& meta, const std::string& text,
                            FinishReason reason, const std::vector<TokenLogprob>* logprobs,
                            const UsageInfo& usage, const Tokenizer* tokenizer,
                            const TokenIdsOut& ids = {});
// One SSE event ("data: {...}\n\n") carrying a text delta and/or the finish reason of
// choice `index`. `first` (the choice's first chunk) adds the chat role delta.
std::string render_stream_chunk(const ResponseMeta& meta, const std::string& text, bool first,
                                 std::optional<FinishReason> reason,
                                 const std::vector<TokenLogprob>* logprobs,
                                 const Tokenizer* tokenizer, const TokenIdsOut& ids = {},
                                 int64_t index = 0);
// One chat SSE event whose delta is given (a parser's reasoning / content / tool-call delta,
// see chat_delta_to_openai); `finish` is the finish reason's name or null. Logprobs and token
// ids (when non-null) ride along.
std::string render_stream_delta(const ResponseMeta& meta, const nlohmann::json& delta,
                                int64_t index, const char* finish,
                                const std::vector<TokenLogprob>* logprobs,
                                const Tokenizer* tokenizer, const TokenIdsOut& ids = {});
// The final usage event (stream_options.include_usage).
std::string render_usage_chunk(const ResponseMeta& meta, const UsageInfo& usage);
// An error as an SSE event: data: {"error": {...}}
std::string render_stream_error(const ApiError& error);

}  // namespace strata
