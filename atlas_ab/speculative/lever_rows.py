"""The host's rows of three levers, planned between a wave's steps (loop.py calls them): CATCHUP's
gap rows before a propose, DRAFTER_PREFILL's context rows after a turn's prefill, RING_PREFILL's
one ring row of the prefill's last hidden. Each takes the wave's arrays and returns rows; none
keeps state. (Shapes: step.py's vocabulary.)"""
from __future__ import annotations

import functools

import numpy as np
import torch

from atlas_ab.proposers.base import RowFeed
from atlas_ab.proposers.ring import Ring, gap_keys
from atlas_ab.runtime.batch import ragged_runs


def drafter_context(proposer, history: np.ndarray, last_hidden: torch.Tensor, start: np.ndarray, count: np.ndarray,
                    hid: torch.Tensor, before: torch.Tensor | None = None):
    """DRAFTER_PREFILL: the drafter's context rows after a turn's prefill (hid [B, T, H]: positions
    start .. start+count-1 [B]), pair keys start-1 .. start+count-2, i.e. (token k+1, hidden k): key
    start-1 pairs the pending token with the saved hidden (last_hidden [B, H]). A key the drafter
    holds is never re-written; the dense space only appends at slot == key (the reference engine
    refuses a feed that would leave a hole), so a misaligned dense drafter is left as it is.
    before: [B, L, H] the hiddens of every earlier position (PREFIX_REUSE's fresh drafter, prefilled
    over the whole prompt): the keys below start-1 the drafter lacks are written too, from there.
    Returns the rows the drafter took (`RowFeed`), None when there are none."""
    drafter_rows, newest = proposer.drafter_rows(), proposer.last_pair_key()
    first = start - 1 if before is None else np.zeros_like(start)
    k0 = np.maximum(np.maximum(first, newest + 1), 0)                  # [B] each sequence's first key
    n = np.maximum(start + count - 1 - k0, 0)                           # keys k0 .. start+count-2
    if proposer.slot_is_key:
        n = np.where(drafter_rows == k0, n, 0)
    seq, j = ragged_runs(n)
    if not len(seq):
        return None
    key = k0[seq] + j
    t = functools.partial(torch.as_tensor, device=hid.device)
    rel = key - start[seq]                    # hidden of position k: from this prefill, or the saved one
    from_saved = rel < 0
    hiddens = hid[t(seq), t(np.maximum(rel, 0))]                                           # [rows, H]
    if from_saved.any():
        saved = last_hidden[t(seq[from_saved])] if before is None else before[t(seq[from_saved]), t(key[from_saved])]
        hiddens[t(np.nonzero(from_saved)[0])] = saved
    return proposer.prefill_drafter(RowFeed(seq=seq, key=key, token=history[seq, key + 1],
                                            label=np.full(len(seq), -1), hiddens=hiddens))


def catchup_rows(ring: Ring, row_space: str, proposer, history: np.ndarray, n: np.ndarray, active: np.ndarray,
                 static: bool, width: int | None, plan: dict, lengths: dict):
    """CATCHUP: plan the gap rows between the drafter's newest row and a propose at n [B] (or, n the
    turn's start, before its drafter prefill), fed from the ring (target hiddens) on the device
    before the drafts: cu_tok, cu_slot, cu_rope, cu_label [B, W] into `plan`, their KV length into
    `lengths`. width: the rows' fixed width, planned even when there are none (static shapes),
    unless a sequence's gap is wider: then the rows' bucket (a run-ahead halts on such a step and
    the host runs it). Returns the rows fed per sequence [B] and (RowFeed, their columns j), or None."""
    seq, key = gap_keys(ring, row_space, proposer.last_pair_key(), proposer.drafter_rows(), n, active)
    fed = np.zeros(len(n), dtype=np.int64)
    if width is not None and len(seq) and np.bincount(seq).max() > width:
        width = None
    if len(key) == 0:
        if width is not None:
            z = np.zeros((len(n), width), dtype=np.int64)
            plan.update(cu_tok=z, cu_slot=z - 1, cu_rope=z, cu_label=z)
        return fed, None
    labels = key + 1                          # pair key k reads ring label k+1
    feed = RowFeed(seq=seq, key=key, token=history[seq, key + 1], label=labels, hiddens=None)
    w, rows = proposer.plan_rows(feed, static=static, width=width)
    if rows is None:
        return fed, None
    plan.update(cu_tok=rows["tok"], cu_slot=rows["slot"], cu_rope=rows["rope"], cu_label=rows["label"])
    lengths["catchup"] = int(rows["slot"].max()) + 1
    np.add.at(fed, w.seq, 1)
    return fed, (w, rows["j"])


def ring_prefill(ring: Ring, last_hidden: torch.Tensor, kv_len: np.ndarray) -> tuple:
    """RING_PREFILL: ring the prefill's last hidden (position P-1, P = kv_len [B]) under label P. The
    turn's first propose pairs it with key P-1 (row 0); when that propose is rejected outright the
    compact row space trims the row, and no ring label could rebuild it. Returns the labels, the
    rows [B, H] and where they went."""
    seq = np.arange(len(kv_len))
    label = kv_len.copy()                     # label n holds the hidden of position n-1
    rows = last_hidden[torch.as_tensor(seq, device=last_hidden.device)]   # a gather: last_hidden moves in place
    return label, rows, ring.write(seq, label, rows)
