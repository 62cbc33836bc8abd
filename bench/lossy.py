"""Known lossy bugs, injected into greedy verification from the outside, to measure the gate's power.

A bug rewrites what `GreedyVerify.verify` returns (a `Verified`: the target's token per depth
`tokens` [B, K+1] and the accepted count `accepted` [B]); the loop commits tokens[:accepted + 1], so
rewriting the two is a loop that commits the wrong text, with the drafter and KV bookkeeping that
follow from it. The loop's own code is untouched (`Lossy.installed` patches the class for a `with`).
A row is hit only where the bug reaches the committed text (the turn still needs the token), so every
hit is a wrong committed token. Bugs, at a step where the draft at depth a (0-based) was rejected:

  wrong_accept    with probability `rate`: the verifier calls draft a right (accepted a+1, the draft
                  committed at depth a, the target's token after it as the bonus)
  draft_for_bonus once per sequence, at its first rejection from a seeded step in [0, first_steps):
                  the draft is committed instead of the target's token (accepted unchanged)
  off_by_one      with probability `rate`: accepted a+1, the tokens unchanged: the bonus is the
                  target's token after the rejected draft, which the committed text does not hold

Each run (a group of `rows_per_run` rows) draws from its own seeded generator, so a run's hits
depend on its seed and its own rows only.
"""
from __future__ import annotations

import contextlib

import numpy as np
import torch

from atlas_ab.speculative.verify import GreedyVerify

BUGS = ("wrong_accept", "draft_for_bonus", "off_by_one")


class Lossy:
    """One bug over a wave of `docs` (rows in order), runs of `rows_per_run` rows, seeds seed0 + run."""

    def __init__(self, bug: str, rate: float, docs, gen_tokens: int, rows_per_run: int, seed0: int = 0,
                 first_steps: int = 64):
        if bug not in BUGS:
            raise ValueError(f"unknown bug {bug!r} (one of {', '.join(BUGS)})")
        self.bug, self.rate, self.G, self.per_run = bug, rate, gen_tokens, rows_per_run
        runs = -(-len(docs) // rows_per_run)
        self.rngs = [np.random.default_rng([seed0 + r, 37]) for r in range(runs)]
        # the history index of each turn's first generated token, per row: [B, turns]
        lens = np.array([[len(c) for c in d.chunks] for d in docs])
        self.gen_start = np.cumsum(lens, axis=1) + gen_tokens * np.arange(lens.shape[1])[None, :]
        self.step = 0
        # draft_for_bonus: the step from which each row takes its one hit (its next rejection)
        self.at = np.concatenate([g.integers(0, first_steps, rows_per_run) for g in self.rngs])[:len(docs)]
        self.done = np.zeros(len(docs), dtype=bool)
        self.hits: list[tuple[int, int, int]] = []     # (row, history index, token committed there)

    def _draws(self, B: int) -> np.ndarray:
        return np.concatenate([g.random(self.per_run) for g in self.rngs])[:B]          # [B]

    def apply(self, v, drafts: torch.Tensor, pos: torch.Tensor, gated: torch.Tensor, turn: int):
        K = drafts.shape[1]
        acc = v.accepted.cpu().numpy().copy()                                             # [B]
        tok = v.tokens.cpu().numpy().copy()                                               # [B, K+1]
        d = drafts.cpu().numpy()                                                          # [B, K]
        n = pos[:, 0].cpu().numpy()                                                       # [B] last committed index
        B = len(acc)
        left = self.gen_start[:B, turn] + self.G - 1 - n        # [B] tokens the turn still needs
        u = self._draws(B)
        rejected = (acc < K) & ~gated.cpu().numpy()
        if self.bug == "draft_for_bonus":
            hit = rejected & (acc < left) & ~self.done & (self.step >= self.at)
            self.done |= hit
        elif self.bug == "wrong_accept":
            hit = rejected & (acc < left) & (u < self.rate)
        else:
            hit = rejected & (acc + 1 < left) & (u < self.rate)
        self.step += 1
        rows = np.nonzero(hit)[0]
        if not len(rows):
            return v
        a = acc[rows]
        if self.bug in ("wrong_accept", "draft_for_bonus"):
            tok[rows, a] = d[rows, a]
            self.hits += [(int(r), int(n[r] + 1 + j), int(d[r, j])) for r, j in zip(rows, a)]
        else:
            self.hits += [(int(r), int(n[r] + 2 + j), int(tok[r, j + 1])) for r, j in zip(rows, a)]
        if self.bug != "draft_for_bonus":
            acc[rows] += 1
        v.tokens = torch.as_tensor(tok, device=v.tokens.device)
        v.accepted = torch.as_tensor(acc, device=v.accepted.device)
        return v

    @contextlib.contextmanager
    def installed(self):
        """GreedyVerify.verify with this bug, for the `with` block."""
        orig = GreedyVerify.verify

        def verify(vself, target, prop, vtok, pos, slots, length, gated, all_gated, turn):
            return self.apply(orig(vself, target, prop, vtok, pos, slots, length, gated, all_gated, turn),
                              prop.drafts, pos, gated, turn)
        GreedyVerify.verify = verify
        try:
            yield self
        finally:
            GreedyVerify.verify = orig

    def landed(self, docs, generated) -> list[int]:
        """Per row, the hits whose token is in the committed text where it was put."""
        out = [0] * len(docs)
        for r, i, t in self.hits:
            hist = np.concatenate([np.concatenate([np.asarray(c), np.asarray(g)])
                                   for c, g in zip(docs[r].chunks, generated[r])])
            out[r] += int(i < len(hist) and hist[i] == t)
        return out
