"""Lay a flat list of per-sequence rows out as a padded [B, T] batch."""
from __future__ import annotations

import numpy as np


def pad_layout(seq: np.ndarray, batch: int):
    """Stable per-sequence layout of flat rows.

    Returns (order, s, j, T): row order[i] goes to batch row s[i], column j[i];
    T is the widest sequence's row count (0 when there are no rows).
    """
    order = np.argsort(seq, kind="stable")
    s = seq[order]
    counts = np.bincount(s, minlength=batch)
    starts = np.cumsum(counts) - counts
    j = np.arange(len(s)) - starts[s]
    return order, s, j, int(counts.max()) if len(s) else 0


def ragged_window(history: np.ndarray, start: np.ndarray, count: np.ndarray):
    """Each sequence's tokens history[b, start[b] : start[b] + count[b]] as a padded
    [B, T] batch at positions start.. (its own KV slots), padding rows at slot -1.

    Returns (tokens, positions, slots, length): length = max slot + 1, for the
    runtime's KV read (the caller knows it, so the forward needs no host sync)."""
    T = int(count.max())
    cols = np.arange(T)[None, :]
    pos = start[:, None] + cols
    valid = cols < count[:, None]
    rows = np.arange(len(start))[:, None]
    tok = np.where(valid, history[rows, np.minimum(pos, history.shape[1] - 1)], 0)
    return tok, pos, np.where(valid, pos, -1), int((start + count).max())
