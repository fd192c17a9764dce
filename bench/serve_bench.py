#!/usr/bin/env python3
"""Serving benchmark: replays recorded agentic sessions against `tern serve`, several at once.

Each session (../shared/data/agentic/swe-sessions.jsonl: mini-swe-agent trajectories) is replayed
turn by turn with teacher forcing: turn k sends messages[0..k] ending with a user message, streams
a bounded answer, and the next turn continues from the *recorded* assistant message, so every prompt
is the previous one plus new tokens, as an agent would send it. A session stops when its next
prompt no longer fits the context.

Two passes over the same sessions, on fresh servers (nothing cached from the other pass):
  concurrent  all sessions at once (what continuous batching is for);
  sequential  one session after another.
Reported per pass: TTFT p50/p99, decode tok/s per stream (p50) and in aggregate (generated tokens
over the pass's wall time), the prompt-cache hit rate (cached / prompt tokens), and the
aggregate speed-up of concurrent over sequential.

    python3 bench/serve_bench.py --tern build/tern --sessions 4 --turns 6 --max-tokens 32
    python3 bench/serve_bench.py --url http://127.0.0.1:8080   # an already running server (one pass)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

import openai

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DATA = os.path.join(REPO, "..", "shared", "data", "agentic", "swe-sessions.jsonl")


def load_sessions(path, n_sessions, n_turns):
    sessions = []
    with open(path) as f:
        for line in f:
            s = json.loads(line)
            msgs = s["messages"]
            # Turn k ends at the k-th user message after the system prompt.
            turn_ends = [i + 1 for i, m in enumerate(msgs) if m["role"] == "user"]
            if len(turn_ends) >= 2:
                sessions.append({"id": s["id"], "messages": msgs, "turn_ends": turn_ends[:n_turns]})
            if len(sessions) == n_sessions:
                break
    return sessions


def percentile(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def replay(client, model, session, max_tokens, turns_out):
    for end in session["turn_ends"]:
        messages = session["messages"][:end]
        t0 = time.perf_counter()
        first = last = None
        usage = None
        try:
            stream = client.chat.completions.create(
                model=model, messages=messages, max_tokens=max_tokens, temperature=0, stream=True,
                stream_options={"include_usage": True})
            for chunk in stream:
                if chunk.usage is not None:
                    usage = chunk.usage
                for c in chunk.choices:
                    if c.delta.content:
                        now = time.perf_counter()
                        first = first or now
                        last = now
        except openai.BadRequestError as e:
            if "context_length_exceeded" in str(e) or "context holds" in str(e):
                break  # the session outgrew the context: it ends here
            raise
        if usage is None or first is None:
            continue
        turns_out.append({
            "session": session["id"], "prompt_tokens": usage.prompt_tokens,
            "cached_tokens": usage.prompt_tokens_details.cached_tokens if usage.prompt_tokens_details else 0,
            "completion_tokens": usage.completion_tokens, "ttft_s": first - t0,
            "decode_s": last - first, "t_start": t0, "t_end": time.perf_counter(),
        })


def run_pass(base_url, model, sessions, max_tokens, concurrent):
    client = openai.OpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0, timeout=3600)
    turns = []
    t0 = time.perf_counter()
    if concurrent:
        threads = [threading.Thread(target=replay, args=(client, model, s, max_tokens, turns)) for s in sessions]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        for s in sessions:
            replay(client, model, s, max_tokens, turns)
    wall = time.perf_counter() - t0
    generated = sum(t["completion_tokens"] for t in turns)
    prompt = sum(t["prompt_tokens"] for t in turns)
    cached = sum(t["cached_tokens"] for t in turns)
    per_stream = [(t["completion_tokens"] - 1) / t["decode_s"] for t in turns
                  if t["decode_s"] > 0 and t["completion_tokens"] > 1]
    return {
        "mode": "concurrent" if concurrent else "sequential",
        "sessions": len(sessions), "turns": len(turns), "wall_s": wall,
        "ttft_p50_s": percentile([t["ttft_s"] for t in turns], 0.5),
        "ttft_p99_s": percentile([t["ttft_s"] for t in turns], 0.99),
        "decode_tok_s_per_stream_p50": statistics.median(per_stream) if per_stream else float("nan"),
        "aggregate_tok_s": generated / wall if wall > 0 else 0.0,
        "generated_tokens": generated, "prompt_tokens": prompt, "cached_tokens": cached,
        "cache_hit_rate": cached / prompt if prompt else 0.0,
    }


class Server:
    def __init__(self, binary, model_path, args):
        cmd = [binary, "serve", "--port", "0", "--parallel", str(args.parallel), "--ctx", str(args.ctx)]
        if model_path:
            cmd += ["-m", model_path]
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            self.proc.kill()
            sys.exit("tern serve did not start")
        self.url = line.strip().split("listening on ")[1]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=120)


def served_model(url):
    return openai.OpenAI(base_url=url + "/v1", api_key="unused").models.list().data[0].id


def print_pass(r):
    print("%-10s  %2d sessions %3d turns  wall %6.1f s | TTFT p50 %6.3f s p99 %6.3f s | decode/stream p50 %6.1f tok/s"
          " | aggregate %6.1f tok/s | cache hit %5.1f%% (%d of %d prompt tokens)" % (
              r["mode"], r["sessions"], r["turns"], r["wall_s"], r["ttft_p50_s"], r["ttft_p99_s"],
              r["decode_tok_s_per_stream_p50"], r["aggregate_tok_s"], 100 * r["cache_hit_rate"],
              r["cached_tokens"], r["prompt_tokens"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="a running server (one concurrent pass only)")
    ap.add_argument("--tern", default=os.path.join(REPO, "build", "tern"), help="tern binary to start servers with")
    ap.add_argument("-m", "--model", default="", help="GGUF model for the started servers (default: tern's)")
    ap.add_argument("--data", default=DEFAULT_DATA)
    ap.add_argument("--sessions", type=int, default=4)
    ap.add_argument("--turns", type=int, default=6, help="turns replayed per session at most")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--parallel", type=int, default=4, help="tern serve --parallel")
    ap.add_argument("--ctx", type=int, default=8192, help="tern serve --ctx")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()

    sessions = load_sessions(args.data, args.sessions, args.turns)
    if not sessions:
        sys.exit("no sessions in " + args.data)
    results = []
    if args.url:
        results.append(run_pass(args.url, served_model(args.url), sessions, args.max_tokens, True))
    else:
        for concurrent in (True, False):
            server = Server(args.tern, args.model, args)
            try:
                results.append(run_pass(server.url, served_model(server.url), sessions, args.max_tokens, concurrent))
            finally:
                server.stop()
    for r in results:
        print_pass(r)
    if len(results) == 2:
        print("concurrent / sequential aggregate tok/s: %.2fx" % (results[0]["aggregate_tok_s"] / results[1]["aggregate_tok_s"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
