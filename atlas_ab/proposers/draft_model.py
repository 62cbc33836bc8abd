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

from atlas_ab.proposers.base import DraftChain, RowFeed, RowsWritten, drawn, head_outputs
from atlas_ab.runtime.batch import ragged_window
from atlas_ab.runtime.graphs import Steps

_SLACK = 10


class DraftModelProposer:
    kind = "draft_model"
    slot_is_key = False       # it has no pair-keyed rows: its KV is the committed tokens'

    def __init__(self, draft_trunk, graphs: bool = False):
        self.model = draft_trunk
        self.steps = Steps(graphs)    # static-shape single draft steps (CUDA graphs on the GPU)

    def alloc(self, budgets: np.ndarray) -> None:
        caps = np.asarray(budgets, dtype=np.int64) + _SLACK
        self.kv = self.model.new_kv(caps.tolist())
        B = len(caps)
        self.seen = np.zeros(B, dtype=np.int64)       # positions the draft LM has processed
        self.base = np.zeros(B, dtype=np.int64)       # propose position of the last propose
        self.last_drafted = np.zeros(B, dtype=np.int64)
        self.steps.clear()

    def free(self) -> None:
        self.kv = None
        self.steps.clear()

    def _head(self, h, topk, logits: bool = False):
        z = self.model.logits(h[:, None])[:, 0]
        return head_outputs(z, topk) + ((z,) if logits else ())

    def _next_fn(self, topk, logits: bool = False):
        """One draft token in, its hidden and the head's outputs (the next draft) out; with
        `logits` (a sampled draft) the head's logits too."""
        def fn(draft, pos, slots, length):
            h = self.model.forward(draft[:, None], pos[:, None], slots[:, None], self.kv, length=length)[:, 0]
            return (h, *self._head(h, topk, logits))
        return fn

    def drafter_rows(self) -> np.ndarray:
        return self.seen.copy()

    def last_pair_key(self) -> np.ndarray:
        return self.seen - 1

    def prefill_drafter(self, feed: RowFeed) -> RowsWritten:
        return RowsWritten.empty()     # it reads tokens, and catches up on them in propose

    catchup_drafter = prefill_drafter

    @torch.no_grad()
    def propose(self, history, last_tokens, target_hidden, positions, num_drafts, active, topk=0, draws=None):
        B = len(self.seen)
        dev = last_tokens.device
        act = np.nonzero(active)[0]
        # Catch up on committed tokens [seen, n] (n = the last committed token).
        count = np.where(active, positions + 1 - self.seen, 0)
        tok, pos, slots, length = ragged_window(history, self.seen, count)
        out = self.model.forward(torch.as_tensor(tok, device=dev), torch.as_tensor(pos, device=dev),
                                 torch.as_tensor(slots, device=dev), self.kv, length=length)
        last = torch.as_tensor(np.maximum(count - 1, 0), device=dev)
        h = out[torch.arange(B, device=dev), last]
        chain = DraftChain(topk)
        sampled = draws is not None
        conf, draft, ids, p, *z = self._head(h, topk, sampled)
        # later drafts' positions and slots, in one host->device copy
        p_all = positions[:, None] + 1 + np.arange(max(num_drafts - 1, 1))[None, :]
        idx = torch.as_tensor(np.stack([p_all, np.where(active[:, None], p_all, -1)]), device=dev)
        for i in range(num_drafts):
            draft, q = drawn(draws, i, z[0] if z else None, draft)
            chain.add(draft, conf, ids, p, q)
            if i + 1 < num_drafts:
                _, conf, draft, ids, p, *z = self.steps(("next", topk, sampled), self._next_fn(topk, sampled),
                                                        [draft, idx[0, :, i], idx[1, :, i]], int(p_all.max()) + 1,
                                                        self.kv.max_capacity)
        self.seen[act] = positions[act] + num_drafts       # t_n, d1 .. d_{K-1} processed
        self.base[act] = positions[act]
        self.last_drafted[act] = num_drafts
        return chain.proposal(np.where(active, self.base, -1))

    def after_verify(self, num_accepted: np.ndarray, active: np.ndarray) -> None:
        # Processed positions n .. n+K-1 stay valid up to the last accepted one.
        act = np.nonzero(active)[0]
        keep = np.minimum(self.last_drafted[act], num_accepted[act] + 1)
        self.seen[act] = self.base[act] + keep
