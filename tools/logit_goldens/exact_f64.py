"""Make a transformers model compute in true float64.

`model.double()` alone is not a float64 run: transformers' RMSNorm upcasts to float32 and back,
its rotary embedding computes inverse frequencies and cos/sin in float32, and eager attention
takes its softmax in float32. Each of these rounds activations to ~7 significant digits, which
would make the "truth" no better than the float32 run it is meant to judge. This module swaps
those three pieces for float64 versions, leaving every other line of the transformers model as is.
"""

from __future__ import annotations

import types

import numpy as np
import torch
from torch import nn
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, eager_mask

from . import rope as rope_math

ATTN_NAME = "tern_exact_eager"


def _exact_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """Eager attention whose softmax stays in the input dtype. Shapes as transformers passes them:
    query [batch, n_head, seq, head_dim], key/value [batch, n_head_kv, seq_kv, head_dim]."""
    groups = query.shape[1] // key.shape[1]
    key = key.repeat_interleave(groups, dim=1)
    value = value.repeat_interleave(groups, dim=1)
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        scores = scores + attention_mask
    probs = torch.softmax(scores, dim=-1)
    out = torch.matmul(probs, value).transpose(1, 2).contiguous()
    return out, probs


AttentionInterface.register(ATTN_NAME, _exact_attention)
# Without a registered mask builder transformers assumes the kernel masks itself and passes None.
AttentionMaskInterface.register(ATTN_NAME, eager_mask)


def _rms_norm_forward(self, hidden):
    variance = hidden.pow(2).mean(-1, keepdim=True)
    return self.weight * (hidden * torch.rsqrt(variance + self.variance_epsilon))


def _rotary_forward(self, x, position_ids):
    angles = position_ids[..., None].to(torch.float64) * self.inv_freq_f64
    angles = torch.cat((angles, angles), dim=-1)
    return ((angles.cos() * self.attention_factor_f64).to(x.dtype),
            (angles.sin() * self.attention_factor_f64).to(x.dtype))


def make_exact_f64(model: nn.Module, rope_parameters: dict, rot_dim: int) -> nn.Module:
    """Convert `model` to float64 in place and patch the float32 islands. Checks that the float64
    rope tables agree with the float32 ones transformers built (to float32 rounding), which also
    validates rope.py's formulas against transformers' own."""
    model.double()
    rotary = model.model.rotary_emb
    inv_freq, attention_factor = rope_math.inv_freq_for(rope_parameters, rot_dim)
    hf_inv_freq = rotary.inv_freq.detach().to(torch.float64).numpy()
    rel = np.max(np.abs(hf_inv_freq - inv_freq) / inv_freq)
    if rel > 2e-6:
        raise ValueError(f"float64 inv_freq disagrees with transformers': max rel diff {rel:.3g}, expected < 2e-6")
    if abs(attention_factor - float(rotary.attention_scaling)) > 1e-6:
        raise ValueError(f"attention factor {attention_factor} != transformers' {rotary.attention_scaling}")
    rotary.inv_freq_f64 = torch.from_numpy(inv_freq)
    rotary.attention_factor_f64 = attention_factor
    rotary.forward = types.MethodType(_rotary_forward, rotary)

    patched = 0
    for module in model.modules():
        if type(module).__name__.endswith("RMSNorm"):
            module.forward = types.MethodType(_rms_norm_forward, module)
            patched += 1
    if patched == 0:
        raise ValueError("found no RMSNorm modules to patch")
    model.set_attn_implementation(ATTN_NAME)
    return model
