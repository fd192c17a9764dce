"""Writing golden arrays and the small derived records that go into index.json.

Binary layout (documented in tests/data/goldens/README.md): raw little-endian IEEE floats, no
header, row-major [n_rows, n_vocab]; the index entry gives dtype, shape, byte count and sha256.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

_DTYPES = {"f32": np.dtype("<f4"), "f64": np.dtype("<f8")}


class GoldenWriter:
    """Writes arrays under `data_root` (tests/data) and returns index records whose paths are
    relative to it, so the index never names a machine-specific directory."""

    def __init__(self, data_root: Path):
        self.data_root = data_root

    def write_logits(self, rel_path: str, logits: np.ndarray, dtype: str, first_row: int,
                     source: str) -> dict:
        """`logits` is [n_rows, n_vocab] for prompt positions first_row .. first_row + n_rows - 1."""
        if logits.ndim != 2:
            raise ValueError(f"expected logits of rank 2 [n_rows, n_vocab], got shape {logits.shape}")
        data = np.ascontiguousarray(logits, dtype=_DTYPES[dtype]).tobytes()
        path = self.data_root / rel_path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return {"path": rel_path, "dtype": dtype, "first_row": int(first_row),
                "n_rows": int(logits.shape[0]), "n_vocab": int(logits.shape[1]),
                "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(), "source": source}


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def top_k(logits_row: np.ndarray, k: int) -> dict:
    """Top-k ids by descending logit (ties broken by lower id) with their values."""
    order = np.lexsort((np.arange(logits_row.size), -logits_row))[:k]
    return {"ids": [int(i) for i in order], "values": [float(logits_row[i]) for i in order]}


def row_stats(logits_row: np.ndarray) -> dict:
    """Whole-vector summaries for cases that store only the top-k: a test can still check the
    mass outside the top-k (logsumexp) and the overall scale (mean, std, min)."""
    peak = float(logits_row.max())
    return {"mean": float(logits_row.mean()), "std": float(logits_row.std()),
            "min": float(logits_row.min()), "max": peak,
            "logsumexp": peak + float(np.log(np.exp(logits_row - peak).sum())),
            "argmax": int(np.argmax(logits_row))}


def diff_record(f32_rows: np.ndarray, f64_rows: np.ndarray) -> dict:
    """How far the float32 torch run is from the float64 truth over the same rows."""
    delta = np.abs(f32_rows.astype(np.float64) - f64_rows)
    scale = float(np.abs(f64_rows).max())
    return {"max_abs": float(delta.max()), "mean_abs": float(delta.mean()),
            "max_abs_over_max_abs_logit": float(delta.max() / scale) if scale > 0 else 0.0}
