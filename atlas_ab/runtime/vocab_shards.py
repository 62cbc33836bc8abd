"""A head's top-1 over vocabulary shards: each shard's (max, first argmax, sum of exp), then one reduce.

The reference engine splits its drafter's `lm_head` by vocabulary across ranks (each rank the logits
of its contiguous rows, over the full hidden: no partial sums to reassociate) and exchanges
(max, argmax); `>=` there makes the LOWER rank win a tie. Here the S shards run on one device and the
reduce is the same rule, so the drafted index is z.argmax(-1)'s exactly, ties included: within a
shard torch's argmax takes the first index of the max, across shards the first shard holding the
global max wins, and shards are in vocabulary order.

The top-1 probability (the conf column) needs the global log-sum-exp, so each shard also gives
t_s = sum_j exp(z_j - m_s) and the reduce forms sum_s exp(m_s - M) t_s (M the global max):
softmax's value at the max, 1 / that sum. It equals the unsharded softmax max up to fp32 rounding of
the sum's order (within 2e-6 relative in tests/runtime/test_vocab_shards.py).
"""
from __future__ import annotations

import torch


def shard_bounds(vocab: int, shards: int) -> list[tuple[int, int]]:
    """[(v0, v1)] of `shards` equal contiguous slices of the vocabulary (shards must divide it,
    as the engine shards only a vocabulary its ranks divide)."""
    if shards < 1 or vocab % shards:
        raise ValueError(f"{shards} vocabulary shards do not divide a vocabulary of {vocab}")
    n = vocab // shards
    return [(s * n, (s + 1) * n) for s in range(shards)]


def shard_top1(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One shard's logits z [R, n] -> (max m [R] fp32, first argmax a [R] int64, t [R] = sum exp(z - m))."""
    z = z.float()
    m, a = z.max(dim=-1).values, z.argmax(dim=-1)
    return m, a, torch.exp(z - m[:, None]).sum(dim=-1)


def reduce_top1(parts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], starts: list[int]
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Shards' (m, a, t) in vocabulary order, shard s starting at starts[s] -> (p [R] fp32, index [R] int64):
    the global first argmax (the lowest shard wins a tie) and its softmax probability."""
    m = torch.stack([p[0] for p in parts], dim=-1)                                  # [R, S]
    a = torch.stack([p[1] + v0 for p, v0 in zip(parts, starts)], dim=-1)           # [R, S] global indices
    t = torch.stack([p[2] for p in parts], dim=-1)
    win = m.argmax(dim=-1, keepdim=True)                                            # first shard of the max
    top = m.gather(-1, win)
    total = (torch.exp(m - top) * t).sum(dim=-1)
    return 1.0 / total, a.gather(-1, win)[:, 0]


def sharded_top1(z_of, bounds: list[tuple[int, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """(p, index) of the logits that `z_of(v0, v1)` makes shard by shard ([R, v1 - v0] each)."""
    return reduce_top1([shard_top1(z_of(v0, v1)) for v0, v1 in bounds], [v0 for v0, _ in bounds])
