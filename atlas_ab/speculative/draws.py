"""How a sampling drafter picks its drafts: from q (live), or from q coupled to a stored trajectory (replay).

The proposers call `q(logits)` and `draw(i, q)` at each depth i (0-based: draft i+1) and feed the
drawn token to the next depth, so the drafter's state follows its own drafts in both modes.

`LiveDraws`: x_i ~ q_i, one uniform per (document, turn, position, depth) (uniforms.DRAFT).

`CoupledDraws` (replay): the maximal coupling of q_i and the target's p_i given the stored
trajectory's token y_i. While every earlier draft equalled the trajectory,
  x_i = y_i                                with probability min(p_i(y_i), q_i(y_i)) / p_i(y_i)
  x_i ~ max(0, q_i - p_i), normalised      otherwise (never y_i: that residual is 0 there)
and the verifier accepts exactly when x_i = y_i. Off the trajectory (after the first x_j != y_j)
the target's distribution is not stored, and nothing downstream depends on those drafts, so they
are drawn from q_i alone, as live does. docs/sampling.md proves that the joint law of drafts,
acceptances and output is live speculative sampling's. The coupling's uniforms (COUPLE,
COUPLE_DRAW) are keyed like live's, so two arms replaying one trajectory share them wherever
their steps align (common random numbers).

Shapes: B sequences, K drafts, V vocabulary.
"""
from __future__ import annotations

import torch

from atlas_ab.speculative import uniforms
from atlas_ab.speculative.distribution import Sampling, draw, probs


def step_keys(doc: torch.Tensor, n: torch.Tensor, K: int):
    """(doc [B, 1], n [B, 1], depth [1, K]) key fields of a step's draft depths 1..K."""
    return doc[:, None], n[:, None], torch.arange(1, K + 1, device=doc.device)[None, :]


class LiveDraws:
    def __init__(self, rule: Sampling, seed: int, doc: torch.Tensor, turn: int, n: torch.Tensor, K: int):
        self.rule = rule
        d, p, k = step_keys(doc, n, K)
        self.u = uniforms.uniform(seed, d, turn, p, k, uniforms.DRAFT)          # [B, K]

    def q(self, logits: torch.Tensor) -> torch.Tensor:
        return probs(logits, self.rule)                                         # [B, V]

    def draw(self, i: int, q: torch.Tensor) -> torch.Tensor:
        return draw(q, self.u[:, i])                                            # [B]


class CoupledDraws(LiveDraws):
    def __init__(self, rule: Sampling, seed: int, doc: torch.Tensor, turn: int, n: torch.Tensor, K: int,
                 y: torch.Tensor, p: torch.Tensor):
        """y [B, K]: the trajectory's tokens at depths 1..K; p [B, K, V]: the target's distributions there."""
        super().__init__(rule, seed, doc, turn, n, K)
        d, pos, k = step_keys(doc, n, K)
        self.coin = uniforms.uniform(seed, d, turn, pos, k, uniforms.COUPLE)    # [B, K]
        self.u_res = uniforms.uniform(seed, d, turn, pos, k, uniforms.COUPLE_DRAW)  # [B, K]
        self.y, self.p = y, p
        self.on_path = torch.ones(y.shape[0], dtype=torch.bool, device=y.device)  # [B]

    def draw(self, i: int, q: torch.Tensor) -> torch.Tensor:
        y, p = self.y[:, i], self.p[:, i]                                       # [B], [B, V]
        py = p.gather(-1, y[:, None]).squeeze(-1)                               # [B]
        qy = q.gather(-1, y[:, None]).squeeze(-1)
        same = self.coin[:, i] * py < torch.minimum(py, qy)                     # P = min(p, q)(y) / p(y)
        res = (q - p).clamp(min=0)                                              # [B, V]
        res = torch.where(res.sum(-1, keepdim=True) > 0, res, q)                # q == p: `same` always holds
        coupled = torch.where(same, y, draw(res, self.u_res[:, i]))
        x = torch.where(self.on_path, coupled, super().draw(i, q))
        self.on_path = self.on_path & (x == y)
        return x
