#include "serve/openai_api.h"

#include <cstdint>

#include <cstdlib>
#include <set>

#include <nlohmann/json.hpp>

#include "sched/json_schema.h"

namespace strata {

using json = nlohmann::json;

namespace {

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

bool given(const json& body, const char* key) {
  auto it = body.find(key);
  return it != body.end() && !it->is_null();
}

Status wrong_type(const char* key, const char* want) {
  return invalid_argument("'{}' must be {}", key, want);
}

Status get_int(const json& body, const char* key, int64_t* out) {
  if (!given(body, key)) return ok_status();
  const json& v = body.at(key);
  if (!v.is_number_integer()) return wrong_type(key, "an integer");
  // Unsigned values past int64 would wrap (2^63 read as -2^63): say what the limit is.
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    return invalid_argument("'{}' is {}, larger than the largest integer accepted ({})", key,
                            v.get<uint64_t>(), INT64_MAX);
  *out = v.get<int64_t>();
  return ok_status();
}

Status get_number(const json& body, const char* key, double* out) {
  if (!given(body, key)) return ok_status();
  const json& v = body.at(key);
  if (!v.is_number()) return wrong_type(key, "a number");
  *out = v.get<double>();
  return ok_status();
}

Status get_bool(const json& body, const char* key, bool* out) {
  if (!given(body, key)) return ok_status();
  const json& v = body.at(key);
  if (!v.is_boolean()) return wrong_type(key, "a boolean");
  *out = v.get<bool>();
  return ok_status();
}

Status get_token_list(const json& v, const char* key, std::vector<int32_t>* out) {
  for (const json& t : v) {
    if (!t.is_number_integer()) return wrong_type(key, "an array of integers");
    const int64_t id = t.get<int64_t>();
    if (id < 0 || id > INT32_MAX) return invalid_argument("'{}' holds an invalid token id {}", key, id);
    out->push_back(static_cast<int32_t>(id));
  }
  return ok_status();
}

Status parse_prompt(const json& body, ParsedRequest* r) {
  if (!given(body, "prompt")) return invalid_argument("'prompt' is required");
  const json& p = body.at("prompt");
  auto one = [&](const json& x) -> Status {
    ParsedRequest::Prompt q;
    if (x.is_string()) {
      q.text = x.get<std::string>();
    } else if (x.is_array() && !x.empty() && x[0].is_number_integer()) {
      STRATA_RETURN_IF_ERROR(get_token_list(x, "prompt", &q.tokens));
    } else if (x.is_array() && x.empty()) {
      return invalid_argument("'prompt' must not hold an empty token list");
    } else {
      return wrong_type("prompt", "a string, an array of token ids, or an array of either");
    }
    r->prompts.push_back(std::move(q));
    return ok_status();
  };
  if (p.is_string()) return one(p);
  if (!p.is_array()) return wrong_type("prompt", "a string, an array of token ids, or an array of either");
  if (p.empty()) return invalid_argument("'prompt' must not be empty");
  if (p[0].is_number_integer()) return one(p);  // one prompt of token ids
  if (static_cast<int64_t>(p.size()) > kMaxChoices)
    return invalid_argument("'prompt' holds {} prompts; at most {}", p.size(), kMaxChoices);
  for (const json& x : p) STRATA_RETURN_IF_ERROR(one(x));
  return ok_status();
}

Status parse_messages(const json& body, ParsedRequest* r) {
  if (!given(body, "messages")) return invalid_argument("'messages' is required");
  const json& ms = body.at("messages");
  if (!ms.is_array()) return wrong_type("messages", "an array");
  if (ms.empty()) return invalid_argument("'messages' must not be empty");
  for (const json& m : ms) {
    if (!m.is_object()) return wrong_type("messages", "an array of objects");
    ChatMessage cm;
    if (!m.contains("role") || !m["role"].is_string()) return wrong_type("messages.role", "a string");
    cm.role = m["role"].get<std::string>();
    if (m.contains("content") && !m["content"].is_null()) {
      const json& c = m["content"];
      if (c.is_string()) {
        cm.content = c.get<std::string>();
      } else if (c.is_array()) {
        for (const json& part : c) {
          if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
            return wrong_type("messages.content", "a string or an array of content parts");
          }
          if (part["type"] != "text") {
            return invalid_argument("content part type '{}' is not supported",
                                    part["type"].get<std::string>());
          }
          if (!part.contains("text") || !part["text"].is_string()) {
            return wrong_type("messages.content.text", "a string");
          }
          cm.content += part["text"].get<std::string>();
        }
      } else {
        return wrong_type("messages.content", "a string or an array of content parts");
      }
    }
    if (given(m, "reasoning_content")) {
      if (!m["reasoning_content"].is_string()) return wrong_type("messages.reasoning_content", "a string");
      cm.reasoning_content = m["reasoning_content"].get<std::string>();
    }
    if (given(m, "tool_call_id")) {
      if (!m["tool_call_id"].is_string()) return wrong_type("messages.tool_call_id", "a string");
      cm.tool_call_id = m["tool_call_id"].get<std::string>();
    }
    if (given(m, "tool_calls")) {
      const json& tcs = m["tool_calls"];
      if (!tcs.is_array()) return wrong_type("messages.tool_calls", "an array");
      for (const json& tc : tcs) {
        if (!tc.is_object() || !tc.contains("function") || !tc["function"].is_object() ||
            !tc["function"].contains("name") || !tc["function"]["name"].is_string())
          return wrong_type("messages.tool_calls", "an array of {\"function\": {\"name\", \"arguments\"}}");
        ToolCall call;
        if (tc.contains("id") && tc["id"].is_string()) call.id = tc["id"].get<std::string>();
        call.name = tc["function"]["name"].get<std::string>();
        const json& args = tc["function"].value("arguments", json("{}"));
        call.arguments = args.is_string() ? args.get<std::string>() : args.dump();
        cm.tool_calls.push_back(std::move(call));
      }
    }
    r->messages.push_back(std::move(cm));
  }
  return ok_status();
}

// Top-level fields parse_body reads (both endpoints; "kv_transfer_params" is the server's,
// "user" and "request_id" are accepted and unused, as vLLM).
const std::set<std::string, std::less<>> kReadFields = {
    "model", "prompt", "messages", "max_tokens", "max_completion_tokens", "temperature",
    "top_p", "min_p", "top_k", "seed", "presence_penalty", "frequency_penalty",
    "repetition_penalty", "logit_bias", "n", "best_of", "stop", "stop_token_ids", "ignore_eos",
    "min_tokens", "return_token_ids", "priority", "stream", "stream_options", "logprobs",
    "top_logprobs", "echo", "chat_template_kwargs", "kv_transfer_params", "user", "request_id",
    "response_format", "tools", "tool_choice"};
// OpenAI / vLLM request fields with a meaning Strata does not implement: a 400 naming the
// field, never a silent answer that ignores it.
const std::set<std::string, std::less<>> kUnsupportedFields = {
    "functions", "function_call", "suffix", "audio", "modalities",
    "prediction", "web_search_options", "guided_json", "guided_regex", "guided_choice",
    "guided_grammar", "structured_outputs", "prompt_logprobs", "use_beam_search",
    "truncate_prompt_tokens", "chat_template", "documents", "continue_final_message",
    "logits_processors", "bad_words", "include_stop_str_in_output"};

// A value that asks for nothing (false, an empty list, tool_choice "none") is not a request
// for the unsupported feature.
bool asks_nothing(const std::string& key, const json& v) {
  if (v.is_boolean()) return !v.get<bool>();
  if (v.is_array() || v.is_object()) return v.empty();
  return key == "tool_choice" && v == "none";
}

// "tools" / "tool_choice" (chat): the tools go into the prompt and the output is parsed for
// calls (serve/deepseek_v4_parsers.h). tool_choice "auto" (the default with tools) and
// "none" only: a forced call ("required" or a named function) is not implemented.
Status parse_tools(const json& body, ParsedRequest* r) {
  std::string choice = "auto";
  if (given(body, "tool_choice")) {
    const json& c = body["tool_choice"];
    if (!c.is_string()) return invalid_argument("tool_choice: only \"auto\" and \"none\" are supported");
    choice = c.get<std::string>();
    if (choice != "auto" && choice != "none")
      return invalid_argument("tool_choice '{}' is not supported (only \"auto\" and \"none\")", choice);
  }
  if (!given(body, "tools")) return ok_status();
  const json& t = body["tools"];
  if (!t.is_array()) return wrong_type("tools", "an array of {\"type\": \"function\", \"function\": {...}}");
  if (t.empty() || choice == "none") return ok_status();
  r->chat_options.tools_json = t.dump();
  r->tools_enabled = true;
  return ok_status();
}

// response_format {"type": "json_schema", "json_schema": {"name": ..., "schema": {...},
// "strict": ...}}: the schema is compiled once here (sched/json_schema.h documents the
// subset); `strict` is accepted either way (the output always keeps to the schema).
Status parse_json_schema(const json& f, ParsedRequest* r) {
  if (!given(f, "json_schema") || !f["json_schema"].is_object())
    return wrong_type("response_format.json_schema", "an object with a 'schema'");
  const json& js = f["json_schema"];
  if (given(js, "name") && !js["name"].is_string())
    return wrong_type("response_format.json_schema.name", "a string");
  if (given(js, "strict") && !js["strict"].is_boolean())
    return wrong_type("response_format.json_schema.strict", "a boolean");
  if (!given(js, "schema")) return invalid_argument("'response_format.json_schema.schema' is required");
  if (!js["schema"].is_object())
    return wrong_type("response_format.json_schema.schema", "a JSON Schema object");
  auto schema = JsonSchema::compile(js["schema"]);
  if (!schema.ok())
    return invalid_argument("response_format.json_schema.schema: {}", schema.status().message());
  r->params.json_schema = std::move(schema).value();
  return ok_status();
}

Status check_fields(const json& body, ParsedRequest* r) {
  for (auto it = body.begin(); it != body.end(); ++it) {
    const std::string& k = it.key();
    if (it.value().is_null() || kReadFields.count(k)) continue;
    if (kUnsupportedFields.count(k)) {
      if (asks_nothing(k, it.value())) continue;
      return invalid_argument("'{}' is not supported by this server", k);
    }
    r->ignored_fields.push_back(k);
  }
  if (given(body, "response_format")) {
    const json& f = body["response_format"];
    if (!f.is_object() || !f.contains("type") || !f["type"].is_string())
      return wrong_type("response_format", "an object with a string 'type'");
    if (f["type"] == "json_object") {
      r->params.json_object = true;
    } else if (f["type"] == "json_schema") {
      STRATA_RETURN_IF_ERROR(parse_json_schema(f, r));
    } else if (f["type"] != "text") {
      return invalid_argument("response_format type '{}' is not supported (only 'text', "
                              "'json_object' and 'json_schema')", f["type"].get<std::string>());
    }
  }
  return ok_status();
}

Status parse_body(ApiEndpoint endpoint, const json& body, ParsedRequest* r) {
  if (!body.is_object()) return invalid_argument("request body must be a JSON object");
  STRATA_RETURN_IF_ERROR(check_fields(body, r));
  r->endpoint = endpoint;
  if (given(body, "model")) {
    if (!body["model"].is_string()) return wrong_type("model", "a string");
    r->model = body["model"].get<std::string>();
  }
  if (endpoint == ApiEndpoint::kCompletions) {
    for (const char* k : {"tools", "tool_choice"})
      if (given(body, k) && !asks_nothing(k, body[k]))
        return invalid_argument("'{}' needs /v1/chat/completions", k);
    STRATA_RETURN_IF_ERROR(parse_prompt(body, r));
  } else {
    STRATA_RETURN_IF_ERROR(parse_messages(body, r));
    STRATA_RETURN_IF_ERROR(parse_tools(body, r));
  }
  GenerationParams& g = r->params;
  int64_t max_tokens = -1;
  if (endpoint == ApiEndpoint::kChat && given(body, "max_completion_tokens")) {
    STRATA_RETURN_IF_ERROR(get_int(body, "max_completion_tokens", &max_tokens));
    r->max_tokens_given = true;
  } else if (given(body, "max_tokens")) {
    STRATA_RETURN_IF_ERROR(get_int(body, "max_tokens", &max_tokens));
    r->max_tokens_given = true;
  }
  if (r->max_tokens_given) {
    if (max_tokens <= 0) return invalid_argument("'max_tokens' must be at least 1, got {}", max_tokens);
    g.max_tokens = max_tokens;
  } else {
    g.max_tokens = 16;  // OpenAI's completions default; chat: the caller uses the context
  }
  STRATA_RETURN_IF_ERROR(get_number(body, "temperature", &g.temperature));
  STRATA_RETURN_IF_ERROR(get_number(body, "top_p", &g.top_p));
  STRATA_RETURN_IF_ERROR(get_number(body, "min_p", &g.min_p));
  int64_t top_k = g.top_k;
  STRATA_RETURN_IF_ERROR(get_int(body, "top_k", &top_k));
  // range checked by Engine::submit (-1 and 0 mean off); no clamping here, which used to
  // turn -3 into -1 ("off") silently
  g.top_k = static_cast<int32_t>(std::clamp<int64_t>(top_k, INT32_MIN, INT32_MAX));
  if (given(body, "seed")) {
    int64_t seed = 0;
    STRATA_RETURN_IF_ERROR(get_int(body, "seed", &seed));
    g.seed = static_cast<uint64_t>(seed);
  }
  STRATA_RETURN_IF_ERROR(get_number(body, "presence_penalty", &g.presence_penalty));
  STRATA_RETURN_IF_ERROR(get_number(body, "frequency_penalty", &g.frequency_penalty));
  STRATA_RETURN_IF_ERROR(get_number(body, "repetition_penalty", &g.repetition_penalty));
  if (given(body, "logit_bias")) {
    const json& lb = body["logit_bias"];
    if (!lb.is_object()) return wrong_type("logit_bias", "an object of token id -> bias");
    for (auto it = lb.begin(); it != lb.end(); ++it) {
      const std::string& key = it.key();
      char* end = nullptr;
      const long long id = std::strtoll(key.c_str(), &end, 10);
      if (key.empty() || *end != '\0' || id < 0 || id > INT32_MAX)
        return invalid_argument("logit_bias keys must be token ids, got '{}'", key);
      if (!it.value().is_number()) return wrong_type("logit_bias values", "numbers");
      g.logit_bias.emplace_back(static_cast<int32_t>(id), it.value().get<float>());
    }
  }
  STRATA_RETURN_IF_ERROR(get_int(body, "n", &r->n));
  if (r->n < 1 || r->n > kMaxChoices)
    return invalid_argument("'n' must be in [1, {}], got {}", kMaxChoices, r->n);
  const int64_t n_prompts = std::max<int64_t>(1, static_cast<int64_t>(r->prompts.size()));
  if (n_prompts * r->n > kMaxChoices)
    return invalid_argument("{} prompts x n = {} asks for {} choices; at most {}", n_prompts, r->n,
                            n_prompts * r->n, kMaxChoices);
  // best_of (completions): more candidates than returned, ranked by log-probability. Not
  // implemented: a clear 400 rather than silently returning one plain sample.
  int64_t best_of = 1;
  STRATA_RETURN_IF_ERROR(get_int(body, "best_of", &best_of));
  if (best_of != 1) return invalid_argument("best_of = {} is not supported (only 1)", best_of);
  if (given(body, "stop")) {
    const json& s = body["stop"];
    if (s.is_string()) {
      g.stop.push_back(s.get<std::string>());
    } else if (s.is_array()) {
      if (s.size() > kMaxStopSequences)
        return invalid_argument("'stop' holds {} sequences; at most {}", s.size(), kMaxStopSequences);
      for (const json& x : s) {
        if (!x.is_string()) return wrong_type("stop", "a string or an array of strings");
        g.stop.push_back(x.get<std::string>());
      }
    } else {
      return wrong_type("stop", "a string or an array of strings");
    }
    for (const std::string& x : g.stop)
      if (x.size() > kMaxStopBytes)
        return invalid_argument("a 'stop' sequence of {} bytes; at most {}", x.size(), kMaxStopBytes);
  }
  if (given(body, "stop_token_ids")) {
    if (!body["stop_token_ids"].is_array()) return wrong_type("stop_token_ids", "an array of integers");
    STRATA_RETURN_IF_ERROR(get_token_list(body["stop_token_ids"], "stop_token_ids", &g.stop_token_ids));
  }
  STRATA_RETURN_IF_ERROR(get_bool(body, "ignore_eos", &g.ignore_eos));
  STRATA_RETURN_IF_ERROR(get_int(body, "min_tokens", &g.min_tokens));
  STRATA_RETURN_IF_ERROR(get_bool(body, "return_token_ids", &r->return_token_ids));
  int64_t priority = 0;
  STRATA_RETURN_IF_ERROR(get_int(body, "priority", &priority));
  g.priority = static_cast<int32_t>(std::clamp<int64_t>(priority, INT32_MIN, INT32_MAX));
  STRATA_RETURN_IF_ERROR(get_bool(body, "stream", &r->stream));
  if (given(body, "stream_options")) {
    const json& so = body["stream_options"];
    if (!so.is_object()) return wrong_type("stream_options", "an object");
    STRATA_RETURN_IF_ERROR(get_bool(so, "include_usage", &r->include_usage));
  }
  if (endpoint == ApiEndpoint::kCompletions) {
    int64_t lp = -1;
    STRATA_RETURN_IF_ERROR(get_int(body, "logprobs", &lp));
    if (lp > 20) return invalid_argument("'logprobs' must be at most 20");
    g.logprobs = static_cast<int32_t>(std::max<int64_t>(lp, -1));
    bool echo = false;
    STRATA_RETURN_IF_ERROR(get_bool(body, "echo", &echo));
    if (echo) return invalid_argument("'echo' is not supported");
  } else {
    STRATA_RETURN_IF_ERROR(get_bool(body, "logprobs", &r->chat_logprobs));
    int64_t top = 0;
    STRATA_RETURN_IF_ERROR(get_int(body, "top_logprobs", &top));
    if (top < 0 || top > 20) return invalid_argument("'top_logprobs' must be in [0, 20]");
    if (top > 0 && !r->chat_logprobs) return invalid_argument("'top_logprobs' needs 'logprobs': true");
    g.logprobs = r->chat_logprobs ? static_cast<int32_t>(top) : -1;
    if (given(body, "chat_template_kwargs")) {
      const json& k = body["chat_template_kwargs"];
      if (!k.is_object()) return wrong_type("chat_template_kwargs", "an object");
      STRATA_RETURN_IF_ERROR(get_bool(k, "thinking", &r->chat_options.thinking));
      STRATA_RETURN_IF_ERROR(get_bool(k, "enable_thinking", &r->chat_options.thinking));
    }
  }
  return ok_status();
}

std::string token_text(const Tokenizer* tok, int32_t id) {
  return tok != nullptr ? tok->token_bytes(id) : std::to_string(id);
}

json completion_logprobs(const std::vector<TokenLogprob>& lps, const Tokenizer* tok) {
  json j;
  j["tokens"] = json::array();
  j["token_logprobs"] = json::array();
  j["top_logprobs"] = json::array();
  j["text_offset"] = json::array();
  int64_t offset = 0;
  for (const TokenLogprob& lp : lps) {
    const std::string t = token_text(tok, lp.token);
    j["tokens"].push_back(t);
    j["token_logprobs"].push_back(lp.logprob);
    json top = json::object();
    for (const auto& [id, v] : lp.top) top[token_text(tok, id)] = v;
    j["top_logprobs"].push_back(top);
    j["text_offset"].push_back(offset);
    offset += static_cast<int64_t>(t.size());
  }
  return j;
}

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

json chat_logprobs(const std::vector<TokenLogprob>& lps, const Tokenizer* tok) {
  json content = json::array();
  for (const TokenLogprob& lp : lps) {
    const std::string t = token_text(tok, lp.token);
    json e = {{"token", t}, {"logprob", lp.logprob}, {"bytes", bytes_of(t)}};
    json top = json::array();
    for (const auto& [id, v] : lp.top) {
      const std::string tt = token_text(tok, id);
      top.push_back({{"token", tt}, {"logprob", v}, {"bytes", bytes_of(tt)}});
    }
    e["top_logprobs"] = top;
    content.push_back(e);
  }
  return {{"content", content}};
}

json usage_json(const UsageInfo& u) {
  json j = {{"prompt_tokens", u.prompt_tokens},
            {"completion_tokens", u.completion_tokens},
            {"total_tokens", u.prompt_tokens + u.completion_tokens}};
  j["prompt_tokens_details"] = {{"cached_tokens", u.cached_tokens}};
  if (u.replayed_tokens > 0) j["prompt_tokens_details"]["replayed_tokens"] = u.replayed_tokens;
  if (u.approximate_prefix) j["prompt_tokens_details"]["approximate"] = true;
  return j;
}

json base_json(const ResponseMeta& m, bool chunk) {
  const char* object = m.endpoint == ApiEndpoint::kCompletions
                           ? "text_completion"
                           : (chunk ? "chat.completion.chunk" : "chat.completion");
  return {{"id", m.id}, {"object", object}, {"created", m.created}, {"model", m.model}};
}

json finish_json(std::optional<FinishReason> r) {
  if (!r || *r == FinishReason::kNone) return nullptr;
  return finish_reason_name(*r);
}

}  // namespace

