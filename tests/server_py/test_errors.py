"""Bad input gets a 4xx whose body has the dialect's own error shape and names the field; the
server stays up through all of it."""
import json
import urllib.error
import urllib.request

import anthropic
import openai
import pytest


def post(server, path, body, headers=None, raw=None):
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(server.base_url + path, data=data,
                                 headers={"content-type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def chat_body(server, **kw):
    body = {"model": server.model, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
    body.update(kw)
    return body


def openai_error(status, body, want_status):
    assert status == want_status, body
    assert set(body) == {"error"}, body
    err = body["error"]
    assert {"message", "type", "param", "code"} <= set(err)
    return err


def anthropic_error(status, body, want_status, want_type):
    assert status == want_status, body
    assert body["type"] == "error"
    assert body["error"]["type"] == want_type
    return body["error"]


def test_malformed_json(server):
    err = openai_error(*post(server, "/v1/chat/completions", None, raw=b'{"model": "x", "messages": [}'), 400)
    assert "not valid JSON" in err["message"] and "column" in err["message"]
    err = anthropic_error(*post(server, "/v1/messages", None, raw=b"[1, 2"), 400, "invalid_request_error")
    assert "not valid JSON" in err["message"]
    err = openai_error(*post(server, "/v1/chat/completions", None, raw=b"[1, 2]"), 400)
    assert "expected a JSON object" in err["message"]


def test_wrong_types(server):
    err = openai_error(*post(server, "/v1/chat/completions", chat_body(server, temperature="hot")), 400)
    assert err["param"] == "temperature" and "expected a number" in err["message"]
    err = openai_error(*post(server, "/v1/chat/completions", chat_body(server, messages=[{"role": "user", "content": 5}])), 400)
    assert err["param"] == "messages[0].content"
    err = anthropic_error(*post(server, "/v1/messages", chat_body(server, max_tokens="many")), 400, "invalid_request_error")
    assert err["message"].startswith("max_tokens: expected an integer")


def test_missing_fields(server):
    body = chat_body(server)
    del body["messages"]
    err = openai_error(*post(server, "/v1/chat/completions", body), 400)
    assert err["param"] == "messages" and "missing" in err["message"]
    body = chat_body(server)
    del body["max_tokens"]
    err = anthropic_error(*post(server, "/v1/messages", body), 400, "invalid_request_error")
    assert err["message"].startswith("max_tokens:")
    err = openai_error(*post(server, "/v1/chat/completions", chat_body(server, messages=[{"content": "hi"}])), 400)
    assert err["param"] == "messages[0].role"


def test_unknown_model(server):
    err = openai_error(*post(server, "/v1/chat/completions", chat_body(server, model="gpt-nope")), 404)
    assert err["code"] == "model_not_found" and "gpt-nope" in err["message"]
    anthropic_error(*post(server, "/v1/messages", chat_body(server, model="claude-nope")), 404, "not_found_error")


def test_prompt_over_the_context_names_both_sizes(server):
    long_text = "hello " * 3000  # about 3000 tokens against a 2048-token context
    err = openai_error(*post(server, "/v1/chat/completions",
                             chat_body(server, messages=[{"role": "user", "content": long_text}])), 400)
    assert err["code"] == "context_length_exceeded"
    assert "2048" in err["message"]
    n_prompt = int(err["message"].split("the prompt is ")[1].split(" ")[0])
    assert n_prompt > 2048
    err = anthropic_error(*post(server, "/v1/messages", chat_body(server, messages=[{"role": "user", "content": long_text}])),
                          400, "invalid_request_error")
    assert "2048" in err["message"]


def test_tool_schema_must_be_an_object(server):
    tools = [{"type": "function", "function": {"name": "f", "parameters": "not a schema"}}]
    err = openai_error(*post(server, "/v1/chat/completions", chat_body(server, tools=tools)), 400)
    assert err["param"] == "tools[0].function.parameters" and "object" in err["message"]
    err = anthropic_error(*post(server, "/v1/messages", chat_body(server, tools=[{"name": "f", "input_schema": [1]}])),
                          400, "invalid_request_error")
    assert err["message"].startswith("tools[0].input_schema:")


def test_unsupported_parameter_values(server):
    for field, value in [("n", 2), ("logprobs", True), ("temperature", 7), ("tool_choice", "sometimes"),
                         ("response_format", {"type": "json_schema"})]:
        err = openai_error(*post(server, "/v1/chat/completions", chat_body(server, **{field: value})), 400)
        assert err["param"].split(".")[0] == field, (field, err)
    err = openai_error(*post(server, "/v1/chat/completions", chat_body(server, messages=[
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}])), 400)
    assert err["param"] == "messages[0].content[0].type"
    anthropic_error(*post(server, "/v1/messages", chat_body(server, thinking={"type": "sometimes"})), 400,
                    "invalid_request_error")


def test_oversized_body(server):
    big = chat_body(server, messages=[{"role": "user", "content": "x" * (2 << 20)}])  # the limit is 1 MiB
    err = openai_error(*post(server, "/v1/chat/completions", big), 413)
    assert "limit" in err["message"]
    anthropic_error(*post(server, "/v1/messages", big), 413, "request_too_large")


def test_nesting_bomb(server):
    raw = b'{"model": "m", "messages": ' + b"[" * 100000 + b"]" * 100000 + b"}"
    err = openai_error(*post(server, "/v1/chat/completions", None, raw=raw), 400)
    assert "nesting" in err["message"]


def test_api_key(keyed_server):
    body = chat_body(keyed_server)
    err = openai_error(*post(keyed_server, "/v1/chat/completions", body), 401)
    assert err["code"] == "invalid_api_key"
    openai_error(*post(keyed_server, "/v1/chat/completions", body, {"authorization": "Bearer wrong"}), 401)
    anthropic_error(*post(keyed_server, "/v1/messages", body, {"x-api-key": "wrong"}), 401, "authentication_error")
    status, _ = post(keyed_server, "/v1/chat/completions", body, {"authorization": "Bearer sekrit"})
    assert status == 200
    status, _ = post(keyed_server, "/v1/messages", body, {"x-api-key": "sekrit"})
    assert status == 200
    # The SDKs raise their own authentication errors.
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=keyed_server.base_url + "/v1", api_key="wrong", max_retries=0).models.list()
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=keyed_server.base_url, api_key="wrong", max_retries=0).messages.create(
            model=keyed_server.model, max_tokens=2, messages=[{"role": "user", "content": "hi"}])


def test_sdk_raises_bad_request(server):
    client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=server.model, messages=[], max_tokens=2)
    assert "messages" in str(e.value)


def test_still_healthy(server):
    with urllib.request.urlopen(server.base_url + "/health", timeout=10) as r:
        assert json.loads(r.read()) == {"status": "ok"}
