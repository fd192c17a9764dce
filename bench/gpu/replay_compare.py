#!/usr/bin/env python3
"""Totals of `tern bench replay --json` runs and how many turns' generated texts each shares with
the first (the reference run), e.g. a GPU run with reuse and speculation against one without, or
the CPU against the GPU. Usage: replay_compare.py REF.json OTHER.json [...] (run_device.sh
default-model)."""
import json
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        print(f"   {path}: unreadable ({e})")
        return None


def main(paths):
    runs = [(p, load(p)) for p in paths]
    for path, r in runs:
        if r is None:
            continue
        t = r["total"]
        # The backend and its activation precision (absent from runs before session 13).
        on = f"{r['backend']}, {r['activation_bits']}-bit activations; " if "backend" in r else ""
        print(f"   {path}: {on}{t['turns']} turns, {t['prompt_tokens']} prompt tokens, {t['cached_tokens']} cached; "
              f"TTFT {t['ttft_s']} s (baseline {t['baseline_ttft_s']}); decode {t['mean_decode_tok_s']} tok/s "
              f"(baseline {t['baseline_mean_decode_tok_s']}); drafts {t['drafts_accepted']} / {t['drafts_proposed']}")
    ref_path, ref = runs[0]
    if ref is None:
        return 1
    a = [x["text"] for x in ref["turns"]]
    for path, r in runs[1:]:
        if r is None:
            continue
        b = [x["text"] for x in r["turns"]]
        same = sum(1 for x, y in zip(a, b) if x == y)
        print(f"   texts of {path} against {ref_path}: {same} / {min(len(a), len(b))} turns identical")
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                k = next((j for j in range(min(len(x), len(y))) if x[j] != y[j]), min(len(x), len(y)))
                print(f"     first differing turn {i}, at character {k}: {x[max(0, k - 30):k + 30]!r} "
                      f"against {y[max(0, k - 30):k + 30]!r}")
                break
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
