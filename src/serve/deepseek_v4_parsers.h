// DeepSeek V4 / V4.1 output parsers (reasoning + DSML tool calls) and the V4 prompt-side tool
// rendering, for the OpenAI-compatible chat endpoint. Format, sources and decisions: NOTES.md.
//
// Output side (what vLLM does with `--reasoning-parser deepseek_v4 --tool-call-parser
// deepseek_v4`; semantics from vllm/reasoning/deepseek_v4_reasoning_parser.py,
// vllm/reasoning/basic_parsers.py, vllm/tool_parsers/deepseekv4_tool_parser.py and
// deepseekv32_tool_parser.py in vllm-project/vllm; DSML grammar from DeepSeek's
// encoding_dsv4.py as copied into sgl-project/sglang
// python/sglang/srt/entrypoints/openai/encoding_dsv4.py):
//
//   generated text = [reasoning "</think>"] content ["\n\n" <｜DSML｜tool_calls> ... ]
//
//   <｜DSML｜tool_calls>
//   <｜DSML｜invoke name="get_weather">
//   <｜DSML｜parameter name="city" string="true">Hangzhou</｜DSML｜parameter>
//   <｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>
//   </｜DSML｜invoke>
//   </｜DSML｜tool_calls>
//
// V4.1 spells the tags with a leading space (`<｜DSML｜ calls>`, `<｜DSML｜ invoke`,
// `<｜DSML｜ parameter`), V3.2 wraps in `<｜DSML｜function_calls>`; DsmlDialect picks one.
//
// Processing is three stages, each incremental and byte-exact under any chunking:
//   1. every `<｜end▁of▁sentence｜>` is removed (it never reaches any field);
//   2. reasoning split (thinking mode only; non-thinking mode: everything is content): a
//      leading `<think>` is dropped, reasoning ends at the first `</think>`; with tools enabled
//      a DSML tool-calls start tag also ends reasoning (vLLM's V4 rule: the block, and what
//      follows, is content; the first later `</think>` is then dropped). Without either the
//      whole text is reasoning and content stays empty (vLLM's R1/V4 behaviour);
//   3. tool calls (tools enabled only): text outside blocks is content; the "\n\n" separator
//      before a block and whitespace after a block are dropped; each invoke becomes one
//      OpenAI tool call. string="true" values are JSON strings taken verbatim; other values
//      are kept as raw JSON when they parse as JSON, else they become JSON strings. Arguments
//      read `{"k": v, "k2": v2}` (the spacing of DeepSeek's decode_dsml_to_arguments).
//
// Malformed markup never crashes and never drops non-whitespace text (details in NOTES.md):
// a block that goes wrong before its first invoke is put back verbatim into content; once a
// call has started, it is closed with valid JSON at the first unexpected byte (or at the end
// of the stream) and the rest is content; a non-string value that is not JSON becomes a string.
// `markup_error` reports that a recovery rule fired.
//
// Streaming guarantee (tested exhaustively): for any split of the text into chunks, the
// concatenated deltas equal parse_deepseek_v4_output() field by field (same ids when the
// options carry the same id_seed). Every delta holds complete UTF-8 characters when the input
// is valid UTF-8. Argument fragments of well-formed markup never contain DSML markup.
//
// Prompt side: render_deepseek_v4_prompt() follows DeepSeek's encoding_dsv4.py (V4, not
// V4.1): tools go into the first system message as a "## Tools" section, assistant tool calls
// become DSML blocks, `tool` messages are merged into user turns as <tool_result> blocks in
// call order.
//
// Thread safety: free functions are pure and reentrant. A DeepseekV4StreamParser is one
// request's state: use it from one thread at a time; distinct parsers are independent.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"
#include "serve/chat_template.h"

