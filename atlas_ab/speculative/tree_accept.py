"""Greedy acceptance over a draft tree, and the accepted path as the linear draft it stands for.

A tree verify (config/tree.py for the vocabulary) gives the target's argmax at every node,
`target` [B, N+1] (at node i: the token the target puts after i's path). Node i >= 1 matches when
its token equals the target's argmax at its parent; it is accepted when it and every ancestor
match. The accepted path is the deepest accepted node's (ties, possible only when two siblings
carry one token: the lowest node id), and `accepted` is its depth, so a step commits the path's
drafts plus the target's argmax at its last node (the bonus), as a linear step commits a drafts
plus its bonus.

Everything after the walk reads the path as a linear draft of its length: `as_linear` gathers
the verify's per-node outputs along it into the [B, D+1] shapes a K-chain's verify returns (so
the commit, the ring writes and REFEED read them unchanged), and `proposers.tree_rows.path_slots` says
which KV slots hold the path's rows and where a linear draft would have put them
(`KVPool.move_slots` does the move, for the target's pool and the drafter's).

Shapes: B sequences, N draft nodes (node 0 the root), D the tree's depth, H hidden size.
"""
from __future__ import annotations

import functools

import torch


@functools.lru_cache(maxsize=32)
def tree_tensors(tree, device) -> dict:
    """The spec's arrays as device tensors: parent, depth, rank0_child, node (0..N) [N+1] long,
    ancestors [N+1, N+1] bool. Made once per (tree, device): a run's later waves replay the step
    graphs its first wave captured, which read these by address."""
    return {"node": torch.arange(tree.n_nodes + 1, device=device),
            "parent": torch.as_tensor(tree.parent, device=device).clamp(min=0),
            "depth": torch.as_tensor(tree.depth, device=device),
            "rank0_child": torch.as_tensor(tree.rank0_child, device=device),
            "ancestors": torch.as_tensor(tree.ancestors, device=device)}


def linear_view(path: torch.Tensor, accepted: torch.Tensor, rank0_child: torch.Tensor) -> torch.Tensor:
    """The accepted path continued past its end by rank-0 children (the drafter's argmax: what a
    linear draft from the path's last node drafts next), -1 where the tree has none: [B, D+1] node
    ids. On a linear tree it is 0..D, the chain's depths, so a tree step's drafts, confidences
    and target tokens read along it are the chain's, rejected depths included."""
    out = path.clone()
    for d in range(1, path.shape[1]):
        prev = out[:, d - 1]
        nxt = torch.where(prev >= 0, rank0_child[prev.clamp(min=0)], -1)
        out[:, d] = torch.where(d <= accepted, path[:, d], nxt)
    return out


def greedy_walk(tokens: torch.Tensor, target: torch.Tensor, tt: dict, max_depth: int):
    """tokens [B, N+1] (node 0: t_n; the rest the drafts), target [B, N+1] the target's argmax per
    node, tt: `tree_tensors`. Returns accepted [B] long (the path's depth), path [B, D+1] long
    (the path's node ids by depth; -1 past its end) and best [B] long (its last node)."""
    parent, depth, anc = tt["parent"], tt["depth"], tt["ancestors"]
    N1 = tokens.shape[1]
    match = tokens == target[:, parent]                                   # [B, N+1]
    match[:, 0] = True                                                    # the root is committed
    ok = ~((~match)[:, None, :] & anc[None]).any(dim=-1)                  # [B, N+1]: every ancestor matched
    node = torch.arange(N1, device=tokens.device)
    score = torch.where(ok, depth * N1 + (N1 - 1 - node), -1)             # deepest, then lowest id
    best = score.argmax(dim=1)                                            # [B]
    accepted = depth[best]                                                # [B]
    on = anc[best]                                                        # [B, N+1] the path's nodes
    d = torch.arange(max_depth + 1, device=tokens.device)                 # [D+1]
    at = on[:, None, :] & (depth[None, None, :] == d[None, :, None])      # [B, D+1, N+1]
    path = torch.where(at.any(dim=-1), at.float().argmax(dim=-1), -1)     # [B, D+1]
    return accepted, path, best


def as_linear(path: torch.Tensor, x: torch.Tensor, fill=0) -> torch.Tensor:
    """x [B, N+1, ...] per node -> [B, D+1, ...] along the path (depth d: x at the path's depth-d
    node; `fill` past the path's end)."""
    idx = path.clamp(min=0)                                               # [B, D+1]
    g = x.gather(1, idx.view(*idx.shape, *([1] * (x.dim() - 2))).expand(*idx.shape, *x.shape[2:]))
    keep = (path >= 0).view(*path.shape, *([1] * (x.dim() - 2)))
    return torch.where(keep, g, fill)        # a Python fill: no host-to-device copy (a captured step)
