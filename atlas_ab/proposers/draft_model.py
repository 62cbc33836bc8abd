"""Classic speculative decoding: a small separate LM of the same family drafts.

Its context is the committed tokens themselves, so it has nothing to prefill
from target hiddens and no ring: before each propose it processes whatever
committed tokens it has not seen (a whole new chunk on a turn's first step,
else 0 or 1 tokens), then drafts K tokens autoregressively. Behind the same
protocol as the MTP head, with no change to the loop.
"""
from __future__ import annotations

import numpy as np
import torch

from atlas_ab.proposers.base import DraftChain, DraftProposer, Proposal, RowFeed, RowsWritten, drawn, head_outputs
from atlas_ab.runtime.batch import ragged_window
from atlas_ab.runtime.graphs import bucket

_SLACK = 10


class DraftModelProposer(DraftProposer):
    """The core protocol only: none of proposers/capabilities.py (the config refuses CATCHUP, ORACLE_P2
    and TREE for it; a wave steps with the host's plans)."""
    kind = "draft_model"
    per_depth = ("n_pos", "n_slot")   # plan arrays read a depth's column at a time (the loop lays them out so)
    slot_is_key = False       # it has no pair-keyed rows: its KV is the committed tokens'

    def __init__(self, draft_trunk):
        self.model = draft_trunk

    def alloc(self, budgets: np.ndarray) -> None:
        caps = np.asarray(budgets, dtype=np.int64) + _SLACK
        if self.kv is None or self.kv.capacities != caps.tolist():
            self.kv = self.model.new_kv(caps.tolist())   # else the last wave's: a step graph reads it by address
        B = len(caps)
        self.seen = np.zeros(B, dtype=np.int64)       # positions the draft LM has processed
        self.base = np.zeros(B, dtype=np.int64)       # propose position of the last propose
        self.last_drafted = np.zeros(B, dtype=np.int64)

    def free(self) -> None:
        """Kept: the next wave of the same shape reuses the KV pool (and the step graphs that read it)."""

    def _head(self, h, topk, logits: bool = False):
        z = self.model.logits(h[:, None], fp32=logits)[:, 0]          # sampled: fp32 for q
        return head_outputs(z, topk) + ((z,) if logits else ())

    def drafter_rows(self) -> np.ndarray:
        return self.seen.copy()

    def last_pair_key(self) -> np.ndarray:
        return self.seen - 1

    def prefill_drafter(self, feed: RowFeed) -> RowsWritten:
        return RowsWritten.empty()     # it reads tokens, and catches up on them in propose

    def plan_propose(self, history, positions, num_drafts, active, static: bool = False) -> tuple[dict, dict]:
        """Host: the committed tokens [seen, n] it has not processed (a padded [B, T] window;
        `static`: T a power of two) and the later drafts' positions and slots; books the propose."""
        count = np.where(active, positions + 1 - self.seen, 0)
        tok, pos, slots, length = ragged_window(history, self.seen, count, bucket(count.max()) if static else None)
        p_all = positions[:, None] + 1 + np.arange(max(num_drafts - 1, 1))[None, :]
        plan = {"w_tok": tok, "w_pos": pos, "w_slot": slots, "w_last": np.maximum(count - 1, 0),
                "n_pos": p_all, "n_slot": np.where(active[:, None], p_all, -1)}
        act = np.nonzero(active)[0]
        self.seen[act] = positions[act] + num_drafts       # t_n, d1 .. d_{K-1} processed
        self.base[act] = positions[act]
        self.last_drafted[act] = num_drafts
        return plan, {"window": length, "next": int(p_all.max()) + 1}

    def full_lengths(self) -> dict:
        return {"window": self.kv.max_capacity, "next": self.kv.max_capacity}

    def draft(self, plan: dict, last_tokens, target_hidden, num_drafts: int, topk: int = 0, draws=None,
              lengths: dict | None = None) -> Proposal:
        """Device: process the window, then draft K tokens autoregressively."""
        B = last_tokens.shape[0]
        out = self.model.forward(plan["w_tok"], plan["w_pos"], plan["w_slot"], self.kv, length=lengths["window"])
        h = out[torch.arange(B, device=out.device), plan["w_last"]]
        chain = DraftChain(topk)
        sampled = draws is not None
        conf, draft, ids, p, *z = self._head(h, topk, sampled)
        for i in range(num_drafts):
            draft, q = drawn(draws, i, z[0] if z else None, draft)
            chain.add(draft, conf, ids, p, q)
            if i + 1 < num_drafts:
                h = self.model.forward(draft[:, None], plan["n_pos"][:, i, None], plan["n_slot"][:, i, None], self.kv,
                                       length=lengths["next"])[:, 0]
                conf, draft, ids, p, *z = self._head(h, topk, sampled)
        return chain.proposal()


    def after_verify(self, num_accepted: np.ndarray, active: np.ndarray) -> None:
        # Processed positions n .. n+K-1 stay valid up to the last accepted one.
        act = np.nonzero(active)[0]
        keep = np.minimum(self.last_drafted[act], num_accepted[act] + 1)
        self.seen[act] = self.base[act] + keep
