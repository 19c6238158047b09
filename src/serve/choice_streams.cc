// ChoiceStreams (see choice_streams.h).
#include "serve/choice_streams.h"

#include <algorithm>
#include <set>
#include <utility>

#include "serve/state_rows.h"

namespace strata {

using Clock = std::chrono::steady_clock;

ChoiceStreams::ChoiceStreams(std::vector<ChoiceRun> runs, ChoiceRenderOptions options)
    : o_(std::move(options)) {
  choices_.reserve(runs.size());
  for (ChoiceRun& r : runs) choices_.emplace_back(std::move(r));
}

void ChoiceStreams::absorb(Choice& c, RequestEvent ev) {
  c.text += ev.text;
  c.out_ids.insert(c.out_ids.end(), ev.tokens.begin(), ev.tokens.end());
  c.logprobs.insert(c.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
  if (ev.finished) {
    c.finished = true;
    c.last = std::move(ev);
  }
}

namespace {
bool failed(const RequestEvent& e) {
  return e.finish_reason == FinishReason::kError || e.finish_reason == FinishReason::kCancelled;
}
Status failure_of(const RequestEvent& e) {
  return e.error.ok() ? Status(StatusCode::kCancelled, "request cancelled") : e.error;
}
}  // namespace

UsageInfo ChoiceStreams::usage() const {
  UsageInfo u;
  std::set<int64_t> prompts;
  for (const Choice& c : choices_) {
    u.completion_tokens += c.last.completion_tokens;
    if (prompts.insert(c.run.prompt_index).second) {
      u.prompt_tokens += c.last.prompt_tokens;
      u.cached_tokens += c.last.cached_tokens;
      u.replayed_tokens += c.last.replayed_tokens;
      u.approximate_prefix = u.approximate_prefix || c.last.approximate_prefix;
    }
  }
  return u;
}

void ChoiceStreams::cancel_unfinished() {
  for (Choice& c : choices_)
    if (!c.finished) c.run.stream->cancel();
}

StatusOr<std::string> ChoiceStreams::collect(const std::function<bool()>& client_gone) {
  bool cancelled = false;
  Clock::time_point checked = Clock::now();
  for (Choice& c : choices_) {
    while (!c.finished) {
      auto ev = c.run.stream->next(std::chrono::milliseconds(50));
      if (!cancelled && client_gone && Clock::now() - checked >= std::chrono::milliseconds(50)) {
        checked = Clock::now();
        if (client_gone()) {
          cancel_unfinished();
          cancelled = true;
        }
      }
      if (!ev) continue;  // the engine always ends a request (shutdown and cancel included)
      absorb(c, std::move(*ev));
    }
    if (failed(c.last)) {
      cancel_unfinished();
      return failure_of(c.last);
    }
  }
  std::vector<ChoiceOut> out;
  for (Choice& c : choices_) {
    ChoiceOut o{c.run.index, c.text, c.last.finish_reason, o_.want_logprobs ? &c.logprobs : nullptr, {}};
    if (o_.want_token_ids) o.ids = TokenIdsOut{&c.run.prompt_ids, &c.out_ids};
    if (o_.chat_parser) {
      c.parsed = parse_deepseek_v4_output(c.text, parser_options(c));
      o.parsed = &c.parsed;
    }
    out.push_back(std::move(o));
  }
  std::string body = render_response(o_.meta, out, usage(), o_.tokenizer, o_.warnings);
  if (o_.state_graph == nullptr) return body;
  nlohmann::json j = nlohmann::json::parse(body);
  for (auto& choice : j["choices"]) {
    const int64_t index = choice["index"].get<int64_t>();
    const Choice& c = *std::find_if(choices_.begin(), choices_.end(),
                                    [&](const Choice& x) { return x.run.index == index; });
    choice["strata_state"] =
        c.last.handoff ? state_rows_json(*c.last.handoff, *o_.state_graph)
                       : nlohmann::json{{"error", c.last.state_error.empty() ? "no state exported"
                                                                             : c.last.state_error}};
  }
  return j.dump();
}

DeepseekV4ParserOptions ChoiceStreams::parser_options(const Choice& c) const {
  DeepseekV4ParserOptions p = *o_.chat_parser;
  p.id_seed = o_.meta.id + "/" + std::to_string(c.run.index);
  return p;
}

std::string ChoiceStreams::render_parsed_event(Choice& c, const RequestEvent& ev) {
  std::string out;
  if (c.first) {
    out += render_stream_delta(o_.meta, {{"role", "assistant"}, {"content", ""}}, c.run.index,
                               nullptr, nullptr, o_.tokenizer);
    c.parser = std::make_unique<DeepseekV4StreamParser>(parser_options(c));
  }
  // Logprobs and token ids of this event ride on its first chunk (an empty delta if the
  // parser holds the text back).
  const std::vector<TokenLogprob>* lps = o_.want_logprobs && !ev.logprobs.empty() ? &ev.logprobs : nullptr;
  TokenIdsOut ids;
  if (o_.want_token_ids) {
    if (!ev.tokens.empty()) ids.output = &ev.tokens;
    if (c.first) ids.prompt = &c.run.prompt_ids;
  }
  c.first = false;
  bool extras = lps != nullptr || ids.output != nullptr || ids.prompt != nullptr;
  std::vector<ChatDelta> deltas = c.parser->feed(ev.text);
  if (ev.finished) {
    std::vector<ChatDelta> rest = c.parser->finish();
    deltas.insert(deltas.end(), rest.begin(), rest.end());
  }
  for (const ChatDelta& d : deltas) {
    out += render_stream_delta(o_.meta, chat_delta_to_openai(d), c.run.index, nullptr,
                               extras ? lps : nullptr, o_.tokenizer, extras ? ids : TokenIdsOut{});
    extras = false;
  }
  if (extras)
    out += render_stream_delta(o_.meta, nlohmann::json::object(), c.run.index, nullptr, lps,
                               o_.tokenizer, ids);
  if (ev.finished) {
    const bool calls = c.parser->tool_call_count() > 0 && ev.finish_reason == FinishReason::kStop;
    out += render_stream_delta(o_.meta, nlohmann::json::object(), c.run.index,
                               calls ? "tool_calls" : finish_reason_name(ev.finish_reason),
                               nullptr, o_.tokenizer);
  }
  return out;
}

std::string ChoiceStreams::render_event(Choice& c, const RequestEvent& ev) {
  if (o_.chat_parser) return render_parsed_event(c, ev);
  std::string out;
  const std::vector<TokenLogprob>* lps = o_.want_logprobs ? &ev.logprobs : nullptr;
  if (!ev.tokens.empty() || !ev.text.empty() || (c.first && o_.meta.endpoint == ApiEndpoint::kChat)) {
    TokenIdsOut ids;
    if (o_.want_token_ids) {
      ids.output = &ev.tokens;
      if (c.first) ids.prompt = &c.run.prompt_ids;
    }
    out += render_stream_chunk(o_.meta, ev.text, c.first, std::nullopt, lps, o_.tokenizer, ids,
                               c.run.index);
    c.first = false;
  }
  if (ev.finished)
    out += render_stream_chunk(o_.meta, "", c.first, ev.finish_reason, nullptr, o_.tokenizer, {},
                               c.run.index);
  return out;
}

bool ChoiceStreams::pump(httplib::DataSink& sink) {
  if (done_) {
    sink.done();
    return true;
  }
  std::string out;
  bool any = false, failure = false;
  // Every unfinished choice once without waiting; if none had news, wait on the first.
  for (int pass = 0; pass < 2 && !any; ++pass) {
    for (Choice& c : choices_) {
      if (c.finished) continue;
      auto ev = c.run.stream->next(std::chrono::milliseconds(pass == 0 ? 0 : 200));
      if (!ev) {
        if (pass == 1) break;
        continue;
      }
      any = true;
      if (ev->finished && failed(*ev)) {
        out += render_stream_error(api_error_for(failure_of(*ev)));
        c.finished = true;
        failure = true;
        break;
      }
      out += render_event(c, *ev);
      absorb(c, std::move(*ev));
      if (pass == 1) break;
    }
  }
  bool all_done = true;
  for (const Choice& c : choices_) all_done = all_done && c.finished;
  if (failure) {
    cancel_unfinished();
    all_done = true;
  } else if (all_done) {
    if (o_.include_usage) out += render_usage_chunk(o_.meta, usage());
    out += "data: [DONE]\n\n";
  }
  if (out.empty() && Clock::now() - last_write_ > std::chrono::seconds(1)) out = ": keep-alive\n\n";
  if (!out.empty()) {
    if (!sink.write(out.data(), out.size())) {
      cancel_unfinished();
      return false;
    }
    last_write_ = Clock::now();
  }
  if (all_done) {
    done_ = true;
    sink.done();
  }
  return true;
}

}  // namespace strata
