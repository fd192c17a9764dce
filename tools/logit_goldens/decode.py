"""Forward passes and greedy decoding on transformers models, returning float64 numpy arrays."""

from __future__ import annotations

import numpy as np
import torch


@torch.no_grad()
def all_logits(model, token_ids: list[int]) -> np.ndarray:
    """[n_tokens, n_vocab] logits for one sequence at positions 0..n-1."""
    ids = torch.tensor([token_ids], dtype=torch.long)
    return model(ids, use_cache=False).logits[0].to(torch.float64).numpy()


@torch.no_grad()
def last_logits(model, token_ids: list[int]) -> np.ndarray:
    ids = torch.tensor([token_ids], dtype=torch.long)
    return model(ids, use_cache=False, logits_to_keep=1).logits[0, -1].to(torch.float64).numpy()


def _top2(row: np.ndarray) -> tuple[int, int, float]:
    order = np.lexsort((np.arange(row.size), -row))[:2]
    return int(order[0]), int(order[1]), float(row[order[0]] - row[order[1]])


@torch.no_grad()
def greedy(model, token_ids: list[int], n_new: int) -> dict:
    """Greedy continuation of `n_new` tokens (end-of-sequence ids get no special treatment).

    Step s picks the argmax of the logits after prompt + the first s generated tokens; gaps[s]
    is top1 - top2 at that step and runner_up[s] the second id, so a test that diverges can tell
    a genuine near-tie (small gap, picked the runner-up) from a bug. Prompt is prefilled once,
    then one token per step through the KV cache, as an engine would."""
    out = model(torch.tensor([token_ids], dtype=torch.long), use_cache=True, logits_to_keep=1)
    ids, runner_up, gaps = [], [], []
    for step in range(n_new):
        best, second, gap = _top2(out.logits[0, -1].to(torch.float64).numpy())
        ids.append(best)
        runner_up.append(second)
        gaps.append(gap)
        if step + 1 < n_new:
            out = model(torch.tensor([[best]], dtype=torch.long), cache=out.cache,
                        use_cache=True)
    return {"ids": ids, "runner_up_ids": runner_up, "top2_gaps": gaps}


def first_divergence(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None
