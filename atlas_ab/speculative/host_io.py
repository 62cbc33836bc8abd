"""The step's two host<->device copies, each one int64 tensor with a named layout.

A step is planned on the host (positions, KV slots, RoPE positions, the catch-up rows: named
int64 arrays [B, ...]), run on the device as one static-shape function (one CUDA graph on the
GPU), and committed on the host. `pack_plan` lays the plan's arrays side by side in one [B, X]
array, copied once; the device function takes views of it by name (`unpack_plan`). The device
function ends with `pack_read`: every number the host needs from the step in one int64 tensor
(float32 values ride along as their bit patterns), copied once and unpacked into a `StepRead`
(`unpack_read`). A layout is a tuple of (name, shape) pairs; it is part of a graph's key.

Shapes: B sequences, K drafts, k SHADOW_TOPK candidates.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, fields
from typing import Optional

import numpy as np
import torch

from atlas_ab.runtime.fusion import fused

Layout = tuple   # ((name, shape per sequence), ...)


@dataclass
class StepRead:
    acc: np.ndarray                           # [B] int64: accepted drafts
    gated: np.ndarray                         # [B] bool: DRAFT_CONF dropped the drafts
    drafts: np.ndarray                        # [B, K] int64
    target: np.ndarray                        # [B, K+1] int64: the target's token per depth
    conf: np.ndarray                          # [B, K] float32: the drafter's top-1 prob per depth
    committed: np.ndarray                     # [B] int64: tokens committed (0: inactive)
    ring_label: Optional[np.ndarray] = None   # [B, K+1] int64: ring label written from depth j (-1: none)
    oracle: Optional[np.ndarray] = None       # [B] int64: ORACLE_P2 hit 1 / miss 0 / not probed -1
    topk_ids: Optional[np.ndarray] = None     # [B, K, k] int64 (SHADOW_TOPK)
    topk_probs: Optional[np.ndarray] = None   # [B, K, k] float32
    accept_prob: Optional[np.ndarray] = None  # [B, K] float32 (sampled runs)
    alpha1: Optional[np.ndarray] = None       # [B] float32 (sampled runs)
    pit: Optional[np.ndarray] = None          # [B, K+1] float32 (sampled runs)
    fp: Optional[np.ndarray] = None           # [B, S] int64: FINGERPRINTS of the step's event rows, hashed in it
    tree_path: Optional[np.ndarray] = None    # [B, K+1] int64 (TREE): the accepted path's node ids by depth, -1 past it
    n_valid: Optional[np.ndarray] = None      # [B] int64: the row's real drafts (a family with a variable K)


_FIELDS = tuple(f.name for f in fields(StepRead))     # the read's order (a compiled `pack_read` reads it)
_FLOAT = {"conf", "topk_probs", "accept_prob", "alpha1", "pit"}
_BOOL = {"gated"}


def _width(shape) -> int:
    return math.prod(shape)      # not np.prod: ~12 us a call, 30 calls a step on the host's path


def _spans(layout: Layout) -> tuple:
    """Each name's (name, shape, first column, end column) in a packed [B, X] array of this layout
    (made once per layout: the walks below run on the host's path every step; a compiled region
    walks it as it traces, with nothing cached)."""
    return _walk(layout) if torch.compiler.is_compiling() else _walk_cached(layout)


def _walk(layout: Layout) -> tuple:
    out, at = [], 0
    for name, shape in layout:
        out.append((name, shape, at, at + _width(shape)))
        at += _width(shape)
    return tuple(out)


_walk_cached = functools.lru_cache(maxsize=256)(_walk)


def layout_width(layout: Layout) -> int:
    """Columns of a packed [B, X] array of this layout: X."""
    spans = _spans(layout)
    return spans[-1][3] if spans else 0


def layout_columns(layout: Layout, base: int = 0) -> dict[str, list[int]]:
    """Each name's columns in a packed [B, X] array of this layout (its first column at `base`)."""
    return {name: list(range(base + a, base + b)) for name, _, a, b in _spans(layout)}


def pack_plan(**arrays: np.ndarray) -> tuple[np.ndarray, Layout]:
    """Host: named int arrays [B, ...] -> one int64 array [B, X] and its layout."""
    arrays = {name: np.asarray(a, dtype=np.int64) for name, a in arrays.items()}
    B = len(next(iter(arrays.values())))
    layout = tuple((name, a.shape[1:]) for name, a in arrays.items())
    return np.concatenate([a.reshape(B, -1) for a in arrays.values()], axis=1), layout


def pack_on_device(**tensors: torch.Tensor) -> tuple[torch.Tensor, Layout]:
    """Device: `pack_plan` of tensors [B, ...] (the run-ahead's plan, made in the step itself)."""
    B = next(iter(tensors.values())).shape[0]
    layout = tuple((name, tuple(t.shape[1:])) for name, t in tensors.items())
    return torch.cat([t.long().reshape(B, -1) for t in tensors.values()], dim=1), layout


def first_difference(a: np.ndarray, b: np.ndarray, layout: Layout) -> Optional[tuple[str, int]]:
    """The first (name, sequence) where two packed plans [B, X] of one layout differ; None if equal."""
    if np.array_equal(a, b):
        return None
    for name, _, at, end in _spans(layout):
        rows = np.nonzero((a[:, at:end] != b[:, at:end]).any(axis=1))[0]
        if len(rows):
            return name, int(rows[0])
    return None


def unpack_plan(x: torch.Tensor, layout: Layout) -> dict[str, torch.Tensor]:
    """Device: views of the plan tensor [B, X] by name, each [B, ...] as packed (or of a stack of
    them [..., B, X]: each [..., B, ...])."""
    lead = tuple(x.shape[:-1])
    return {name: x[..., at:end].reshape(lead + tuple(shape)) for name, shape, at, end in _spans(layout)}


@fused
def pack_read(**values: Optional[torch.Tensor]) -> tuple[torch.Tensor, Layout]:
    """Device: the named tensors (each [B, ...]; see StepRead) -> one int64 tensor [B, X]
    (`fuse=True`: compiled, runtime/fusion.py)."""
    names = [name for name in _FIELDS if values.get(name) is not None]
    cols, layout = [], []
    for name in names:
        x = values[name]
        layout.append((name, tuple(x.shape[1:])))
        x = x.reshape(x.shape[0], -1)
        cols.append(x.float().view(torch.int32).long() if name in _FLOAT else x.long())
    return torch.cat(cols, dim=1), tuple(layout)


def unpack_read(host: np.ndarray, layout: Layout) -> StepRead:
    """Host: the read step tensor [B, X] -> a StepRead."""
    out = {}
    for name, shape, at, end in _spans(layout):
        col = host[:, at:end]
        if name in _FLOAT:
            col = col.astype(np.int32).view(np.float32)
        elif name in _BOOL:
            col = col.astype(bool)
        out[name] = col.reshape((len(host),) + shape)
    return StepRead(**out)

