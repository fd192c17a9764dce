"""Cache-stable history (issue 4) through the HTTP API: an answer sent back as history is spliced
into the next prompt as the exact tokens the model generated, so the second turn's cached tokens
cover the first turn's prompt and its generated tokens, even when the client re-serializes the
tool call's arguments."""
import json
import urllib.request

import openai
import pytest

BLOCK_TOKENS = 16  # KV blocks are shared (and reported as cached) whole

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]},
    },
}


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0, timeout=120)


def metric(server, name):
    with urllib.request.urlopen(server.base_url + "/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError("metric %s missing" % name)


def covered(prompt_tokens, completion_tokens):
    # The KV holds the prompt and every generated token but the last (sampled, never fed back);
    # whole blocks of that are what the next request can reuse.
    return (prompt_tokens + completion_tokens - 1) // BLOCK_TOKENS * BLOCK_TOKENS


def test_tool_call_sent_back_reserialized_is_reused_whole(client, server):
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = client.chat.completions.create(model=server.model, messages=messages, tools=[WEATHER_TOOL], temperature=0,
                                           max_tokens=120, tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert first.choices[0].finish_reason == "tool_calls", first.choices[0].message
    call = first.choices[0].message.tool_calls[0]
    # The client's own JSON: keys sorted, indented (tern must not care).
    args = json.dumps(json.loads(call.function.arguments), indent=2, sort_keys=True)
    messages.append({"role": "assistant", "content": first.choices[0].message.content, "tool_calls": [
        {"id": call.id, "type": "function", "function": {"name": call.function.name, "arguments": args}}]})
    messages.append({"role": "tool", "tool_call_id": call.id, "content": "// (empty file)"})
    spliced_before = metric(server, "tern_history_spliced_total")
    second = client.chat.completions.create(model=server.model, messages=messages, tools=[WEATHER_TOOL], temperature=0,
                                            max_tokens=8)
    assert metric(server, "tern_history_spliced_total") == spliced_before + 1
    p1, c1 = first.usage.prompt_tokens, first.usage.completion_tokens
    assert c1 > 0
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached >= covered(p1, c1), (cached, p1, c1)


def test_text_answer_sent_back_as_content_parts_is_reused_whole(client, server):
    messages = [{"role": "system", "content": "You are a storyteller. Session: history-text."},
                {"role": "user", "content": "Tell me a long story about a lighthouse keeper."}]
    first = client.chat.completions.create(model=server.model, messages=messages, temperature=0, max_tokens=48)
    text = first.choices[0].message.content
    assert first.usage.completion_tokens > BLOCK_TOKENS
    # Sent back as a list of content parts, with its whitespace trimmed.
    messages.append({"role": "assistant", "content": [{"type": "text", "text": text.strip()}]})
    messages.append({"role": "user", "content": "Shorter, please."})
    spliced_before = metric(server, "tern_history_spliced_total")
    second = client.chat.completions.create(model=server.model, messages=messages, temperature=0, max_tokens=4)
    assert metric(server, "tern_history_spliced_total") == spliced_before + 1
    p1, c1 = first.usage.prompt_tokens, first.usage.completion_tokens
    cached = second.usage.prompt_tokens_details.cached_tokens
    # The cache covers the first answer too, not only the first prompt.
    assert covered(p1, c1) > p1
    assert cached >= covered(p1, c1), (cached, p1, c1)
