#!/usr/bin/env python3
"""Renders every template in templates/ with Python Jinja2 and writes expected.json.

The Jinja2 environment is the one transformers' apply_chat_template builds
(transformers/utils/chat_template_utils.py): ImmutableSandboxedEnvironment with
trim_blocks=True, lstrip_blocks=True, the loopcontrols extension and the {% generation %}
tag, plus its raise_exception, strftime_now and tojson. The render call passes
messages, tools, documents and add_generation_prompt like apply_chat_template does, plus
the special tokens and extra kwargs of each case. strftime_now reads a fixed clock
(NOW_UNIX_SECONDS, UTC) so that the expected text is reproducible; the C++ test sets
JinjaRenderOptions::now_unix_seconds to the same value.

Usage: python3 make_expected.py   (needs jinja2 3.x; writes expected.json next to it)
"""
import copy
import json
import os
from datetime import datetime, timezone

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
NOW_UNIX_SECONDS = 1721989800  # 2024-07-26 10:30:00 UTC


class AssistantTracker(Extension):
    """transformers' {% generation %} tag (renders its body unchanged)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        call = self.call_method("_render_assistant", [])
        return nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _render_assistant(self, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        now = datetime.fromtimestamp(NOW_UNIX_SECONDS, tz=timezone.utc).replace(tzinfo=None)
        return now.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                       extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


# ---- conversations ------------------------------------------------------------------------

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
TOOLS = [
    {"type": "function", "function": {
        "name": "get_current_weather",
        "description": "Get the current weather in a given location",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string",
                             "description": "The city and state, e.g. San Francisco, CA"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"],
                         "description": "Température unit"},
            },
            "required": ["location"],
        },
    }},
    {"type": "function", "function": {
        "name": "search_web",
        "description": "Search the web for a query.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Search terms"},
                "max_results": {"type": "integer", "description": "How many results",
                                "default": 5, "minimum": 1, "maximum": 20.5},
                "filters": {"type": "array", "items": {"type": "string"},
                            "description": "Optional filters"},
                "safe": {"type": "boolean", "description": "Safe search", "nullable": True},
            },
            "required": ["query"],
        },
    }},
]
WEATHER_ARGS = {"location": "Paris, France", "unit": "celsius"}
SEARCH_ARGS = {"query": "jinja \"templates\"", "max_results": 3}


def tool_call(call_id, name, args, args_as_string):
    return {"id": call_id, "type": "function",
            "function": {"name": name,
                         "arguments": json.dumps(args) if args_as_string else args}}


def tool_conversations(args_as_string):
    s = "_strargs" if args_as_string else ""
    one_call = [
        SYSTEM,
        {"role": "user", "content": "What's the weather like in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            tool_call("call12345", "get_current_weather", WEATHER_ARGS, args_as_string)]},
        {"role": "tool", "tool_call_id": "call12345", "name": "get_current_weather",
         "content": "{\"temperature\": 22, \"unit\": \"celsius\"}"},
    ]
    answered = one_call + [
        {"role": "assistant", "content": "It is 22 °C in Paris."},
        {"role": "user", "content": "Thanks!"},
    ]
    parallel = [
        {"role": "user", "content": "Weather in Paris, and search for jinja."},
        {"role": "assistant", "content": "Let me check.", "tool_calls": [
            tool_call("call12345", "get_current_weather", WEATHER_ARGS, args_as_string),
            tool_call("call67890", "search_web", SEARCH_ARGS, args_as_string)]},
        {"role": "tool", "tool_call_id": "call12345", "name": "get_current_weather",
         "content": "sunny"},
        {"role": "tool", "tool_call_id": "call67890", "name": "search_web",
         "content": "Jinja is a template engine."},
    ]
    return {
        "tool_call" + s: one_call,
        "tool_call_answered" + s: answered,
        "parallel_tool_calls" + s: parallel,
    }


CONVERSATIONS = {
    "user_only": [{"role": "user", "content": "Hello!"}],
    "system_user": [SYSTEM, {"role": "user", "content": "What is the capital of France?"}],
    "multi_turn": [
        SYSTEM,
        {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "Hello! How can I help you today?"},
        {"role": "user", "content": "Tell me a joke."},
        {"role": "assistant", "content": "  Why did the chicken cross the road?  \n"},
        {"role": "user", "content": "Another one, please."},
    ],
    "multi_turn_no_system": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "How are you?"},
    ],
    "ends_with_assistant": [
        SYSTEM,
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
    ],
    "special_text": [
        {"role": "user", "content": "Line 1\nLine 2\n\n  indented\ttab \"quotes\" 'single' "
                                    "{{ not jinja }} {% raw %} <tag> & é 中文 🙂 \\ backslash\n"},
    ],
    "thinking_history": [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "<think>\nSimple arithmetic.\n</think>\n\nIt is 4."},
        {"role": "user", "content": "And 3+3?"},
    ],
    "reasoning_content": [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "It is 4.", "reasoning_content": "Add them.",
         "thinking": "Add them."},
        {"role": "user", "content": "And 3+3?"},
    ],
    "multimodal_parts": [
        {"role": "system", "content": [{"type": "text", "text": "Describe images."}]},
        {"role": "user", "content": [{"type": "image"},
                                     {"type": "text", "text": "What is in this picture?"}]},
    ],
    "system_only_alternation_error": [
        {"role": "user", "content": "a"},
        {"role": "user", "content": "b"},
    ],
    "empty_messages": [],
}
CONVERSATIONS.update(tool_conversations(False))
CONVERSATIONS.update(tool_conversations(True))
CONVERSATIONS["tools_no_calls"] = [SYSTEM, {"role": "user", "content": "Find news about AI."}]

# Conversations rendered with add_generation_prompt both false and true; others: true only.
BOTH_GEN_PROMPT = {"user_only", "multi_turn", "ends_with_assistant", "tool_call_answered"}
TOOL_CONVS = {name for name in CONVERSATIONS if "tool" in name}

# ---- templates ---------------------------------------------------------------------------

LLAMA3 = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
CHATML = {"eos_token": "<|im_end|>"}
MISTRAL = {"bos_token": "<s>", "eos_token": "</s>"}
DEEPSEEK = {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"}
GEMMA = {"bos_token": "<bos>", "eos_token": "<eos>"}

# template file stem -> (special tokens, [(variant name, extra kwargs)])
TEMPLATES = {
    "meta-llama-Llama-2-13b-chat-hf": (MISTRAL, []),
    "meta-llama-Llama-3.1-8B-Instruct": (LLAMA3, [
        ("builtin_tools", {"builtin_tools": ["brave_search", "wolfram_alpha"]}),
        ("date_string", {"date_string": "01 Jan 2025"}),
        ("tools_in_system", {"tools_in_user_message": False}),
    ]),
    "meta-llama-Llama-3.2-3B-Instruct": (LLAMA3, [
        ("tools_in_system", {"tools_in_user_message": False}),
    ]),
    "meta-llama-Llama-3.3-70B-Instruct": (LLAMA3, [
        ("builtin_tools", {"builtin_tools": ["brave_search", "code_interpreter"]}),
    ]),
    "Qwen-Qwen2.5-7B-Instruct": (CHATML, []),
    "Qwen-Qwen3-0.6B": (CHATML, [("no_thinking", {"enable_thinking": False})]),
    "Qwen-QwQ-32B": (CHATML, []),
    "mistralai-Mistral-7B-Instruct-v0.1": (MISTRAL, []),
    "mistralai-Mixtral-8x7B-Instruct-v0.1": (MISTRAL, []),
    "mistralai-Mistral-Nemo-Instruct-2407": (MISTRAL, []),
    "Mistral-Small-3.2-24B-Instruct-2506": (MISTRAL, []),
    "unsloth-mistral-Devstral-Small-2507": (MISTRAL, []),
    "google-gemma-7b-it": (GEMMA, []),
    "google-gemma-2-2b-it": (GEMMA, []),
    "google-gemma-3-it": (GEMMA, []),
    "microsoft-Phi-3.5-mini-instruct": ({"bos_token": "<s>", "eos_token": "<|endoftext|>"}, []),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": (DEEPSEEK, []),
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": (DEEPSEEK, []),
    "deepseek-ai-DeepSeek-V3.1": (DEEPSEEK, [("thinking", {"thinking": True})]),
    "ibm-granite-granite-3.3-2B-Instruct": ({"bos_token": "<|end_of_text|>",
                                             "eos_token": "<|end_of_text|>"}, [
        ("thinking", {"thinking": True}),
        ("documents", {"documents": [{"doc_id": 1, "text": "Paris is in France."},
                                     {"doc_id": "two", "text": "Lyon too."}],
                       "controls": {"citations": True, "hallucinations": True}}),
    ]),
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": (LLAMA3, []),
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": (LLAMA3, []),
    "openai-gpt-oss-120b": ({"bos_token": "<|startoftext|>", "eos_token": "<|return|>"}, [
        ("reasoning_high", {"reasoning_effort": "high",
                            "builtin_tools": ["browser", "python"],
                            "model_identity": "You are a test model."}),
    ]),
    "CohereForAI-c4ai-command-r-plus-tool_use": ({"bos_token": "<BOS_TOKEN>",
                                                  "eos_token": "<|END_OF_TURN_TOKEN|>"}, []),
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use": ({"bos_token": "<BOS_TOKEN>",
                                                       "eos_token": "<|END_OF_TURN_TOKEN|>"}, []),
    "fireworks-ai-llama-3-firefunction-v2": (LLAMA3, []),
    "meetkai-functionary-medium-v3.1": (LLAMA3, []),
    "meetkai-functionary-medium-v3.2": (LLAMA3, []),
    "moonshotai-Kimi-K2": ({"bos_token": "[BOS]", "eos_token": "[EOS]"}, []),
    "ByteDance-Seed-OSS": ({"bos_token": "<seed:bos>", "eos_token": "<seed:eos>"}, [
        ("thinking_budget", {"thinking_budget": 512}),
    ]),
    "NVIDIA-Nemotron-Nano-v2": ({"bos_token": "<SPECIAL_10>", "eos_token": "<SPECIAL_11>"}, []),
    "teknium-OpenHermes-2.5-Mistral-7B": (CHATML, []),
}


def render(env, source, ctx):
    try:
        return {"output": env.from_string(source).render(**ctx)}
    except jinja2.exceptions.TemplateSyntaxError as e:
        raise SystemExit(f"template does not parse in Jinja2: {e}")
    except jinja2.exceptions.TemplateError as e:
        # raise_exception() raises a plain TemplateError; Jinja's own runtime errors are
        # subclasses (UndefinedError, SecurityError, ...).
        if type(e) is jinja2.exceptions.TemplateError:
            return {"error": str(e), "raised": True}
        return {"error": f"{type(e).__name__}: {e}", "raised": False}
    except Exception as e:  # TypeError, ValueError, ... from Python operations
        return {"error": f"{type(e).__name__}: {e}", "raised": False}


def main():
    env = make_env()
    cases = []
    for stem, (tokens, variants) in TEMPLATES.items():
        with open(os.path.join(HERE, "templates", stem + ".jinja"), encoding="utf-8") as f:
            source = f.read()
        takes_tools = "tools" in source
        runs = []
        for conv in CONVERSATIONS:
            if conv in TOOL_CONVS and not takes_tools:
                continue
            gens = [False, True] if conv in BOTH_GEN_PROMPT else [True]
            for gen in gens:
                runs.append((conv, gen, {}, ""))
        for vname, extra in variants:
            for conv in ("system_user", "multi_turn", "tool_call", "thinking_history"):
                if conv in TOOL_CONVS and not takes_tools:
                    continue
                runs.append((conv, True, extra, vname))
        for conv, gen, extra, vname in runs:
            vars_ = dict(tokens)
            vars_["add_generation_prompt"] = gen
            vars_.update(extra)
            ctx = {"messages": copy.deepcopy(CONVERSATIONS[conv]),
                   "tools": TOOLS if conv in TOOL_CONVS else None,
                   "documents": None}
            ctx.update(vars_)
            name = f"{conv}{'' if gen else '_nogen'}{'_' + vname if vname else ''}"
            case = {"template": stem + ".jinja", "name": name, "conversation": conv,
                    "with_tools": conv in TOOL_CONVS, "vars": vars_}
            case.update(render(env, source, ctx))
            cases.append(case)
    data = {
        "generator": "make_expected.py with jinja2 " + jinja2.__version__,
        "now_unix_seconds": NOW_UNIX_SECONDS,
        "conversations": CONVERSATIONS,
        "tools": TOOLS,
        "cases": cases,
    }
    with open(os.path.join(HERE, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, indent=1)
        f.write("\n")
    errors = sum(1 for c in cases if "error" in c)
    print(f"{len(cases)} cases ({errors} expected errors) for {len(TEMPLATES)} templates")


if __name__ == "__main__":
    main()
