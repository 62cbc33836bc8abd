"""Ragged token windows as the runtime's padded batch (tokens, positions, slots, length).

The runtime's forward takes [B, T] tokens, positions and KV slots, with padding rows at slot
-1 (see kv.py). The turn prefill, the target-only greedy decode and the draft model's
catch-up all hand it each sequence's own window of its token history.
"""
from __future__ import annotations

import numpy as np


def ragged_window(history: np.ndarray, start: np.ndarray, count: np.ndarray, width: int | None = None):
    """Each sequence's tokens history[b, start[b] : start[b] + count[b]] as a padded
    [B, T] batch at positions start.. (its own KV slots), padding rows at slot -1; T is the
    widest count, or `width` (a static shape) if given.

    Returns (tokens, positions, slots, length): length = max slot + 1, for the
    runtime's KV read (the caller knows it, so the forward needs no host sync)."""
    T = int(count.max()) if width is None else width
    cols = np.arange(T)[None, :]
    pos = start[:, None] + cols
    valid = cols < count[:, None]
    rows = np.arange(len(start))[:, None]
    tok = np.where(valid, history[rows, np.minimum(pos, history.shape[1] - 1)], 0)
    return tok, pos, np.where(valid, pos, -1), int((start + count).max())


def ragged_runs(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sequence b's run of lengths[b] items for every b, flattened in sequence order: each item's
    sequence and its index in its run, (seq, j), each [sum(lengths)]. Vectorised because the turn
    prefill is host-bound (bench/RESULTS.md, "a wave by part")."""
    lengths = np.asarray(lengths, dtype=np.int64)
    seq = np.repeat(np.arange(len(lengths)), lengths)
    return seq, np.arange(len(seq)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
