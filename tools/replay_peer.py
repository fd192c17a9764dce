#!/usr/bin/env python3
"""Replays tern's agent-session prompts against a peer server, for a like-for-like comparison.

`tern bench replay --dump-prompts FILE` writes the exact token ids of every turn's prompt
(teacher-forced history, cut off at the context). This script sends them, in order, to a
llama.cpp `llama-server` (its native /completion endpoint takes token ids, so both engines see
the same tokens and no template or tokenizer difference enters) and reports the same per-turn
and total fields as `tern bench replay`: prompt tokens, cached tokens, TTFT and decode tok/s.

Timing: the server's own `timings` (prompt_ms = time to process the uncached prompt, i.e. its
time to first token without network and queueing; predicted_per_second = decode rate after the
first token), plus the client-side time to the first streamed token as a check.

  llama-server -m MODEL -t 2 -c 8192 -np 1 --port 8090 &
  tern bench replay --dump-prompts /tmp/prompts.jsonl
  tools/replay_peer.py --prompts /tmp/prompts.jsonl --url http://127.0.0.1:8090 --max-tokens 16
"""
import argparse
import json
import statistics
import sys
import time
import urllib.request


def post_stream(url, body, timeout_s):
    """POSTs `body` with stream=true; returns (client TTFT s, the final event)."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    ttft = None
    final = None
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        for raw in resp:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:"):
                continue
            event = json.loads(line[5:])
            if ttft is None and (event.get("content") or event.get("tokens")):
                ttft = time.perf_counter() - t0
            if event.get("stop"):
                final = event
    return ttft, final


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", required=True, help="JSONL from tern bench replay --dump-prompts")
    ap.add_argument("--url", default="http://127.0.0.1:8090")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
    ap.add_argument("--json", action="store_true", help="print per-turn records and totals as JSON")
    args = ap.parse_args()

    turns = [json.loads(line) for line in open(args.prompts, encoding="utf-8") if line.strip()]
    records = []
    for t in turns:
        body = {
            "prompt": t["prompt"],
            "n_predict": args.max_tokens,
            "temperature": 0.0,
            "top_k": 1,
            "cache_prompt": True,
            "stream": True,
            "ignore_eos": True,  # every turn decodes max_tokens, as the tern replay's greedy turns
        }
        client_ttft, final = post_stream(args.url + "/completion", body, args.timeout)
        if final is None:
            sys.exit(f"replay_peer: no final event for {t['session']} turn {t['turn']}")
        tm = final.get("timings", {})
        n_prompt = len(t["prompt"])
        rec = {
            "session": t["session"],
            "turn": t["turn"],
            "prompt_tokens": n_prompt,
            "cached_tokens": n_prompt - int(tm.get("prompt_n", n_prompt)),
            "ttft_seconds": float(tm.get("prompt_ms", 0.0)) / 1e3,
            "client_ttft_seconds": client_ttft,
            "generated_tokens": int(tm.get("predicted_n", 0)),
            "decode_tokens_per_second": float(tm.get("predicted_per_second", 0.0)),
        }
        records.append(rec)
        if not args.json:
            print(f"{rec['session']} turn {rec['turn']}: prompt {n_prompt}, cached {rec['cached_tokens']}, "
                  f"TTFT {rec['ttft_seconds']:.3f} s (client {client_ttft or 0:.3f}), "
                  f"decode {rec['decode_tokens_per_second']:.1f} tok/s", flush=True)

    prompt = sum(r["prompt_tokens"] for r in records)
    cached = sum(r["cached_tokens"] for r in records)
    totals = {
        "turns": len(records),
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "total_ttft_seconds": sum(r["ttft_seconds"] for r in records),
        "mean_ttft_seconds": statistics.mean(r["ttft_seconds"] for r in records) if records else 0.0,
        "mean_decode_tokens_per_second": statistics.mean(r["decode_tokens_per_second"] for r in records)
        if records else 0.0,
    }
    if args.json:
        print(json.dumps({"turns": records, "totals": totals}, indent=1))
    else:
        print(f"\n{totals['turns']} turns, {prompt} prompt tokens, cached {cached} "
              f"({100.0 * cached / max(1, prompt):.1f}%); total TTFT {totals['total_ttft_seconds']:.2f} s, "
              f"mean TTFT {totals['mean_ttft_seconds']:.2f} s; mean decode "
              f"{totals['mean_decode_tokens_per_second']:.1f} tok/s")


if __name__ == "__main__":
    main()
