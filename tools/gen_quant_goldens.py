#!/usr/bin/env python3
"""Writes the (de)quantization goldens that tests/core/quant_ref_test.cpp checks tern against.

The reference is the `gguf` Python package (gguf.quants, numpy float32), i.e. the GGUF block
definitions as the format's own tooling decodes and encodes them.

    pip install gguf numpy
    python3 tools/gen_quant_goldens.py            # writes tests/data/quant/*.bin

Output: one file per (direction, type), tests/data/quant/<type>.<direction>.bin, e.g.
q4_k.dequant.bin, q4_0.quant.bin. Every file is little-endian:

    offset 0   char[4]  magic "TQG1"
    offset 4   u32      direction: 0 = dequant (values = gguf dequantize(blocks)),
                                   1 = quant   (blocks = gguf quantize(values))
    offset 8   u32      GGML type id (gguf.GGMLQuantizationType)
    offset 12  u32      n_elems   number of float32 values
    offset 16  u32      n_bytes   number of encoded bytes (= n_elems / block_elems * block_bytes)
    offset 20  u8[n_bytes]        encoded blocks, as stored in a GGUF tensor
    then       f32[n_elems]       values

Dequant goldens start from random block bytes whose fp16 (or q8_k float32) scale fields are
replaced by finite, sane values, so every bit pattern of the quant fields is exercised but no
block decodes to inf/nan. gguf-py has no decoder for q8_1 and q8_k (activation-only types); for
those two the script decodes with the GGUF formula y = float32(q) * d itself (see dequant_q8).

Quant goldens exist only for the types gguf-py can encode (f16, bf16, q4_0, q4_1, q5_0, q5_1,
q8_0): gaussian blocks at several magnitudes plus edge blocks (zeros, constants, negative-only,
single spikes, exact rounding ties, large and tiny magnitudes).

The random generator is seeded, so re-running the script reproduces the files byte for byte.
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import numpy as np

try:
    import gguf
    from gguf import GGMLQuantizationType as T
    from gguf import quants
except ImportError:
    sys.exit("gen_quant_goldens.py needs the gguf package: pip install gguf numpy")

MAGIC = b"TQG1"
DEQUANT, QUANT = 0, 1
OUT_DIR = Path(__file__).resolve().parent.parent / "tests" / "data" / "quant"

# Byte offsets of the fp16 scale fields inside each block (from the GGUF block definitions), so
# random blocks can be given sane scales. q8_k's scale is a float32 at offset 0.
FP16_SCALE_OFFSETS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0], T.Q8_1: [0, 2],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}

# (elements, bytes) per block. gguf-py's GGML_QUANT_SIZES still lists q8_1 at its old 40-byte
# layout (float32 d and s); ggml has long stored q8_1 as fp16 d, fp16 s, int8 qs[32] = 36 bytes,
# which is what tern (core/quant_blocks.h) implements.
def block_size(qtype: T) -> tuple[int, int]:
    return (32, 36) if qtype == T.Q8_1 else gguf.GGML_QUANT_SIZES[qtype]


# Blocks per dequant golden: enough to hit every bit of every field many times, small on disk.
DEQUANT_BLOCKS = {T.F32: 256, T.F16: 256, T.BF16: 256,
                  T.Q4_0: 32, T.Q4_1: 32, T.Q5_0: 32, T.Q5_1: 32, T.Q8_0: 32, T.Q8_1: 32,
                  T.Q2_K: 8, T.Q3_K: 8, T.Q4_K: 8, T.Q5_K: 8, T.Q6_K: 8, T.Q8_K: 8}

QUANT_TYPES = [T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]


def sane_scales(rng: np.random.Generator, n: int) -> np.ndarray:
    """n finite float32 scales: mostly 1e-4..1 of either sign, a few fp16 subnormals and zeros."""
    mag = np.exp(rng.uniform(np.log(1e-4), np.log(1.0), n)).astype(np.float32)
    sign = np.where(rng.random(n) < 0.2, -1.0, 1.0).astype(np.float32)
    s = mag * sign
    s[rng.random(n) < 0.05] = np.float32(3e-6)  # an fp16 subnormal
    s[rng.random(n) < 0.03] = np.float32(0.0)
    return s


def random_blocks(rng: np.random.Generator, qtype: T, n_blocks: int) -> np.ndarray:
    block_elems, block_bytes = block_size(qtype)
    raw = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    if qtype == T.F32:
        return rng.standard_normal(n_blocks).astype(np.float32).view(np.uint8).reshape(n_blocks, 4)
    if qtype in (T.F16, T.BF16):
        vals = raw.view(np.uint16)
        exp_mask, exp_low_bit = (0x7C00, 0x0400) if qtype == T.F16 else (0x7F80, 0x0080)
        # Keep inf/nan out: where the exponent is all ones, clear its lowest bit.
        vals[(vals & exp_mask) == exp_mask] ^= np.uint16(exp_low_bit)
        return raw
    if qtype == T.Q8_K:
        raw[:, 0:4] = sane_scales(rng, n_blocks).view(np.uint8).reshape(n_blocks, 4)
        return raw
    for off in FP16_SCALE_OFFSETS[qtype]:
        raw[:, off:off + 2] = sane_scales(rng, n_blocks).astype(np.float16).view(np.uint8).reshape(n_blocks, 2)
    return raw


def dequant_q8(blocks: np.ndarray, qtype: T) -> np.ndarray:
    """GGUF formula for the two types gguf-py cannot decode: y = float32(q) * d."""
    if qtype == T.Q8_1:  # fp16 d, fp16 s (unused for decoding), int8 qs[32]
        d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
        q = blocks[:, 4:36].view(np.int8).astype(np.float32)
    else:  # Q8_K: float32 d, int8 qs[256], int16 bsums[16] (unused for decoding)
        d = blocks[:, 0:4].copy().view(np.float32)
        q = blocks[:, 4:260].view(np.int8).astype(np.float32)
    return (q * d).reshape(-1)


def dequantize(blocks: np.ndarray, qtype: T) -> np.ndarray:
    if qtype in (T.Q8_1, T.Q8_K):
        return dequant_q8(blocks, qtype)
    return quants.dequantize(blocks.reshape(-1), qtype).astype(np.float32, copy=False).reshape(-1)


def quant_inputs(rng: np.random.Generator, qtype: T) -> np.ndarray:
    """Rows of 32-element blocks: gaussians at several magnitudes, then edge cases."""
    n = 32
    blocks = [rng.standard_normal(n) * scale for scale in (1e-3, 0.02, 0.5, 1.0, 7.0, 100.0) for _ in range(4)]
    blocks.append(rng.uniform(-1, 1, n))                      # uniform
    blocks.append(np.zeros(n))                                # all zeros
    blocks.append(np.full(n, 0.37))                           # constant positive
    blocks.append(np.full(n, -2.5))                           # constant negative
    blocks.append(-np.abs(rng.standard_normal(n)))            # negative only
    blocks.append(np.abs(rng.standard_normal(n)) + 3.0)       # positive only, offset from zero
    spike = np.zeros(n); spike[5] = -4.0; blocks.append(spike)  # one negative spike
    spike = np.zeros(n); spike[31] = 9.0; blocks.append(spike)  # one positive spike, last slot
    tie = np.zeros(n); tie[0] = 4.0; tie[1] = -4.0; blocks.append(tie)  # |max| tie: first wins
    blocks.append(np.arange(-16, 16) * 0.25)                  # lands exactly on rounding ties
    blocks.append(np.arange(n) * 0.5 + 0.25)                  # more exact halves
    blocks.append(rng.standard_normal(n) * 2e4)               # large (scales stay < fp16 max)
    blocks.append(rng.standard_normal(n) * 1e-5)              # tiny (fp16 subnormal scales)
    values = np.concatenate(blocks).astype(np.float32)
    if qtype in (T.F16, T.BF16):
        specials = np.array([0.0, -0.0, 1.0, 65504.0, 65520.0, 1e6, -1e6, 6e-8, 2.98e-8, 1e-30,
                             np.float32(1.0) + np.float32(2 ** -11), 3.0e38, -3.4e38, np.inf, -np.inf,
                             1.00390625, 1.01171875], dtype=np.float32)
        values = np.concatenate([values, specials, rng.standard_normal(15).astype(np.float32)])
        if qtype == T.BF16:  # bf16 encoding of nan is defined (quieted); f16's depends on numpy
            nans = np.array([0x7FC00000, 0x7F800001, 0xFFA00000, 0x7FBFFFFF], dtype=np.uint32).view(np.float32)
            values = np.concatenate([values, nans])
        pad = (-len(values)) % 32
        values = np.concatenate([values, np.zeros(pad, dtype=np.float32)])
    return values


def quantize(values: np.ndarray, qtype: T) -> np.ndarray:
    with np.errstate(over="ignore"):  # the f16 specials overflow to inf on purpose
        out = quants.quantize(values, qtype)
    return np.ascontiguousarray(out).view(np.uint8).reshape(-1)


def write_golden(path: Path, direction: int, qtype: T, blocks: np.ndarray, values: np.ndarray) -> int:
    blocks = np.ascontiguousarray(blocks).view(np.uint8).reshape(-1)
    values = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
    block_elems, block_bytes = block_size(qtype)
    assert len(values) % block_elems == 0
    assert len(blocks) == len(values) // block_elems * block_bytes, (qtype.name, len(blocks), len(values))
    data = MAGIC + struct.pack("<4I", direction, int(qtype), len(values), len(blocks))
    data += blocks.tobytes() + values.astype("<f4").tobytes()
    path.write_bytes(data)
    return len(data)


def main() -> None:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20240611)
    total = 0
    for qtype, n_blocks in DEQUANT_BLOCKS.items():
        blocks = random_blocks(rng, qtype, n_blocks)
        values = dequantize(blocks, qtype)
        assert np.all(np.isfinite(values)), qtype.name
        total += write_golden(OUT_DIR / f"{qtype.name.lower()}.dequant.bin", DEQUANT, qtype, blocks, values)
    for qtype in QUANT_TYPES:
        values = quant_inputs(rng, qtype)
        total += write_golden(OUT_DIR / f"{qtype.name.lower()}.quant.bin", QUANT, qtype, quantize(values, qtype), values)
    print(f"wrote {len(DEQUANT_BLOCKS) + len(QUANT_TYPES)} files, {total} bytes, to {OUT_DIR}")


if __name__ == "__main__":
    main()
