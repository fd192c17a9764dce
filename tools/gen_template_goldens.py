#!/usr/bin/env python3
"""Chat-template goldens for tern's Jinja interpreter (src/chat/).

Renders every template in tests/data/templates/src/*.jinja over a fixed set of conversations with
Hugging Face transformers' own `render_jinja_template` (the function `apply_chat_template` calls), so
the reference is jinja2 configured exactly as HF configures it: ImmutableSandboxedEnvironment,
trim_blocks, lstrip_blocks, loopcontrols, the `generation` tag, HF's `tojson`, `raise_exception`,
`strftime_now`. Messages go through HF's `_normalize_chat_messages` first (None-valued keys dropped),
as `apply_chat_template` does.

Writes:
  tests/data/templates/cases.json           the conversations (inputs), one entry per case
  tests/data/templates/goldens/<name>.json  per template: {case: {"output": str} | {"error": str}}

A template that raises in Python records the error; tern must raise for it too.
`strftime_now` is pinned to FIXED_NOW so renders are reproducible (tern's test passes the same time).

Usage: python3 tools/gen_template_goldens.py [--data tests/data/templates]
Needs: transformers (>= 4.5x with utils/chat_template_utils.render_jinja_template), jinja2 >= 3.1.6.
"""
import argparse
import datetime as real_datetime
import json
import os
import sys

import jinja2
from transformers.utils import chat_template_utils as ctu

# 2025-03-14 09:26:53, a Friday: Llama 3.x templates print it as "14 Mar 2025".
FIXED_NOW = real_datetime.datetime(2025, 3, 14, 9, 26, 53)


class _FixedDatetime(real_datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return FIXED_NOW


# HF's strftime_now closure reads the module global `datetime` at call time.
ctu.datetime = _FixedDatetime

BOS, EOS = "<s>", "</s>"
# Templates whose model we have: render them with that model's own special tokens.
SPECIAL_TOKENS = {
    "HuggingFaceTB-SmolLM2-135M-Instruct": ("<|im_start|>", "<|im_end|>"),
}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "City name, e.g. \"Paris\""},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["location"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search_code",
        "description": "Search the repository for a pattern.",
        "parameters": {
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "A regular expression."},
                "paths": {"type": "array", "items": {"type": "string"}, "description": "Folders to search."},
                "max_results": {"type": "integer", "default": 20},
                "min_score": {"type": "number", "default": 0.5},
            },
            "required": ["pattern"],
        },
    },
}
TOOLS = [WEATHER_TOOL, SEARCH_TOOL]

SYSTEM = {"role": "system", "content": "You are a careful assistant."}
USER = {"role": "user", "content": "What is the weather in Paris?"}
CALL_WEATHER = {"id": "call0a1b2", "type": "function",
                "function": {"name": "get_weather", "arguments": {"location": "Paris", "unit": "celsius"}}}
CALL_SEARCH = {"id": "call3c4d5", "type": "function",
               "function": {"name": "search_code",
                            "arguments": {"pattern": "fn\\s+main", "paths": ["src", "tests"], "max_results": 5,
                                          "min_score": 0.75}}}
ASSISTANT_CALL = {"role": "assistant", "content": "", "tool_calls": [CALL_WEATHER]}
TOOL_RESULT = {"role": "tool", "tool_call_id": "call0a1b2", "name": "get_weather",
               "content": "{\"temperature\": 18.5, \"sky\": \"cloudy\"}"}
ANSWER = {"role": "assistant", "content": "It is 18.5 °C and cloudy in Paris."}

