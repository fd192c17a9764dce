"""RoPE frequency tables computed in float64.

transformers computes its inverse frequencies in float32 and its cos/sin in float32 even when the
model runs in float64, so a float64 "truth" run needs its own tables. These functions restate the
documented formulas (default, llama3, yarn) in float64; exact_f64.py checks them against the
float32 tables transformers builds, so a formula mistake here cannot go unnoticed.

Conventions: a head of `rot_dim` dims has rot_dim/2 rotation pairs; pair i turns by
position * inv_freq[i] radians. `attention_factor` multiplies cos and sin (yarn's mscale).
"""

from __future__ import annotations

import math

import numpy as np


def default_inv_freq(rot_dim: int, theta: float) -> np.ndarray:
    """inv_freq[i] = theta^(-2i/rot_dim), shape [rot_dim/2], float64."""
    exponents = np.arange(0, rot_dim, 2, dtype=np.float64) / rot_dim
    return 1.0 / np.power(float(theta), exponents)


def llama3_inv_freq(rot_dim: int, theta: float, factor: float, low_freq_factor: float,
                    high_freq_factor: float, original_context: int) -> np.ndarray:
    """Llama 3.1 scaling: long wavelengths are divided by `factor`, short ones kept, and the
    band in between blends the two by how many rotations fit in the original context."""
    base = default_inv_freq(rot_dim, theta)
    wavelen = 2.0 * math.pi / base
    long_wavelen = original_context / low_freq_factor   # beyond this: fully scaled
    short_wavelen = original_context / high_freq_factor  # below this: untouched
    smooth = (original_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    blended = (1.0 - smooth) * base / factor + smooth * base
    out = np.where(wavelen > long_wavelen, base / factor, blended)
    return np.where(wavelen < short_wavelen, base, out)


def llama3_freq_factors(rot_dim: int, theta: float, **scaling) -> np.ndarray:
    """What GGUF stores as rope_freqs.weight: per pair, the divisor llama.cpp applies to the
    default frequency (base_inv_freq / scaled_inv_freq), shape [rot_dim/2]."""
    return default_inv_freq(rot_dim, theta) / llama3_inv_freq(rot_dim, theta, **scaling)


def yarn_correction_range(rot_dim: int, theta: float, original_context: int,
                          beta_fast: float, beta_slow: float) -> tuple[float, float]:
    """Pair-index range [low, high] over which yarn ramps from extrapolation to interpolation.

    The pair that completes `n` full turns over the original context sits at
    rot_dim * ln(ctx / (2*pi*n)) / (2 ln theta); the bounds are floored/ceiled and clamped, as
    both transformers (truncate=True) and llama.cpp do."""
    def pair_for_turns(turns: float) -> float:
        return rot_dim * math.log(original_context / (turns * 2.0 * math.pi)) / (2.0 * math.log(theta))
    low = max(math.floor(pair_for_turns(beta_fast)), 0)
    high = min(math.ceil(pair_for_turns(beta_slow)), rot_dim - 1)
    return float(low), float(high)


def yarn_inv_freq(rot_dim: int, theta: float, factor: float, original_context: int,
                  beta_fast: float = 32.0, beta_slow: float = 1.0) -> tuple[np.ndarray, float]:
    """YaRN: pairs below `low` keep their frequency (extrapolate), pairs above `high` are divided
    by `factor` (interpolate), linear blend in between. Returns (inv_freq, attention_factor)."""
    base = default_inv_freq(rot_dim, theta)
    low, high = yarn_correction_range(rot_dim, theta, original_context, beta_fast, beta_slow)
    span = max(high - low, 0.001)
    pair = np.arange(rot_dim // 2, dtype=np.float64)
    interp_weight = np.clip((pair - low) / span, 0.0, 1.0)  # 0: keep, 1: divide by factor
    inv_freq = base * (1.0 - interp_weight) + (base / factor) * interp_weight
    attention_factor = 1.0 + 0.1 * math.log(factor) if factor > 1.0 else 1.0
    return inv_freq, attention_factor


def inv_freq_for(rope: dict, rot_dim: int) -> tuple[np.ndarray, float]:
    """Dispatch on a transformers-style rope_parameters dict. Returns (inv_freq, attention_factor)."""
    kind = rope.get("rope_type", "default")
    theta = rope["rope_theta"]
    if kind == "default":
        return default_inv_freq(rot_dim, theta), 1.0
    if kind == "llama3":
        # The GGUF file carries these factors as float32 (rope_freqs.weight), and the goldens must
        # describe the model in the file, so the float64 truth uses the float32-rounded factors.
        factors = llama3_freq_factors(rot_dim, theta, factor=rope["factor"],
                                      low_freq_factor=rope["low_freq_factor"],
                                      high_freq_factor=rope["high_freq_factor"],
                                      original_context=rope["original_max_position_embeddings"])
        return default_inv_freq(rot_dim, theta) / factors.astype(np.float32).astype(np.float64), 1.0
    if kind == "yarn":
        return yarn_inv_freq(rot_dim, theta, rope["factor"], rope["original_max_position_embeddings"],
                             rope.get("beta_fast") or 32.0, rope.get("beta_slow") or 1.0)
    raise ValueError(f"unsupported rope_type {kind!r}")