StatusOr<json> parse_json_body(std::string_view body) {
  struct TooDeep {};
  try {
    return json::parse(body, [](int depth, json::parse_event_t ev, json&) {
      if ((ev == json::parse_event_t::object_start || ev == json::parse_event_t::array_start) &&
          depth >= kMaxJsonDepth)
        throw TooDeep{};
      return true;
    });
  } catch (const json::exception& e) {
    return invalid_argument("malformed JSON: {}", e.what());
  } catch (const TooDeep&) {
    return invalid_argument("JSON nested deeper than {} levels", kMaxJsonDepth);
  }
}

StatusOr<ParsedRequest> parse_openai_request(ApiEndpoint endpoint, std::string_view body) {
  STRATA_ASSIGN_OR_RETURN(json j, parse_json_body(body));
  ParsedRequest r;
  try {
    STRATA_RETURN_IF_ERROR(parse_body(endpoint, j, &r));
  } catch (const json::exception& e) {
    return invalid_argument("invalid request: {}", e.what());
  }
  return r;
}

ApiError api_error_for(const Status& st) {
  ApiError e;
  e.message = st.message();
  switch (st.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kUnimplemented:
      e.http_status = 400;
      e.type = "invalid_request_error";
      break;
    case StatusCode::kOutOfRange:
      e.http_status = 400;
      e.type = "invalid_request_error";
      e.code = "context_length_exceeded";
      break;
    case StatusCode::kNotFound:
      e.http_status = 404;
      e.type = "invalid_request_error";
      e.code = "model_not_found";
      break;
    case StatusCode::kResourceExhausted:
      e.http_status = 429;
      e.type = "rate_limit_error";
      break;
    case StatusCode::kUnavailable:
      e.http_status = 503;
      e.type = "service_unavailable";
      break;
    default:
      e.http_status = 500;
      e.type = "internal_error";
      break;
  }
  return e;
}

