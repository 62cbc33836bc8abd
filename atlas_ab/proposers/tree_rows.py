"""Where a tree's accepted path's KV rows are, and where a linear draft would have put them.

The device half of config/tree.py (whose vocabulary it uses): after a tree verify, the rows
of the accepted path (the target's: one per node; the drafter's: one per internal node) move
onto the slots a linear propose of the path's tokens writes, so everything after the step reads
the KV as if the path had been a linear draft (`KVPool.move_slots` moves them).

Shapes: B sequences, N draft nodes (node 0 the root), D the tree's depth.
"""
from __future__ import annotations

import torch


def path_slots(path: torch.Tensor, base: torch.Tensor, row_of: torch.Tensor):
    """The KV moves that leave the path's rows where a linear draft of its length would have put
    them. path [B, D+1] (greedy_walk), base [B] the slot of the propose's first row (-1: inactive),
    row_of [N+1] long each node's row within the propose (-1: no row). Returns src, dst [B, D+1]
    slots (-1: nothing to move): the path's depth-d node's row moves to base + d. The target's
    verify writes a row for every node (row_of = node id); the drafter only for internal nodes."""
    d = torch.arange(path.shape[1], device=path.device)[None, :]          # [1, D+1]
    row = torch.where(path >= 0, row_of[path.clamp(min=0)], -1)           # [B, D+1]
    live = (row >= 0) & (base[:, None] >= 0) & (row != d)                 # a row off its linear slot
    src = torch.where(live, base[:, None] + row, -1)
    dst = torch.where(live, base[:, None] + d, -1)
    return src, dst
