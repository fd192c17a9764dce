"""A float64 numpy forward pass that reads a GGUF file the way llama.cpp interprets it.

It exists to prove that a GGUF fixture and its transformers twin describe the same model: it uses
only the GGUF metadata and tensors, with llama.cpp's conventions (adjacent-pair rope for the
llama architecture, rotate-half "neox" rope for qwen2/qwen3, rope_freqs.weight as per-pair
frequency divisors, yarn as ggml applies it), and it must reproduce the transformers float64 logits
to ~1e-9. A wrong permutation, a missing key or a misnamed tensor shows up here, before any
golden file is written. It is deliberately plain and slow; it is not an oracle for tern by itself.
"""

from __future__ import annotations

import math

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


class GgufModel:
    def __init__(self, path: str):
        reader = GGUFReader(path)
        self.meta = {name: field.contents() for name, field in reader.fields.items()
                     if not name.startswith("tokenizer.ggml.") or name == "tokenizer.ggml.model"}
        self.arch = self.meta["general.architecture"]
        # numpy shape is GGUF ne reversed: a matrix with ne = [in, out] reads as [out, in].
        self.tensors = {t.name: dequantize(t.data, t.tensor_type).astype(np.float64).reshape(
            tuple(int(d) for d in reversed(t.shape))) for t in reader.tensors}

    def key(self, suffix: str, default=None):
        value = self.meta.get(f"{self.arch}.{suffix}", default)
        if value is None:
            raise KeyError(f"GGUF lacks {self.arch}.{suffix}")
        return value


def _rms_norm(x: np.ndarray, gain: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * gain


def _rope_angles(model: GgufModel, positions: np.ndarray, n_rot: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Per (position, pair) angle and the cos/sin multiplier, following ggml's rope_ext."""
    base = float(model.key("rope.freq_base", 10000.0))
    theta = base ** (-np.arange(0, n_rot, 2, dtype=np.float64) / n_rot)
    if "rope_freqs.weight" in model.tensors:
        theta = theta / model.tensors["rope_freqs.weight"]
    angles = positions[:, None].astype(np.float64) * theta[None, :]
    scaling = model.meta.get(f"{model.arch}.rope.scaling.type", "none")
    if scaling == "none":
        return angles, 1.0
    if scaling != "yarn":
        raise ValueError(f"rope scaling {scaling!r} not handled by the reference")
    freq_scale = 1.0 / float(model.key("rope.scaling.factor"))
    n_ctx_orig = int(model.key("rope.scaling.original_context_length"))
    beta_fast = float(model.meta.get(f"{model.arch}.rope.scaling.yarn_beta_fast", 32.0))
    beta_slow = float(model.meta.get(f"{model.arch}.rope.scaling.yarn_beta_slow", 1.0))
    ext_factor = float(model.meta.get(f"{model.arch}.rope.scaling.yarn_ext_factor", 1.0))

    def pair_for_turns(turns):
        return n_rot * math.log(n_ctx_orig / (turns * 2 * math.pi)) / (2 * math.log(base))
    low = max(0.0, math.floor(pair_for_turns(beta_fast)))
    high = min(n_rot - 1.0, math.ceil(pair_for_turns(beta_slow)))
    pair = np.arange(n_rot // 2, dtype=np.float64)
    keep_weight = 1.0 - np.clip((pair - low) / max(0.001, high - low), 0.0, 1.0)  # 1: extrapolate
    mix = keep_weight * ext_factor
    angles = angles * freq_scale * (1.0 - mix) + angles * mix
    mscale = 1.0 + 0.1 * math.log(1.0 / freq_scale)
    return angles, mscale


def _apply_rope(x: np.ndarray, angles: np.ndarray, mscale: float, adjacent_pairs: bool) -> np.ndarray:
    """x: [tokens, heads, head_dim]; angles: [tokens, n_rot/2]."""
    half = angles.shape[1]
    cos = (np.cos(angles) * mscale)[:, None, :]
    sin = (np.sin(angles) * mscale)[:, None, :]
    out = x.copy()
    if adjacent_pairs:
        a, b = x[..., 0:2 * half:2], x[..., 1:2 * half:2]
        out[..., 0:2 * half:2] = a * cos - b * sin
        out[..., 1:2 * half:2] = a * sin + b * cos
    else:
        a, b = x[..., :half], x[..., half:2 * half]
        out[..., :half] = a * cos - b * sin
        out[..., half:2 * half] = a * sin + b * cos
    return out


def forward(model: GgufModel, token_ids: list[int]) -> np.ndarray:
    """All-position logits [n_tokens, n_vocab] in float64 for one sequence starting at position 0."""
    t = model.tensors
    n_layer = int(model.key("block_count"))
    n_embd = int(model.key("embedding_length"))
    n_head = int(model.key("attention.head_count"))
    n_head_kv = int(model.key("attention.head_count_kv"))
    head_dim = int(model.meta.get(f"{model.arch}.attention.key_length", n_embd // n_head))
    n_rot = int(model.meta.get(f"{model.arch}.rope.dimension_count", head_dim))
    eps = float(model.key("attention.layer_norm_rms_epsilon"))
    adjacent_pairs = model.arch == "llama"  # qwen2/qwen3 use neox rope in llama.cpp

    n_tok = len(token_ids)
    positions = np.arange(n_tok)
    angles, mscale = _rope_angles(model, positions, n_rot)
    causal = np.triu(np.full((n_tok, n_tok), -np.inf), k=1)
    x = t["token_embd.weight"][np.asarray(token_ids)]
    for layer in range(n_layer):
        p = f"blk.{layer}."
        h = _rms_norm(x, t[p + "attn_norm.weight"], eps)
        q = h @ t[p + "attn_q.weight"].T + t.get(p + "attn_q.bias", 0.0)
        k = h @ t[p + "attn_k.weight"].T + t.get(p + "attn_k.bias", 0.0)
        v = h @ t[p + "attn_v.weight"].T + t.get(p + "attn_v.bias", 0.0)
        q = q.reshape(n_tok, n_head, head_dim)
        k = k.reshape(n_tok, n_head_kv, head_dim)
        v = v.reshape(n_tok, n_head_kv, head_dim)
        if p + "attn_q_norm.weight" in t:
            q = _rms_norm(q, t[p + "attn_q_norm.weight"], eps)
            k = _rms_norm(k, t[p + "attn_k_norm.weight"], eps)
        q = _apply_rope(q, angles, mscale, adjacent_pairs)
        k = _apply_rope(k, angles, mscale, adjacent_pairs)
        attn = np.empty((n_tok, n_head, head_dim))
        group = n_head // n_head_kv
        for head in range(n_head):
            scores = q[:, head, :] @ k[:, head // group, :].T / math.sqrt(head_dim) + causal
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            attn[:, head, :] = (scores / scores.sum(axis=-1, keepdims=True)) @ v[:, head // group, :]
        x = x + attn.reshape(n_tok, n_head * head_dim) @ t[p + "attn_output.weight"].T
        h = _rms_norm(x, t[p + "ffn_norm.weight"], eps)
        gate = h @ t[p + "ffn_gate.weight"].T
        x = x + (gate / (1.0 + np.exp(-gate)) * (h @ t[p + "ffn_up.weight"].T)) @ t[p + "ffn_down.weight"].T
    x = _rms_norm(x, t["output_norm.weight"], eps)
    return x @ t.get("output.weight", t["token_embd.weight"]).T
