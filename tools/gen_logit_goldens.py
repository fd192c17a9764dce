#!/usr/bin/env python3
"""Generate golden logits for tern's forward-pass tests, using Hugging Face transformers on CPU.

Run from the repository root (needs torch, transformers, gguf, numpy, accelerate, jinja2):

    python3 tools/gen_logit_goldens.py                 # everything
    python3 tools/gen_logit_goldens.py --only tiny     # tiny fixtures only (seconds)
    python3 tools/gen_logit_goldens.py --only smollm2  # default model only (a few minutes)
    python3 tools/gen_logit_goldens.py --smollm2-gguf /path/to/SmolLM2-135M-Instruct.Q4_1.gguf

What it writes (all under tests/data/, format in tests/data/goldens/README.md):
    models/<name>_tiny.gguf        tiny random-weight fixtures (F32, < 300 KB each), one per
                                   architecture variant: llama, llama3 rope, qwen2, qwen3, yarn
    goldens/tiny/<name>/len<N>.<last|all>.<f64|f32>
                                   logits of the tiny models: f64 = float64 truth, f32 = what
                                   transformers' float32 run gives (a measure of float32 error)
    goldens/smollm2/<case>.last.f32
                                   last-token logits of the default model (float64 truth rounded
                                   to float32) for 6 of its 12 prompts; the others keep top-64 only
    goldens/index.json             every case: model, prompt ids/text, files, top-k, greedy
                                   continuation with top-2 gaps, and float32-vs-float64 differences

The "truth" is transformers in float64 with the three places where it silently computes in
float32 (RMSNorm, rotary tables, attention softmax) replaced by float64 versions
(logit_goldens/exact_f64.py). Before writing, every fixture is checked two independent ways:
transformers' own GGUF loader must read back the exact weights, and a plain numpy forward that
reads only the GGUF (with llama.cpp's layout conventions) must match the float64 truth to ~1e-13.

Determinism: seeds are fixed, torch runs single-threaded, files are written in a fixed order, so
a rerun on the same machine and library versions reproduces every file byte for byte. A different
CPU or library version may change the f32 files and f32 statistics in their last bits; the f64
truth is stable far beyond any tolerance a test uses.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from logit_goldens import smollm_cases, tiny_cases  # noqa: E402
from logit_goldens import tiny_models as tm  # noqa: E402
from logit_goldens.golden_io import GoldenWriter  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
INDEX_FORMAT_VERSION = 1


def _library_versions() -> dict:
    import numpy
    import transformers
    from importlib.metadata import version
    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "gguf": version("gguf"), "numpy": numpy.__version__}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=["tiny", "smollm2"], help="regenerate one part; the index keeps the other")
    parser.add_argument("--smollm2-gguf", type=Path, help="path to SmolLM2-135M-Instruct.Q4_1.gguf")
    parser.add_argument("--data-root", type=Path, default=REPO_ROOT / "tests" / "data")
    args = parser.parse_args()

    torch.set_num_threads(1)  # reduction order, hence f32 bits, depends on the thread count
    torch.use_deterministic_algorithms(True)
    data_root = args.data_root
    writer = GoldenWriter(data_root)
    index_path = data_root / "goldens" / "index.json"
    old = json.loads(index_path.read_text()) if index_path.is_file() and args.only else None

    models: dict = {}
    cases: list = []
    if args.only in (None, "tiny"):
        for spec in tm.TINY_SPECS:
            record, spec_cases = tiny_cases.generate(spec, data_root, writer)
            models[spec.name] = record
            cases += spec_cases
            worst = max(c["f32_vs_f64"]["stored_rows"]["max_abs"] for c in spec_cases)
            print(f"{spec.name}: {len(spec_cases)} cases, {record['bytes']} bytes, "
                  f"max |f32-f64| {worst:.3g}, gguf reference diff {record['gguf_reference_max_abs_diff']:.3g}")
    elif old:
        models.update({k: v for k, v in old["models"].items() if k != smollm_cases.MODEL_KEY})
        cases += [c for c in old["cases"] if c["model"] != smollm_cases.MODEL_KEY]

    if args.only in (None, "smollm2"):
        gguf_path = smollm_cases.find_default_model(REPO_ROOT, args.smollm2_gguf)
        record, smol_cases = smollm_cases.generate(gguf_path, writer)
        models[smollm_cases.MODEL_KEY] = record
        cases += smol_cases
        for c in smol_cases:
            g = c["greedy"]
            print(f"{c['id']}: {len(c['prompt_ids'])} tokens, max |f32-f64| "
                  f"{c['f32_vs_f64']['last_row']['max_abs']:.3g}, min greedy gap {min(g['top2_gaps']):.3g}, "
                  f"f32 greedy diverges at {g['hf_f32_first_divergence']}")
    elif old:
        models.update({k: v for k, v in old["models"].items() if k == smollm_cases.MODEL_KEY})
        cases += [c for c in old["cases"] if c["model"] == smollm_cases.MODEL_KEY]

    index = {
        "format_version": INDEX_FORMAT_VERSION,
        "generator": "tools/gen_logit_goldens.py",
        "paths_relative_to": "tests/data (TERN_TEST_DATA); model file '@default' means TERN_DEFAULT_MODEL",
        "library_versions": _library_versions(),
        "models": models,
        "cases": cases,
    }
    index_path.parent.mkdir(parents=True, exist_ok=True)
    index_path.write_text(json.dumps(index, indent=1) + "\n")
    print(f"wrote {index_path} ({len(cases)} cases)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
