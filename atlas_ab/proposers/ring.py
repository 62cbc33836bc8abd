"""The catch-up ring: target hiddens by label, per sequence.

Label convention (the reference engine's, verified there by fingerprints): label n
holds the target hidden of position n-1, so pair key k reads label k+1. The
ring is written on serial decode steps (CATCHUP), with REFEED for every
accepted position after a verify, and with RING_PREFILL the turn prefill's last
hidden (label P for the turn's first generated position P). Rings are per sequence (the
reference engine's ring is single-sequence, forced off when more than one sequence verifies).

Hiddens live on the device ([B, R+1, H]: R slots and one dump slot that masked writes
go to, so a step's writes need no host decision); labels live on the host, because the
host already knows which labels a step wrote once it has read the step, and the
catch-up plan is host bookkeeping. A wave that runs ahead of the host (speculative/run_ahead.py)
plans its catch-up on the device too: it keeps a device copy of the labels (`mirror`,
[B, R+1]), loaded from the host's at each chunk and written by the step's own ring writes,
and finds the gap with `gap_keys_on_device`, the same rule as `gap_keys`.
"""
from __future__ import annotations

import numpy as np
import torch


class Ring:
    def __init__(self, batch: int, capacity: int, hidden: int, device, dtype, hiddens=None, mirror=None):
        """hiddens: a [batch, capacity+1, hidden] buffer to use (a step graph reads it by address);
        mirror: a [batch, capacity+1] int64 buffer for the labels' device copy (run-ahead)."""
        self.capacity = capacity
        self.hiddens = torch.zeros(batch, capacity + 1, hidden, device=device, dtype=dtype) if hiddens is None \
            else hiddens   # + the dump slot
        self.labels = np.full((batch, capacity), -1, dtype=np.int64)
        self.mirror = mirror

    def load_mirror(self) -> None:
        """The device copy of the labels := the host's (the dump slot's label is never read)."""
        self.mirror[:, :self.capacity].copy_(torch.as_tensor(self.labels, device=self.mirror.device))

    def live(self, seq, label):
        """Whether sequence seq's ring holds `label` (scalars or equal-shape arrays)."""
        label = np.asarray(label)
        return (label >= 0) & (self.labels[seq, label % self.capacity] == label)

    def index(self, seqs: np.ndarray, labels: np.ndarray) -> torch.Tensor:
        """[2, N] device index (sequence, ring slot) of labels: one host->device copy."""
        return torch.as_tensor(np.stack([seqs, labels % self.capacity]), device=self.hiddens.device)

    def write(self, seqs: np.ndarray, labels: np.ndarray, rows: torch.Tensor) -> torch.Tensor:
        """Write rows[i] under labels[i] of sequence seqs[i]; returns their device index."""
        self.labels[seqs, labels % self.capacity] = labels
        idx = self.index(seqs, labels)
        self.hiddens[idx[0], idx[1]] = rows.to(self.hiddens.dtype)
        return idx

    def write_masked(self, labels: torch.Tensor, take: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """Device: write rows[b, j] under labels[b, j] where take[b, j] (labels, take [B, A];
        rows [B, A, H]); the rest go to the dump slot. Returns the slots written [B, A] (the dump
        slot where not taken). The host books the labels after its read (`book`)."""
        B = rows.shape[0]
        slot = torch.where(take, labels.remainder(self.capacity), self.capacity)
        self.hiddens[torch.arange(B, device=rows.device)[:, None], slot] = rows.to(self.hiddens.dtype)
        if self.mirror is not None:
            self.mirror.scatter_(1, slot, labels)
        return slot

    def book(self, seqs: np.ndarray, labels: np.ndarray) -> None:
        """Host: record labels written on the device (host only: a run-ahead books while the
        device runs later steps, and a copy to the device would wait for them)."""
        self.labels[seqs, labels % self.capacity] = labels

    def book_written(self, ring_label: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Host: `book` a step's writes (ring_label [B, K+1], -1: none); returns where they are in
        ring_label (seq, j)."""
        seq, j = np.nonzero(ring_label >= 0)
        if len(seq):
            self.book(seq, ring_label[seq, j])
        return seq, j

    def read(self, seqs: np.ndarray, labels: np.ndarray) -> torch.Tensor:
        idx = self.index(seqs, labels)
        return self.hiddens[idx[0], idx[1]]

    def clear(self) -> None:
        self.labels.fill(-1)


def gap_keys(ring: Ring, row_space: str, last_key: np.ndarray, rows: np.ndarray, position: np.ndarray,
             active: np.ndarray):
    """Pair keys the catch-up feed writes before a propose at `position`, for
    every active sequence at once. Returns flat (seq, key), keys ascending.

    The propose itself writes key position-1, so the gap ends at position-2.
    compact: every missing key after the newest row whose label is live (rows
      need not be contiguous in key space there).
    dense: rows must append at slot == key, so the feed starts at key == rows
      and stops at the first label the ring does not hold.
    """
    end = position - 2
    if row_space == "compact":
        start = np.maximum(last_key + 1, end - ring.capacity + 1)   # the ring holds no more
    else:
        start = rows                                                # slot == key, no holes
    width = np.minimum(np.maximum(np.where(active, end - start + 1, 0), 0), ring.capacity)   # (.clip: 3x slower)
    W = int(width.max()) if len(width) else 0
    if W == 0:
        z = np.zeros(0, dtype=np.int64)
        return z, z
    keys = start[:, None] + np.arange(W)[None, :]
    inside = np.arange(W)[None, :] < width[:, None]
    live = inside & ring.live(np.arange(len(position))[:, None], np.where(inside, keys + 1, -1))   # [B, 1] broadcasts
    if row_space == "dense":
        live = np.cumprod(live, axis=1).astype(bool)       # contiguous from the start
    s_idx, j = np.nonzero(live)
    return s_idx.astype(np.int64), keys[s_idx, j]


def gap_keys_on_device(mirror: torch.Tensor, capacity: int, row_space: str, last_key, rows, position, active):
    """Device: `gap_keys` as a grid over the ring's capacity R, from its labels' device copy
    (mirror [B, R+1]); last_key, rows, position, active [B]. Returns keys [B, R] (ascending per
    sequence) and live [B, R] bool, the keys the catch-up feeds."""
    end = position - 2
    start = torch.maximum(last_key + 1, end - capacity + 1) if row_space == "compact" else rows
    width = torch.where(active, end - start + 1, 0).clamp(0, capacity)                 # [B]
    j = torch.arange(capacity, device=rows.device)[None, :]                              # [1, R]
    keys = start[:, None] + j                                                            # [B, R]
    label = keys + 1                                                                     # pair key k reads label k+1
    live = (j < width[:, None]) & (label >= 0) & (mirror.gather(1, label.remainder(capacity)) == label)
    if row_space == "dense":
        live = live.long().cumprod(dim=1).bool()          # contiguous from the start
    return keys, live
