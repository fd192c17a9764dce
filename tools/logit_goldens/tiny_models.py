"""Tiny random-weight models: their specs, weights, transformers twins and GGUF files.

Each spec yields one set of float32 weights (drawn in float64 from a seeded generator, then
rounded to float32), which is loaded both into a transformers model (the oracle) and written to a
GGUF file following llama.cpp's conventions (the fixture tern loads). Because both sides hold
bit-identical float32 values, any logit difference comes from the forward pass alone.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from gguf import GGUFWriter, LlamaFileType, RopeScalingType
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

from . import rope as rope_math


@dataclass(frozen=True)
class TinySpec:
    name: str
    arch: str               # GGUF general.architecture: llama | qwen2 | qwen3
    seed: int
    n_vocab: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    context_length: int
    rms_eps: float
    tied_embeddings: bool
    rope: dict              # transformers rope_parameters (rope_type, rope_theta, scaling fields)
    qkv_bias: bool = False
    qk_norm: bool = False
    weight_std: float = 0.25  # large enough that logits are far from flat (std of a few units)
    description: str = ""


def f32(x: float) -> float:
    """GGUF stores hyperparameters as float32; the transformers twin must use the same value."""
    return float(np.float32(x))


# Sizes are bounded by the 300 KB budget per fixture with float32 weights: at hidden 64 that
# allows two layers. qwen3_tiny trades hidden size for three layers and q width 2x hidden (as in
# real Qwen3), so together the set covers n_head*head_dim both equal to and unequal to n_embd.
TINY_SPECS: list[TinySpec] = [
    TinySpec(name="llama_tiny", arch="llama", seed=1001, n_vocab=256, n_embd=64, n_layer=2,
             n_head=4, n_head_kv=2, head_dim=16, n_ff=80, context_length=128, rms_eps=f32(1e-5),
             tied_embeddings=True, rope={"rope_type": "default", "rope_theta": 10000.0},
             description="plain llama, GQA 4/2, tied embeddings (no output.weight), rope theta 1e4"),
    TinySpec(name="llama3_tiny", arch="llama", seed=1002, n_vocab=192, n_embd=64, n_layer=2,
             n_head=4, n_head_kv=2, head_dim=16, n_ff=64, context_length=256, rms_eps=f32(1e-5),
             tied_embeddings=False,
             rope={"rope_type": "llama3", "rope_theta": 50000.0, "factor": 8.0, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
             description="llama with llama3 rope scaling (rope_freqs.weight), untied output"),
    TinySpec(name="qwen2_tiny", arch="qwen2", seed=1003, n_vocab=192, n_embd=64, n_layer=2,
             n_head=4, n_head_kv=2, head_dim=16, n_ff=64, context_length=128, rms_eps=f32(1e-6),
             tied_embeddings=False, rope={"rope_type": "default", "rope_theta": 1000000.0},
             qkv_bias=True, description="qwen2: q/k/v biases, neox rope, untied output"),
    TinySpec(name="qwen3_tiny", arch="qwen3", seed=1004, n_vocab=256, n_embd=32, n_layer=3,
             n_head=4, n_head_kv=2, head_dim=16, n_ff=96, context_length=128, rms_eps=f32(1e-6),
             tied_embeddings=True, rope={"rope_type": "default", "rope_theta": 1000000.0},
             qk_norm=True,
             description="qwen3: per-head q/k RMSNorm, n_head*head_dim = 64 != n_embd = 32, tied"),
    TinySpec(name="llama_yarn_tiny", arch="llama", seed=1005, n_vocab=256, n_embd=64, n_layer=2,
             n_head=4, n_head_kv=2, head_dim=16, n_ff=64, context_length=128, rms_eps=f32(1e-5),
             tied_embeddings=True,
             rope={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                   "original_max_position_embeddings": 32},
             description="llama with yarn rope scaling (factor 4, original context 32), tied"),
]


# ---------------------------------------------------------------------------------------------
# transformers side

_HF_CLASSES = {
    "llama": (LlamaConfig, LlamaForCausalLM),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM),
    "qwen3": (Qwen3Config, Qwen3ForCausalLM),
}


def hf_config(spec: TinySpec):
    config_cls, _ = _HF_CLASSES[spec.arch]
    return config_cls(
        vocab_size=spec.n_vocab, hidden_size=spec.n_embd, intermediate_size=spec.n_ff,
        num_hidden_layers=spec.n_layer, num_attention_heads=spec.n_head,
        num_key_value_heads=spec.n_head_kv, head_dim=spec.head_dim,
        max_position_embeddings=spec.context_length, rms_norm_eps=spec.rms_eps,
        tie_word_embeddings=spec.tied_embeddings, rope_parameters=dict(spec.rope),
        attn_implementation="eager")


def random_weights(spec: TinySpec, param_shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """float32 weights keyed by transformers parameter name, drawn in sorted-name order so the
    result depends only on the spec (not on module construction order)."""
    rng = np.random.default_rng(spec.seed)
    weights = {}
    for name in sorted(param_shapes):
        shape = param_shapes[name]
        noise = rng.standard_normal(shape)
        if name.endswith("norm.weight"):
            values = 1.0 + 0.2 * noise   # norm gains near 1, but not 1, so a skipped gain shows
        elif name.endswith(".bias"):
            values = 0.5 * noise
        else:
            values = spec.weight_std * noise
        weights[name] = values.astype(np.float32)
    return weights


def build_hf_model(spec: TinySpec, dtype: torch.dtype):
    """The transformers twin, in `dtype`, holding the spec's random float32 weights."""
    _, model_cls = _HF_CLASSES[spec.arch]
    torch.manual_seed(0)  # construction initialises weights; they are all overwritten below
    model = model_cls(hf_config(spec)).eval()
    shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
    weights = random_weights(spec, shapes)
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(torch.from_numpy(weights[name]))
    if spec.qkv_bias != any(n.endswith("q_proj.bias") for n in shapes):
        raise ValueError(f"{spec.name}: qkv_bias={spec.qkv_bias} disagrees with the transformers model")
    if spec.tied_embeddings and "lm_head.weight" in shapes:
        raise ValueError(f"{spec.name}: expected lm_head tied to embed_tokens")
    return model.to(dtype), weights


