"""The one device-to-host read of a step, with a named layout.

`read_step` packs every number the host needs from a step into one int64 tensor on the device
(float32 values ride along as their bit patterns), copies it once, and unpacks it into a
`StepRead` by the field names and shapes it packed. A field left None is not read.

Shapes: B sequences, K drafts, k SHADOW_TOPK candidates.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional

import numpy as np
import torch


@dataclass
class StepRead:
    acc: np.ndarray                           # [B] int64: accepted drafts
    gated: np.ndarray                         # [B] bool: DRAFT_CONF dropped the drafts
    drafts: np.ndarray                        # [B, K] int64
    target: np.ndarray                        # [B, K+1] int64: the target's token per depth
    conf: np.ndarray                          # [B, K] float32: the drafter's top-1 prob per depth
    oracle: Optional[np.ndarray] = None       # [B] int64: ORACLE_P2 hit 1 / miss 0 / not probed -1
    topk_ids: Optional[np.ndarray] = None     # [B, K, k] int64 (SHADOW_TOPK)
    topk_probs: Optional[np.ndarray] = None   # [B, K, k] float32
    accept_prob: Optional[np.ndarray] = None  # [B, K] float32 (sampled runs)
    alpha1: Optional[np.ndarray] = None       # [B] float32 (sampled runs)
    pit: Optional[np.ndarray] = None          # [B, K+1] float32 (sampled runs)


_FLOAT = {"conf", "topk_probs", "accept_prob", "alpha1", "pit"}
_BOOL = {"gated"}


def read_step(**values: Optional[torch.Tensor]) -> StepRead:
    """One host read of the named device tensors (each [B, ...]); see StepRead for the names."""
    names = [f.name for f in fields(StepRead) if values.get(f.name) is not None]
    cols, shapes = [], []
    for name in names:
        x = values[name]
        shapes.append(tuple(x.shape[1:]))
        x = x.reshape(x.shape[0], -1)
        cols.append(x.float().view(torch.int32).long() if name in _FLOAT else x.long())
    host = torch.cat(cols, dim=1).cpu().numpy()
    out, at = {}, 0
    for name, shape in zip(names, shapes):
        w = int(np.prod(shape, dtype=np.int64))
        col = host[:, at:at + w]
        at += w
        if name in _FLOAT:
            col = col.astype(np.int32).view(np.float32)
        elif name in _BOOL:
            col = col.astype(bool)
        out[name] = col.reshape((len(host),) + shape)
    return StepRead(**out)
