"""The official `openai` SDK against a live `tern serve`: chat and completions, streamed and not,
stop strings, a tool-calling round trip and prefix reuse across turns.

Greedy decoding (temperature 0) is deterministic, so a streamed answer must equal the same request
answered whole, and a stop string must cut the answer exactly where it occurs."""
import json

import openai
import pytest

SYSTEM = ("You are a terse assistant inside a coding agent. You may read files, run commands and edit "
          "code. Answer in one short sentence. Never apologise. Prefer concrete file names and commands.")

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0, timeout=120)


def chat(client, server, messages, **kw):
    kw.setdefault("max_tokens", 12)
    kw.setdefault("temperature", 0)
    return client.chat.completions.create(model=server.model, messages=messages, **kw)


def test_models_lists_the_served_model(client, server):
    ids = [m.id for m in client.models.list().data]
    assert server.model in ids


def test_chat_non_streaming(client, server):
    r = chat(client, server, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What does ls do?"}])
    choice = r.choices[0]
    assert r.object == "chat.completion"
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str) and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert 0 < r.usage.completion_tokens <= 12
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    # Greedy is deterministic: the same request gives the same answer.
    again = chat(client, server, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What does ls do?"}])
    assert again.choices[0].message.content == choice.message.content


def test_chat_streaming_equals_non_streaming(client, server):
    messages = [{"role": "user", "content": "Name three colours."}]
    whole = chat(client, server, messages, max_tokens=16)
    stream = chat(client, server, messages, max_tokens=16, stream=True, stream_options={"include_usage": True})
    text, finish, usage, roles = "", None, None, []
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            if c.delta.role:
                roles.append(c.delta.role)
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    assert roles == ["assistant"]
    assert text == whole.choices[0].message.content
    assert finish == whole.choices[0].finish_reason
    assert usage is not None and usage.completion_tokens == whole.usage.completion_tokens
    assert usage.prompt_tokens == whole.usage.prompt_tokens


def test_stop_string_cuts_the_answer(client, server):
    messages = [{"role": "user", "content": "Write a sentence about the sea."}]
    full = chat(client, server, messages, max_tokens=24).choices[0].message.content
    words = full.split()
    assert len(words) >= 4, full
    stop = " " + words[3]
    cut = chat(client, server, messages, max_tokens=24, stop=[stop])
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].message.content == full[: full.index(stop)]


def test_seed_makes_sampling_reproducible(client, server):
    messages = [{"role": "user", "content": "Tell me a word."}]
    a = chat(client, server, messages, temperature=1.0, top_p=0.9, seed=1234, max_tokens=10)
    b = chat(client, server, messages, temperature=1.0, top_p=0.9, seed=1234, max_tokens=10)
    assert a.choices[0].message.content == b.choices[0].message.content


def test_completions_streamed_and_not(client, server):
    prompt = "The three primary colours are"
    whole = client.completions.create(model=server.model, prompt=prompt, max_tokens=10, temperature=0)
    assert whole.object == "text_completion"
    assert whole.usage.completion_tokens <= 10
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=server.model, prompt=prompt, max_tokens=10, temperature=0, stream=True) if c.choices)
    assert streamed == whole.choices[0].text


def test_tool_call_round_trip(client, server):
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = chat(client, server, messages, tools=[WEATHER_TOOL], max_tokens=120,
                 tool_choice={"type": "function", "function": {"name": "get_weather"}})
    msg = first.choices[0].message
    assert first.choices[0].finish_reason == "tool_calls"
    assert len(msg.tool_calls) >= 1
    call = msg.tool_calls[0]
    assert call.type == "function" and call.function.name == "get_weather"
    assert isinstance(json.loads(call.function.arguments), dict)
    assert call.id.startswith("call_")

    # The same call streamed: incremental deltas rebuild the same call.
    stream = chat(client, server, messages, tools=[WEATHER_TOOL], max_tokens=120, stream=True,
                  tool_choice={"type": "function", "function": {"name": "get_weather"}})
    calls, finish = {}, None
    n_arg_deltas = 0
    for chunk in stream:
        for c in chunk.choices:
            finish = c.finish_reason or finish
            for d in c.delta.tool_calls or []:
                entry = calls.setdefault(d.index, {"id": None, "name": None, "arguments": ""})
                entry["id"] = d.id or entry["id"]
                if d.function and d.function.name:
                    entry["name"] = d.function.name
                if d.function and d.function.arguments:
                    entry["arguments"] += d.function.arguments
                    n_arg_deltas += 1
    assert finish == "tool_calls"
    assert calls[0]["name"] == "get_weather"
    assert calls[0]["arguments"] == call.function.arguments
    assert n_arg_deltas > 1, "arguments should arrive in several deltas"

    # The result goes back and the conversation continues.
    messages.append({"role": "assistant", "content": None, "tool_calls": [
        {"id": call.id, "type": "function", "function": {"name": "get_weather", "arguments": call.function.arguments}}]})
    messages.append({"role": "tool", "tool_call_id": call.id, "content": "18 C and sunny"})
    second = chat(client, server, messages, tools=[WEATHER_TOOL], max_tokens=16)
    assert second.choices[0].message.content or second.choices[0].message.tool_calls
    assert second.usage.prompt_tokens > first.usage.prompt_tokens
    # The first prompt (up to the forced opening of the call, a few tokens) is reused.
    assert second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens - 32

    # tool_choice "none": the tools are not offered, and the answer is plain text.
    third = chat(client, server, messages, tools=[WEATHER_TOOL], tool_choice="none", max_tokens=16)
    assert third.choices[0].message.content and not third.choices[0].message.tool_calls


def test_multi_turn_reuses_the_prefix(client, server):
    messages = [{"role": "system", "content": SYSTEM + " Session: multi-turn-openai."}]
    previous_prompt = 0
    for turn, question in enumerate(["How do I list files?", "And hidden ones?", "Sorted by size?"]):
        messages.append({"role": "user", "content": question})
        r = chat(client, server, messages, max_tokens=10)
        cached = r.usage.prompt_tokens_details.cached_tokens
        if turn == 0:
            assert cached < r.usage.prompt_tokens
        else:
            # Every full KV block of the previous prompt is reused (blocks are 16 tokens).
            assert cached >= previous_prompt - 15, (turn, cached, previous_prompt)
        previous_prompt = r.usage.prompt_tokens
        messages.append({"role": "assistant", "content": r.choices[0].message.content})