namespace strata {

// Which DSML tag spelling the model writes.
//   kV4:  <｜DSML｜tool_calls> <｜DSML｜invoke ...> <｜DSML｜parameter ...>   (DeepSeek V4)
//   kV41: <｜DSML｜ calls> <｜DSML｜ invoke ...> <｜DSML｜ parameter ...>     (DeepSeek V4.1)
//   kV32: <｜DSML｜function_calls> <｜DSML｜invoke ...> ...                  (DeepSeek V3.2)
//   kAny: any of the three; each block keeps the spelling its start tag used.
enum class DsmlDialect { kV4, kV41, kV32, kAny };

// ToolCall: serve/chat_template.h.

// A complete (non-streaming) result. Empty strings stand for OpenAI's null.
struct ParsedChatOutput {
  std::string reasoning_content;
  std::string content;
  std::vector<ToolCall> tool_calls;
  bool markup_error = false;  // malformed or truncated DSML was recovered (see NOTES.md)
};

struct DeepseekV4ParserOptions {
  bool thinking = false;       // the prompt ended with "<think>" (else "</think>")
  bool tools_enabled = false;  // the request has tools and tool_choice != "none"
  DsmlDialect dialect = DsmlDialect::kV4;
  // Tool-call ids are make_tool_call_id(id_seed, index). Empty: a random seed per parser
  // (ids then differ between a parser and a separate non-streaming parse of the same text).
  std::string id_seed;
};

// One streaming event, in generation order. Consecutive text events of one kind are merged
// within one feed()/finish() call.
struct ChatDelta {
  enum class Type {
    kReasoning,          // `text` continues reasoning_content
    kContent,            // `text` continues content
    kToolCallBegin,      // a new tool call: tool_index, tool_call_id, tool_name; `text` empty
    kToolCallArguments,  // `text` continues the arguments of tool call `tool_index`
  };
  Type type = Type::kContent;
  std::string text;
  int tool_index = -1;
  std::string tool_call_id;
  std::string tool_name;
  bool operator==(const ChatDelta&) const = default;
};

// "call_" + 24 lowercase hex digits, a pure function of (seed, index).
std::string make_tool_call_id(std::string_view seed, int index);

// Parses a complete generation. Never fails. Equivalent to one DeepseekV4StreamParser fed the
// whole text, then finish(), with the deltas accumulated by accumulate_delta().
ParsedChatOutput parse_deepseek_v4_output(std::string_view text,
                                          const DeepseekV4ParserOptions& options);
// Same with dialect kV4 and id_seed "" (random ids).
ParsedChatOutput parse_deepseek_v4_output(std::string_view text, bool thinking,
                                          bool tools_enabled);

// Adds one delta to a result (appends text; starts or extends tool call `tool_index`).
void accumulate_delta(ParsedChatOutput* out, const ChatDelta& delta);

// The incremental parser. feed() takes any byte chunks (a chunk may end inside a UTF-8
// character or inside a tag) and returns the deltas now certain; text that may still turn
// out to be markup, or an incomplete UTF-8 character, is held back. finish() flushes and
// closes whatever is open. feed() after finish() is ignored (returns nothing). A moved-from
// parser may only be destroyed or assigned to.
class DeepseekV4StreamParser {
 public:
  DeepseekV4StreamParser(bool thinking, bool tools_enabled);
  explicit DeepseekV4StreamParser(const DeepseekV4ParserOptions& options);
  ~DeepseekV4StreamParser();
  DeepseekV4StreamParser(DeepseekV4StreamParser&&) noexcept;
  DeepseekV4StreamParser& operator=(DeepseekV4StreamParser&&) noexcept;

  std::vector<ChatDelta> feed(std::string_view chunk);
  std::vector<ChatDelta> finish();

  bool markup_error() const;   // a recovery rule fired so far
  int tool_call_count() const;  // tool calls begun so far

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// OpenAI chat-completion-chunk `delta` object for one event:
//   {"reasoning_content": t} | {"content": t} |
//   {"tool_calls": [{"index": i, "id": ..., "type": "function",
//                    "function": {"name": ..., "arguments": ""}}]} |
//   {"tool_calls": [{"index": i, "function": {"arguments": t}}]}
nlohmann::json chat_delta_to_openai(const ChatDelta& delta);
// OpenAI `message.tool_calls` array for a non-streaming response.
nlohmann::json tool_calls_to_openai(const std::vector<ToolCall>& calls);

// ---- Prompt side (DeepSeek V4, encoding_dsv4.py) ----

// One chat message as the V4 encoder sees it (serve/chat_template.h's ChatMessage). Roles:
// "system", "developer" (rendered as a user turn, as encoding_dsv4.py does), "user",
// "assistant", "tool", "latest_reminder".
using DeepseekV4Message = ChatMessage;

struct DeepseekV4PromptOptions {
  bool thinking = false;      // thinking_mode "thinking" (else "chat")
  bool drop_thinking = true;  // drop earlier turns' reasoning (off automatically with tools)
  bool add_bos = true;
  std::string reasoning_effort;  // "", "high" (both add nothing) or "max"
  // The last message is an assistant turn to be continued: render it without its EOS.
  bool continue_final_message = false;
};

// Renders the whole prompt: BOS, messages, and (after a final user/tool turn) the generation
// prompt "<｜Assistant｜><think>" or "<｜Assistant｜></think>". `tools_json` is the request's
// OpenAI `tools` array as JSON text ("" or "[]": no tools); key order is kept. Tools are
// attached to the first message when it is a system message, else to an inserted empty system
// message (what SGLang's serving_chat.py does before calling encode_messages).
// Errors: InvalidArgument for no messages, an unknown role, an empty developer message,
// tools_json that is not an array of {"type": "function", "function": {...}} objects, or a
// reasoning_effort other than "", "high", "max".
StatusOr<std::string> render_deepseek_v4_prompt(const std::vector<DeepseekV4Message>& messages,
                                                std::string_view tools_json,
                                                const DeepseekV4PromptOptions& options = {});

// The "## Tools" section for an OpenAI `tools` array (JSON text); one JSON line per function
// in Python json.dumps style. Errors: InvalidArgument as above (an empty array is allowed).
StatusOr<std::string> render_deepseek_v4_tools_section(std::string_view tools_json);

// An assistant turn's tool calls as encoding_dsv4.py writes them into the history:
// "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"n\">\n<｜DSML｜parameter ...>...\n
// </｜DSML｜invoke>\n</｜DSML｜tool_calls>". Arguments that are not a JSON object become one
// string parameter named "arguments" (encoding_dsv4.py's fallback). Empty input: "".
std::string encode_dsml_tool_calls(const std::vector<ToolCall>& calls);

// `value` serialized like Python's json.dumps(value, ensure_ascii=False): ", " and ": "
// separators, key order kept. `json_text` must be valid JSON; errors: InvalidArgument.
StatusOr<std::string> python_style_json(std::string_view json_text);

}  // namespace strata
