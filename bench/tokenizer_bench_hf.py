#!/usr/bin/env python3
"""HF `tokenizers` single-threaded encode throughput on a file, next to tern's (bench/tokenizer_bench).

Builds the same tokenizer tools/gen_tokenizer_goldens.py uses for the default model (GGUF vocab and
merges, SmolLM2's Digits + ByteLevel pre-tokenizer, special tokens), encodes FILE repeatedly for
about SECONDS, prints MB/s, and if --tern-ids is given checks tern produced the very same ids.

  TOKENIZERS_PARALLELISM=false python3 bench/tokenizer_bench_hf.py MODEL.gguf FILE [--seconds 3] [--tern-ids PATH]
"""
import argparse
import os
import sys
import time

os.environ["TOKENIZERS_PARALLELISM"] = "false"  # before tokenizers is imported
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))

import gen_tokenizer_goldens as goldens  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402
from tokenizers import pre_tokenizers as pt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("file")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--tern-ids")
    args = ap.parse_args()
    pre = pt.Sequence([pt.Digits(individual_digits=True), pt.ByteLevel(add_prefix_space=False, use_regex=True)])
    # note: through JSON, as a tokenizer.json loads: a BPE model built in Python has no word cache.
    tk = Tokenizer.from_str(goldens.bpe_tokenizer(args.model, pre).to_str())
    text = open(args.file, encoding="utf-8").read()
    n_bytes = len(text.encode("utf-8"))
    lines = text.splitlines(keepends=True)
    chunks = ["".join(lines[i:i + 50]) for i in range(0, len(lines), 50)]
    ids = None
    for name, inputs in [("whole file", [text]), ("50-line chunks", chunks)]:
        t0 = time.perf_counter()
        encoded = [tk.encode(c, add_special_tokens=False).ids for c in inputs]
        first = time.perf_counter() - t0
        ids = ids if ids is not None else encoded[0]
        runs, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < args.seconds:
            for c in inputs:
                tk.encode(c, add_special_tokens=False)
            runs += 1
        steady = (time.perf_counter() - t0) / runs
        print(f"hf tokenizers ({name}): bytes={n_bytes} tokens={sum(len(e) for e in encoded)} "
              f"first_pass_MB/s={n_bytes / first / 1e6:.2f} steady_MB/s={n_bytes / steady / 1e6:.2f} (runs={runs})")
    if args.tern_ids:
        tern = [int(x) for x in open(args.tern_ids)]
        same = tern == ids
        first_diff = next((i for i, (a, b) in enumerate(zip(tern, ids)) if a != b), min(len(tern), len(ids)))
        print(f"ids identical to tern: {same}" + ("" if same else f" (first difference at token {first_diff})"))
        return 0 if same else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