# name -> (messages, tools or None, add_generation_prompt, extra template kwargs)
CASES = {
    "user_only": ([USER], None, True, {}),
    "user_only_no_generation_prompt": ([USER], None, False, {}),
    "system_user": ([SYSTEM, USER], None, True, {}),
    "multi_turn": ([SYSTEM, {"role": "user", "content": "Hi!"},
                    {"role": "assistant", "content": "Hello. How can I help?"},
                    {"role": "user", "content": "Tell me a joke."}], None, True, {}),
    "multi_turn_closed": ([SYSTEM, {"role": "user", "content": "Hi!"},
                           {"role": "assistant", "content": "Hello. How can I help?"}], None, False, {}),
    "tools_offered": ([SYSTEM, USER], TOOLS, True, {}),
    "tools_no_system": ([USER], TOOLS, True, {}),
    "tool_call_turn": ([SYSTEM, USER, ASSISTANT_CALL], TOOLS, False, {}),
    "tool_result": ([SYSTEM, USER, ASSISTANT_CALL, TOOL_RESULT], TOOLS, True, {}),
    "tool_round_trip": ([SYSTEM, USER, ASSISTANT_CALL, TOOL_RESULT, ANSWER,
                         {"role": "user", "content": "And in Lyon?"}], TOOLS, True, {}),
    "parallel_tool_calls": ([USER, {"role": "assistant", "content": "Let me check both.",
                                    "tool_calls": [CALL_WEATHER, CALL_SEARCH]},
                             TOOL_RESULT,
                             {"role": "tool", "tool_call_id": "call3c4d5", "name": "search_code",
                              "content": "src/main.rs:1: fn main() {"}], TOOLS, True, {}),
    "tool_call_string_arguments": ([USER, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call6e7f8", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"location\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call6e7f8", "content": "sunny"}], TOOLS, True, {}),
    "reasoning": ([{"role": "user", "content": "What is 17 * 3?"},
                   {"role": "assistant", "reasoning_content": "17 * 3 = 51.", "content": "51"},
                   {"role": "user", "content": "And 51 / 3?"}], None, True, {}),
    "reasoning_last": ([{"role": "user", "content": "What is 17 * 3?"},
                        {"role": "assistant", "reasoning_content": "17 times 3 is 51.", "content": "51"}],
                       None, False, {}),
    "reasoning_tool_call": ([SYSTEM, USER, {"role": "assistant", "reasoning_content": "I need the weather tool.",
                                            "content": "", "tool_calls": [CALL_WEATHER]}, TOOL_RESULT],
                            TOOLS, True, {}),
    "thinking_disabled": ([USER], None, True, {"enable_thinking": False}),
    "thinking_enabled": ([SYSTEM, USER], TOOLS, True, {"enable_thinking": True}),
    "special_characters": ([{"role": "system", "content": "  Quotes ' \" and \\ backslash; {{ not a tag }} {% x %}\n"},
                            {"role": "user", "content": "Ünïcödé ✓ 日本語 🦀\ttab\nnew line <tag> & amp  "},
                            {"role": "assistant", "content": "\n  padded answer \n\n", "tool_calls": [
                                {"id": "callxyz99", "type": "function", "function": {"name": "search_code",
                                 "arguments": {"pattern": "é\"\\n", "paths": [], "max_results": 1e3,
                                               "min_score": 1e-7, "nested": {"none": None, "flag": True,
                                                                             "big": 12345678901234, "neg": -0.0,
                                                                             "x": 3.0, "y": 0.1}}}}]},
                            {"role": "tool", "tool_call_id": "callxyz99", "name": "search_code", "content": ""},
                            {"role": "user", "content": "ok"}], TOOLS, True, {}),
    "content_parts": ([{"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
                       {"role": "user", "content": [{"type": "text", "text": "Describe"},
                                                    {"type": "text", "text": "this."}]}], None, True, {}),
}


def render(template, case):
    messages, tools, add_generation_prompt, kwargs = case
    bos, eos = template["tokens"]
    chat = ctu._normalize_chat_messages(json.loads(json.dumps(messages)))
    try:
        rendered, _ = ctu.render_jinja_template(
            conversations=[chat], tools=tools, chat_template=template["text"],
            add_generation_prompt=add_generation_prompt, bos_token=bos, eos_token=eos, **kwargs)
        return {"output": rendered[0]}
    except Exception as e:  # noqa: BLE001 - any failure is the expected result
        return {"error": f"{type(e).__name__}: {e}"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data", "templates"))
    args = ap.parse_args()
    src = os.path.join(args.data, "src")
    out_dir = os.path.join(args.data, "goldens")
    os.makedirs(out_dir, exist_ok=True)

    cases = [{"name": name, "messages": m, "tools": t, "add_generation_prompt": g, "kwargs": k}
             for name, (m, t, g, k) in CASES.items()]
    with open(os.path.join(args.data, "cases.json"), "w", encoding="utf-8", newline="\n") as f:
        json.dump({"now": FIXED_NOW.isoformat(), "default_bos": BOS, "default_eos": EOS, "cases": cases}, f,
                  indent=1, ensure_ascii=False)
        f.write("\n")

    n_ok = n_err = 0
    for file in sorted(os.listdir(src)):
        if not file.endswith(".jinja"):
            continue
        name = file[: -len(".jinja")]
        with open(os.path.join(src, file), encoding="utf-8", newline="") as f:
            text = f.read()
        template = {"text": text, "tokens": SPECIAL_TOKENS.get(name, (BOS, EOS))}
        results = {}
        for case_name, case in CASES.items():
            results[case_name] = render(template, case)
            if "error" in results[case_name]:
                n_err += 1
            else:
                n_ok += 1
        bos, eos = template["tokens"]
        with open(os.path.join(out_dir, name + ".json"), "w", encoding="utf-8", newline="\n") as f:
            json.dump({"template": file, "bos_token": bos, "eos_token": eos, "results": results}, f, indent=1,
                      ensure_ascii=False)
            f.write("\n")
    print(f"jinja2 {jinja2.__version__}: {n_ok} renders, {n_err} expected errors -> {out_dir}")


if __name__ == "__main__":
    sys.exit(main())
