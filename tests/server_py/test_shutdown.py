"""SIGTERM: the server stops accepting, lets requests in flight finish for the grace period, then
ends the rest with an explicit error event (never a silently cut stream) and exits 0."""
import json
import signal
import socket
import time
import urllib.request

from conftest import LiveServer


def open_stream(server, body):
    host, port = server.base_url.split("//")[1].split(":")
    sock = socket.create_connection((host, int(port)), timeout=60)
    data = json.dumps(body).encode()
    sock.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                 % (body.pop("_path").encode(), len(data)) + data)
    return sock


def read_until_closed(sock, deadline_s):
    received = b""
    sock.settimeout(deadline_s)
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return received
        received += chunk


def test_sigterm_ends_streams_with_a_clear_event_and_exits_cleanly():
    server = LiveServer("--ctx", "2048", "--kv-mem", "32M", "--shutdown-grace", "1")
    try:
        # Both streams must still be running when the grace period ends, or there is nothing to
        # cut. Greedy, so their length does not depend on a random seed: with the default model
        # this prompt runs until the KV pool is full (1,418 tokens alone, ~4.7 s at ~300 tok/s
        # on 2 threads). Sampled at temperature 0.8, a story sometimes ended (EOS) within
        # the grace period, and the test failed without the server doing anything wrong.
        long = {"model": server.model, "max_tokens": 1800, "temperature": 0, "stream": True,
                "messages": [{"role": "user", "content": "Write a very long story about ships."}]}
        openai_sock = open_stream(server, {**long, "_path": "/v1/chat/completions"})
        anthropic_sock = open_stream(server, {**long, "_path": "/v1/messages"})
        # Both are in flight (the second may still be queued behind the first).
        first = b""
        while first.count(b"data: ") < 2:
            first += openai_sock.recv(4096)
        t0 = time.time()
        server.proc.send_signal(signal.SIGTERM)
        openai_rest = first + read_until_closed(openai_sock, 60)
        anthropic_rest = read_until_closed(anthropic_sock, 60)
        assert server.proc.wait(timeout=60) == 0, "".join(server.stderr_lines)
        assert time.time() - t0 < 30

        # OpenAI: the stream ends with an error object naming the shutdown, then [DONE].
        assert b'"finish_reason":"' not in openai_rest, "finished before the grace period ended: " + \
            openai_rest[-500:].decode(errors="replace")
        assert b'"code":"shutting_down"' in openai_rest, openai_rest[-500:]
        assert b"data: [DONE]" in openai_rest
        # Anthropic: an error event of type overloaded_error (or, if it was refused while queued, a 503).
        assert (b"event: error" in anthropic_rest and b"overloaded_error" in anthropic_rest) or \
            b"503 Service Unavailable" in anthropic_rest, anthropic_rest[-500:]
        assert "shutting down" in "".join(server.stderr_lines)
    finally:
        if server.proc.poll() is None:
            server.proc.kill()


def test_requests_finishing_within_the_grace_period_complete():
    server = LiveServer("--ctx", "1024", "--kv-mem", "16M", "--shutdown-grace", "60")
    body = {"model": server.model, "max_tokens": 24, "temperature": 0, "stream": True, "_path": "/v1/chat/completions",
            "messages": [{"role": "user", "content": "Count to five."}]}
    sock = open_stream(server, body)
    first = b""
    while b"data: " not in first:  # in flight before the signal
        first += sock.recv(4096)
    server.proc.send_signal(signal.SIGTERM)
    rest = first + read_until_closed(sock, 60)
    assert b'"finish_reason":"length"' in rest or b'"finish_reason":"stop"' in rest, rest[-400:]
    assert b"data: [DONE]" in rest and b"shutting_down" not in rest
    assert server.proc.wait(timeout=60) == 0
    # Nothing listens any more.
    try:
        urllib.request.urlopen(server.base_url + "/health", timeout=2)
        raise AssertionError("the server still answers after shutting down")
    except OSError:
        pass
