"""Golden cases for the tiny random-weight fixtures (tests/data/models/*_tiny.gguf)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM

from . import decode, exact_f64, gguf_reference
from . import tiny_models as tm
from .golden_io import GoldenWriter, diff_record, sha256_file

PROMPT_LENGTHS = (1, 7, 33, 100)
ALL_ROWS_LENGTH = 33      # this prompt's goldens hold every row, not just the last
GREEDY_PROMPT_LENGTH = 7
GREEDY_TOKENS = 32
# The GGUF-side numpy forward and the transformers float64 run differ only by float64 rounding
# (observed ~1e-13); anything near float32 rounding means the fixture and the oracle disagree.
REFERENCE_TOLERANCE = 1e-9


def _check_fixture(spec: tm.TinySpec, gguf_path: Path, weights: dict, model_f64, probe_ids: list[int]) -> float:
    """Two independent checks that the GGUF file is the transformers model, before any golden
    is written. Returns the numpy-reference max abs logit difference."""
    # 1. transformers' own GGUF loader (which undoes the llama Q/K row permutation itself) must
    #    recover the exact weights. The config is passed explicitly because transformers' GGUF
    #    config parser drops qwen3's attention.key_length.
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name,
                                                  config=tm.hf_config(spec), dtype=torch.float32)
    state = loaded.state_dict()
    for name, value in weights.items():
        if name not in state or not np.array_equal(state[name].numpy(), value):
            raise ValueError(f"{spec.name}: transformers' GGUF loader reads {name} differently")
    # 2. a numpy forward pass with llama.cpp's conventions must match the float64 oracle.
    ref = gguf_reference.forward(gguf_reference.GgufModel(str(gguf_path)), probe_ids)
    worst = float(np.abs(ref - decode.all_logits(model_f64, probe_ids)).max())
    if worst > REFERENCE_TOLERANCE:
        raise ValueError(f"{spec.name}: GGUF reference forward differs from transformers float64 by "
                         f"{worst:.3g}, expected < {REFERENCE_TOLERANCE}")
    return worst


def generate(spec: tm.TinySpec, data_root: Path, writer: GoldenWriter) -> tuple[dict, list[dict]]:
    """Writes models/<name>.gguf and goldens/tiny/<name>/*; returns (model record, case records)."""
    gguf_rel = f"models/{spec.name}.gguf"
    gguf_path = data_root / gguf_rel
    gguf_path.parent.mkdir(parents=True, exist_ok=True)
    model_f32, weights = tm.build_hf_model(spec, torch.float32)
    tm.write_gguf(spec, weights, gguf_path)
    model_f64, _ = tm.build_hf_model(spec, torch.float32)
    exact_f64.make_exact_f64(model_f64, spec.rope, spec.head_dim)

    rng = np.random.default_rng(spec.seed + 500)
    prompts = {n: [int(t) for t in rng.integers(0, spec.n_vocab, n)] for n in PROMPT_LENGTHS}
    reference_diff = _check_fixture(spec, gguf_path, weights, model_f64, prompts[ALL_ROWS_LENGTH])

    cases = []
    for n_tok, ids in prompts.items():
        truth = decode.all_logits(model_f64, ids)
        torch_f32 = decode.all_logits(model_f32, ids)
        rows = "all" if n_tok == ALL_ROWS_LENGTH else "last"
        first = 0 if rows == "all" else n_tok - 1
        stem = f"goldens/tiny/{spec.name}/len{n_tok}.{rows}"
        case = {
            "id": f"{spec.name}/len{n_tok}", "model": spec.name, "prompt_ids": ids, "prompt_text": None,
            "logits": [writer.write_logits(stem + ".f64", truth[first:], "f64", first, "hf_f64_exact"),
                       writer.write_logits(stem + ".f32", torch_f32[first:], "f32", first, "hf_f32")],
            "f32_vs_f64": {"last_row": diff_record(torch_f32[-1:], truth[-1:]),
                           "stored_rows": diff_record(torch_f32[first:], truth[first:])},
        }
        if n_tok == GREEDY_PROMPT_LENGTH:
            case["greedy"] = _greedy_record(model_f64, model_f32, ids)
        cases.append(case)

    model_record = {
        "file": gguf_rel, "sha256": sha256_file(gguf_path), "bytes": gguf_path.stat().st_size,
        "arch": spec.arch, "n_vocab": spec.n_vocab, "weights_dtype": "f32", "seed": spec.seed,
        "spec": tm.spec_summary(spec), "gguf_reference_max_abs_diff": reference_diff,
    }
    return model_record, cases


def _greedy_record(model_f64, model_f32, ids: list[int]) -> dict:
    truth = decode.greedy(model_f64, ids, GREEDY_TOKENS)
    f32_ids = decode.greedy(model_f32, ids, GREEDY_TOKENS)["ids"]
    return {"n_new": GREEDY_TOKENS, "source": "hf_f64_exact", **truth, "hf_f32_ids": f32_ids,
            "hf_f32_first_divergence": decode.first_divergence(truth["ids"], f32_ids)}
