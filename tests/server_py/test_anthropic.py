"""The official `anthropic` SDK against a live `tern serve`: messages streamed and not (with the
exact event sequence checked on the raw stream), stop sequences, count_tokens, a tool_use /
tool_result round trip and cache reads across turns."""
import json
import urllib.request

import anthropic
import pytest

SYSTEM = ("You are a terse assistant inside a coding agent. You may read files, run commands and edit "
          "code. Answer in one short sentence. Never apologise. Prefer concrete file names and commands.")

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@pytest.fixture(scope="module")
def client(server):
    return anthropic.Anthropic(base_url=server.base_url, api_key="unused", max_retries=0, timeout=120)


# Greedy decoding. The SDK no longer has a temperature argument; the API still takes the field.
GREEDY = {"temperature": 0}


def create(client, server, messages, **kw):
    kw.setdefault("max_tokens", 12)
    kw.setdefault("extra_body", GREEDY)
    return client.messages.create(model=server.model, messages=messages, **kw)


def raw_sse_events(server, body):
    req = urllib.request.Request(server.base_url + "/v1/messages", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    events = []
    with urllib.request.urlopen(req, timeout=120) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        name = None
        for raw in r:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                name = line[len("event: "):]
            elif line.startswith("data: "):
                data = json.loads(line[len("data: "):])
                assert data["type"] == name, (name, data)
                events.append(data)
    return events


def test_message_non_streaming(client, server):
    r = create(client, server, [{"role": "user", "content": "What does ls do?"}], system=SYSTEM)
    assert r.type == "message" and r.role == "assistant"
    assert r.content[0].type == "text" and r.content[0].text
    assert r.stop_reason in ("end_turn", "max_tokens")
    assert 0 < r.usage.output_tokens <= 12
    assert r.usage.input_tokens + (r.usage.cache_read_input_tokens or 0) > 0


def test_stream_has_the_exact_event_sequence(client, server):
    body = {"model": server.model, "max_tokens": 10, "temperature": 0, "stream": True,
            "messages": [{"role": "user", "content": "Name three colours."}]}
    events = raw_sse_events(server, body)
    kinds = [e["type"] for e in events]
    assert kinds[:3] == ["message_start", "content_block_start", "ping"]
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(kinds[3:-3]) == {"content_block_delta"}
    assert events[1]["content_block"] == {"type": "text", "text": ""}
    text = "".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta")
    usage = events[-2]["usage"]
    assert events[-2]["delta"]["stop_reason"] in ("end_turn", "max_tokens")

    # The SDK's view of the same request, streamed and not, agrees.
    whole = create(client, server, body["messages"], max_tokens=10)
    assert whole.content[0].text == text
    assert whole.usage.output_tokens == usage["output_tokens"]
    with client.messages.stream(model=server.model, max_tokens=10, extra_body=GREEDY, messages=body["messages"]) as s:
        streamed = "".join(s.text_stream)
        final = s.get_final_message()
    assert streamed == text and final.content[0].text == text


def test_stop_sequences(client, server):
    messages = [{"role": "user", "content": "Write a sentence about the sea."}]
    full = create(client, server, messages, max_tokens=24).content[0].text
    words = full.split()
    assert len(words) >= 4, full
    stop = " " + words[3]
    r = create(client, server, messages, max_tokens=24, stop_sequences=[stop, "NEVER-SEEN"])
    assert r.stop_reason == "stop_sequence"
    assert r.stop_sequence == stop
    assert r.content[0].text == full[: full.index(stop)]


def test_count_tokens_matches_usage(client, server):
    messages = [{"role": "user", "content": "Count me, please."}]
    counted = client.messages.count_tokens(model=server.model, messages=messages, system=SYSTEM)
    r = create(client, server, messages, system=SYSTEM, max_tokens=2)
    assert counted.input_tokens == r.usage.input_tokens + (r.usage.cache_read_input_tokens or 0)


def test_tool_use_round_trip(client, server):
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = create(client, server, messages, tools=[WEATHER_TOOL], max_tokens=120,
                   tool_choice={"type": "tool", "name": "get_weather"})
    assert first.stop_reason == "tool_use"
    uses = [b for b in first.content if b.type == "tool_use"]
    assert uses and uses[0].name == "get_weather"
    assert isinstance(uses[0].input, dict)
    assert uses[0].id.startswith("toolu_")

    # Streamed, the tool input arrives as input_json_delta pieces that rebuild the same input.
    with client.messages.stream(model=server.model, messages=messages, tools=[WEATHER_TOOL], max_tokens=120,
                                extra_body=GREEDY, tool_choice={"type": "tool", "name": "get_weather"}) as s:
        final = s.get_final_message()
    streamed_uses = [b for b in final.content if b.type == "tool_use"]
    assert streamed_uses and streamed_uses[0].input == uses[0].input
    assert final.stop_reason == "tool_use"

    messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]})
    messages.append({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": uses[0].id, "content": "18 C and sunny"},
        {"type": "text", "text": "Summarise that."}]})
    second = create(client, server, messages, tools=[WEATHER_TOOL], tool_choice={"type": "none"}, max_tokens=16)
    assert second.content[0].type == "text" and second.content[0].text
    assert second.usage.cache_read_input_tokens > 0


def test_multi_turn_reads_the_cache(client, server):
    messages = []
    previous_prompt = 0
    system = SYSTEM + " Session: multi-turn-anthropic."
    for turn, question in enumerate(["How do I list files?", "And hidden ones?", "Sorted by size?"]):
        messages.append({"role": "user", "content": question})
        r = create(client, server, messages, system=system, max_tokens=10)
        cached = r.usage.cache_read_input_tokens
        prompt = r.usage.input_tokens + cached
        if turn > 0:
            assert cached >= previous_prompt - 15, (turn, cached, previous_prompt)
        previous_prompt = prompt
        messages.append({"role": "assistant", "content": r.content[0].text})