std::string render_error(const ApiError& e) {
  json err = {{"message", e.message}, {"type", e.type}, {"param", nullptr}};
  err["code"] = e.code.empty() ? json(nullptr) : json(e.code);
  return dump({{"error", err}});
}

namespace {
// Adds ids (TokenIdsOut) to a response or chunk `j` with its one choice `choice`.
void add_token_ids(ApiEndpoint ep, const TokenIdsOut& ids, json* j, json* choice) {
  if (ids.prompt != nullptr) {
    (ep == ApiEndpoint::kCompletions ? *choice : *j)["prompt_token_ids"] = *ids.prompt;
  }
  if (ids.output != nullptr) (*choice)["token_ids"] = *ids.output;
}
}  // namespace

std::string render_response(const ResponseMeta& meta, const std::vector<ChoiceOut>& choices,
                            const UsageInfo& usage, const Tokenizer* tokenizer,
                            const std::vector<std::string>& warnings) {
  json j = base_json(meta, false);
  j["choices"] = json::array();
  for (const ChoiceOut& c : choices) {
    json choice = {{"index", c.index}, {"finish_reason", finish_json(c.reason)}};
    if (meta.endpoint == ApiEndpoint::kCompletions) {
      choice["text"] = c.text;
      choice["logprobs"] = c.logprobs ? completion_logprobs(*c.logprobs, tokenizer) : json(nullptr);
    } else if (c.parsed != nullptr) {
      const ParsedChatOutput& p = *c.parsed;
      json msg = {{"role", "assistant"},
                  {"content", p.content.empty() && !p.tool_calls.empty() ? json(nullptr) : json(p.content)},
                  {"reasoning_content", p.reasoning_content.empty() ? json(nullptr) : json(p.reasoning_content)}};
      if (!p.tool_calls.empty()) {
        msg["tool_calls"] = tool_calls_to_openai(p.tool_calls);
        if (c.reason == FinishReason::kStop) choice["finish_reason"] = "tool_calls";
      }
      choice["message"] = std::move(msg);
      choice["logprobs"] = c.logprobs ? chat_logprobs(*c.logprobs, tokenizer) : json(nullptr);
    } else {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
      choice["logprobs"] = c.logprobs ? chat_logprobs(*c.logprobs, tokenizer) : json(nullptr);
    }
    add_token_ids(meta.endpoint, c.ids, &j, &choice);
    j["choices"].push_back(std::move(choice));
  }
  j["usage"] = usage_json(usage);
  if (!warnings.empty()) j["warnings"] = warnings;
  return dump(j);
}

