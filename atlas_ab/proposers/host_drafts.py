"""A drafter whose drafts are made on the host (the weightless families: n-gram, suffix decoding).

Its drafts are a search over the committed tokens, which the host holds: `plan_propose` makes each
active row's 0..K drafts and puts them in the plan as int64 arrays (padded to K with PAD), and
`draft` on the device only hands them on, so a captured step graph runs it like any other. The
row's count goes with them (`Proposal.n_valid`): the verify accepts no more, and the row's `k` is it;
a row with none is a plain decode step for that row (k = 0), as vLLM schedules no draft tokens for a
request its proposer returns [] for. No KV, no rows, no capabilities.
"""
from __future__ import annotations

from abc import abstractmethod

import numpy as np
import torch

from atlas_ab.proposers.base import DraftProposer, Proposal, RowFeed, RowsWritten

#: the token a row's plan holds past its real drafts: the verify runs K+1 positions whatever the row's
#: K, so the pad must be a token id the target can embed; `n_valid` keeps it from ever being accepted
PAD = 0


class HostDraftProposer(DraftProposer):
    """The protocol for a family that drafts on the host: a subclass writes `row_drafts`."""
    slot_is_key = False      # no rows at all

    def alloc(self, budgets: np.ndarray) -> None:
        self.B = len(budgets)

    def free(self) -> None:
        """Nothing held."""

    def drafter_rows(self) -> np.ndarray:
        return np.zeros(self.B, dtype=np.int64)

    def last_pair_key(self) -> np.ndarray:
        return np.full(self.B, -1, dtype=np.int64)

    def prefill_drafter(self, feed: RowFeed) -> RowsWritten:
        return RowsWritten.empty()      # it reads the committed tokens at each propose

    @abstractmethod
    def row_drafts(self, b: int, context: np.ndarray, num_drafts: int) -> np.ndarray:
        """Row b's drafts (0 .. num_drafts token ids) after its context (committed tokens, newest last)."""

    def drafts_of(self, history: np.ndarray, positions: np.ndarray, num_drafts: int, active: np.ndarray) -> dict:
        """{row: its drafts} for the active rows, in row order (a family with state across rows overrides it)."""
        return {int(b): self.row_drafts(int(b), history[b, :positions[b] + 1], num_drafts)
                for b in np.nonzero(active)[0]}

    def plan_propose(self, history, positions, num_drafts, active, static: bool = False) -> tuple[dict, dict]:
        """Host: each active row's drafts after history[b, :positions[b] + 1], padded to K with PAD,
        and how many are real (0 for an inactive row), rows in order."""
        B = len(positions)
        drafts = np.full((B, num_drafts), PAD, dtype=np.int64)
        valid = np.zeros(B, dtype=np.int64)
        for b, d in self.drafts_of(history, positions, num_drafts, active).items():
            drafts[b, :len(d)] = d
            valid[b] = len(d)
        return {"lk_drafts": drafts, "lk_valid": valid}, {}

    def full_lengths(self) -> dict:
        return {}

    def draft(self, plan: dict, last_tokens, target_hidden, num_drafts: int, topk: int = 0, draws=None,
              lengths: dict | None = None) -> Proposal:
        """Device: the planned drafts as they are; conf 1 on a real draft, 0 on a pad (no probabilities)."""
        valid = plan["lk_valid"]
        real = torch.arange(num_drafts, device=valid.device)[None, :] < valid[:, None]
        return Proposal(drafts=plan["lk_drafts"], conf=real.float(), topk_ids=None, topk_probs=None, n_valid=valid)

    def after_verify(self, num_accepted: np.ndarray, active: np.ndarray) -> None:
        """Nothing to trim: the next propose reads the committed tokens afresh."""