# ---------------------------------------------------------------------------------------------
# GGUF side

def rows_to_adjacent_pairs(weight_hf: np.ndarray, n_heads: int) -> np.ndarray:
    """Reorder Q/K projection rows from transformers' rotate-half layout to llama.cpp's.

    transformers rotates dim j of a head with dim j + head_dim/2; llama.cpp's "normal" rope (the
    llama architecture) rotates dims 2j and 2j+1. So output row 2j of each head takes input row
    j, and row 2j+1 takes row j + head_dim/2. Applies to the llama architecture only; qwen2/qwen3
    use llama.cpp's neox rope, which already pairs j with j + head_dim/2."""
    head_dim = weight_hf.shape[0] // n_heads
    half = head_dim // 2
    order = []
    for head in range(n_heads):
        first = head * head_dim
        for j in range(half):
            order += [first + j, first + half + j]
    return weight_hf[np.array(order)]


_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def gguf_tensors(spec: TinySpec, weights_hf: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """GGUF tensor name -> float32 array in numpy (row-major) shape. A transformers Linear weight
    is [out, in]; GGUF lists dims fastest-first, so it becomes ne = [in, out] as llama.cpp wants."""
    out: dict[str, np.ndarray] = {"token_embd.weight": weights_hf["model.embed_tokens.weight"]}
    permute = spec.arch == "llama"
    for layer in range(spec.n_layer):
        prefix = f"model.layers.{layer}."
        for hf_suffix, gguf_suffix in _LAYER_NAMES.items():
            tensor = weights_hf.get(prefix + hf_suffix)
            if tensor is None:
                continue
            if permute and hf_suffix.startswith(("self_attn.q_proj", "self_attn.k_proj")):
                if hf_suffix.endswith(".bias"):
                    raise ValueError(f"{spec.name}: llama q/k bias permutation is not implemented")
                heads = spec.n_head if "q_proj" in hf_suffix else spec.n_head_kv
                tensor = rows_to_adjacent_pairs(tensor, heads)
            out[f"blk.{layer}.{gguf_suffix}"] = tensor
    out["output_norm.weight"] = weights_hf["model.norm.weight"]
    if not spec.tied_embeddings:
        out["output.weight"] = weights_hf["lm_head.weight"]
    if spec.rope["rope_type"] == "llama3":
        r = spec.rope
        factors = rope_math.llama3_freq_factors(
            spec.head_dim, r["rope_theta"], factor=r["factor"], low_freq_factor=r["low_freq_factor"],
            high_freq_factor=r["high_freq_factor"], original_context=r["original_max_position_embeddings"])
        out["rope_freqs.weight"] = factors.astype(np.float32)
    return {name: np.ascontiguousarray(t, dtype=np.float32) for name, t in out.items()}


def write_gguf(spec: TinySpec, weights_hf: dict[str, np.ndarray], path: Path) -> None:
    arch = spec.arch
    writer = GGUFWriter(str(path), arch)  # writes general.architecture
    writer.add_name(spec.name)
    writer.add_file_type(LlamaFileType.ALL_F32)
    writer.add_block_count(spec.n_layer)
    writer.add_context_length(spec.context_length)
    writer.add_embedding_length(spec.n_embd)
    writer.add_feed_forward_length(spec.n_ff)
    writer.add_head_count(spec.n_head)
    writer.add_head_count_kv(spec.n_head_kv)
    if spec.head_dim * spec.n_head != spec.n_embd:
        writer.add_key_length(spec.head_dim)
        writer.add_value_length(spec.head_dim)
    writer.add_rope_dimension_count(spec.head_dim)
    writer.add_rope_freq_base(spec.rope["rope_theta"])
    writer.add_layer_norm_rms_eps(spec.rms_eps)
    writer.add_vocab_size(spec.n_vocab)
    if spec.rope["rope_type"] == "yarn":
        # llama.cpp reads these three; yarn beta_fast/beta_slow stay at its defaults (32, 1),
        # which are also transformers' defaults, and ext_factor defaults to 1 for yarn.
        writer.add_rope_scaling_type(RopeScalingType.YARN)
        writer.add_rope_scaling_factor(spec.rope["factor"])
        writer.add_rope_scaling_orig_ctx_len(spec.rope["original_max_position_embeddings"])
    # llama3 scaling is carried entirely by rope_freqs.weight, as llama.cpp's converter does.
    writer.add_tokenizer_model("no_vocab")
    for name, tensor in gguf_tensors(spec, weights_hf).items():
        writer.add_tensor(name, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def spec_summary(spec: TinySpec) -> dict:
    """JSON-ready description of the spec, recorded in index.json."""
    return {k: v for k, v in dataclasses.asdict(spec).items() if k not in ("name", "seed", "weight_std")}