std::string render_response(const ResponseMeta& meta, const std::string& text,
                            FinishReason reason, const std::vector<TokenLogprob>* logprobs,
                            const UsageInfo& usage, const Tokenizer* tokenizer,
                            const TokenIdsOut& ids) {
  return render_response(meta, {ChoiceOut{0, text, reason, logprobs, ids}}, usage, tokenizer);
}

std::string render_stream_chunk(const ResponseMeta& meta, const std::string& text, bool first,
                                std::optional<FinishReason> reason,
                                const std::vector<TokenLogprob>* logprobs,
                                const Tokenizer* tokenizer, const TokenIdsOut& ids,
                                int64_t index) {
  json j = base_json(meta, true);
  json choice = {{"index", index}, {"finish_reason", finish_json(reason)}};
  if (meta.endpoint == ApiEndpoint::kCompletions) {
    choice["text"] = text;
    choice["logprobs"] = logprobs ? completion_logprobs(*logprobs, tokenizer) : json(nullptr);
  } else {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || first) delta["content"] = text;
    choice["delta"] = delta;
    choice["logprobs"] = logprobs ? chat_logprobs(*logprobs, tokenizer) : json(nullptr);
  }
  add_token_ids(meta.endpoint, ids, &j, &choice);
  j["choices"] = json::array({choice});
  return "data: " + dump(j) + "\n\n";
}

std::string render_stream_delta(const ResponseMeta& meta, const json& delta, int64_t index,
                                const char* finish, const std::vector<TokenLogprob>* logprobs,
                                const Tokenizer* tokenizer, const TokenIdsOut& ids) {
  json j = base_json(meta, true);
  json choice = {{"index", index}, {"delta", delta},
                 {"finish_reason", finish ? json(finish) : json(nullptr)},
                 {"logprobs", logprobs ? chat_logprobs(*logprobs, tokenizer) : json(nullptr)}};
  add_token_ids(meta.endpoint, ids, &j, &choice);
  j["choices"] = json::array({choice});
  return "data: " + dump(j) + "\n\n";
}

std::string render_usage_chunk(const ResponseMeta& meta, const UsageInfo& usage) {
  json j = base_json(meta, true);
  j["choices"] = json::array();
  j["usage"] = usage_json(usage);
  return "data: " + dump(j) + "\n\n";
}

std::string render_stream_error(const ApiError& error) {
  return "data: " + render_error(error) + "\n\n";
}

}  // namespace strata
