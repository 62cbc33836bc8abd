"""The MTP-head drafter: one DeepSeek-V3 MTP module run autoregressively.

Draft 1 consumes the target's verified hidden; every later draft consumes the
drafter's own block output (the hidden handoff, where the reference engine
found the p1 -> p2 cliff). The drafter keeps its own KV rows; their layout follows one
of the two row spaces in `rowspace.py`.

Which hidden exactly is a property of the checkpoint (runtime/layouts.py) and
a lever (HANDOFF_NORM / RECYCLE_NORM), acting in one place each: `_handoff`
(every target hidden the drafter consumes: draft 1, context and catch-up rows,
ORACLE_P2's true hidden: the trunk's, pre or post its final norm) and
`_recycle` (drafts 2+: the MTP layer's output, pre or post its own final norm).
The loop, the ring and the fingerprints always carry the trunk's PRE-norm
hidden; the norm is applied on the way in.
"""
from __future__ import annotations

import numpy as np
import torch

from atlas_ab.proposers.base import DraftChain, RowFeed, RowsWritten, drawn, head_outputs
from atlas_ab.proposers.layout import pad_layout
from atlas_ab.proposers.rowspace import rope_of, rows_to_trim
from atlas_ab.runtime.graphs import Steps

# A propose can write up to K rows past the sequence's own positions.
_SLACK = 10


class MTPProposer:
    kind = "mtp"

    def __init__(self, trunk, mtp, row_space: str, refeed: bool, graphs: bool = False,
                 handoff_norm: str = "pre", recycle_norm: str = "pre"):
        if mtp is None:
            raise ValueError("the checkpoint has no MTP module (num_nextn_predict_layers = 0)")
        for name, v in (("handoff_norm", handoff_norm), ("recycle_norm", recycle_norm)):
            if v not in ("pre", "post"):
                raise ValueError(f"{name}={v!r} must be 'pre' or 'post' (resolve 'checkpoint' first)")
        self.trunk, self.mtp = trunk, mtp
        self.row_space, self.refeed = row_space, refeed
        self.handoff_norm, self.recycle_norm = handoff_norm, recycle_norm
        self.slot_is_key = row_space == "dense"
        self.zero_at = int(rope_of(row_space, 0, 0))   # RoPE position of pair key 0 (zero_first_embed layouts)
        self.embed = trunk.embed_tokens
        self.lm_head = trunk.lm_head
        self.steps = Steps(graphs)    # static-shape draft steps (CUDA graphs on the GPU)

    # -- state -------------------------------------------------------------
    def alloc(self, budgets: np.ndarray) -> None:
        caps = np.asarray(budgets, dtype=np.int64) + _SLACK
        self.kv = self.mtp.new_kv(caps.tolist())
        B = len(caps)
        self.rows = np.zeros(B, dtype=np.int64)
        self.row_key = np.full((B, int(caps.max())), -1, dtype=np.int64)
        self.row_target = np.zeros((B, int(caps.max())), dtype=bool)  # row carries a target hidden
        self.last_drafted = np.zeros(B, dtype=np.int64)
        self.steps.clear()

    def free(self) -> None:
        self.kv = None
        self.steps.clear()

    def drafter_rows(self) -> np.ndarray:
        return self.rows.copy()

    def last_pair_key(self) -> np.ndarray:
        # The true key of the newest row, read from the bookkeeping. (The reference
        # engine derives it as `key - trim`, which over-states it when a trim removes a
        # whole propose that followed an unfilled gap.)
        B = len(self.rows)
        return np.where(self.rows > 0, self.row_key[np.arange(B), np.maximum(self.rows - 1, 0)], -1)

    # -- the handoff: HANDOFF_NORM and RECYCLE_NORM act here and only here --
    def _handoff(self, target_hidden: torch.Tensor) -> torch.Tensor:
        """A target hidden (the trunk's PRE-norm stream) as this drafter is handed it."""
        return self.trunk.model.norm(target_hidden) if self.handoff_norm == "post" else target_hidden

    def _recycle(self, out: torch.Tensor) -> torch.Tensor:
        """The MTP layer's output (pre its final norm) as the next draft is handed it."""
        return self.mtp.shared_head.norm(out) if self.recycle_norm == "post" else out

    def _forward(self, tok, hid, slots: np.ndarray, ropes: np.ndarray):
        """Target-hidden rows (context, catch-up, ORACLE_P2): `hid` is the trunk's pre-norm hidden."""
        dev = hid.device
        return self.mtp.forward(tok, self._handoff(hid), torch.as_tensor(ropes, device=dev),
                                torch.as_tensor(slots, device=dev), self.kv, self.embed,
                                length=int(slots.max()) + 1, zero_at=self.zero_at)

    # -- context rows: prompt prefill and catch-up feed share one path -----
    def _write_rows(self, feed: RowFeed) -> RowsWritten:
        if len(feed) == 0:
            return RowsWritten.empty()
        B = len(self.rows)
        order, s, j, T = pad_layout(feed.seq, B)
        slots = self.rows[s] + j
        keys = feed.key[order]
        ropes = rope_of(self.row_space, keys, slots)
        dev = feed.hiddens.device
        tok = torch.zeros(B, T, dtype=torch.long, device=dev)
        hid = torch.zeros(B, T, feed.hiddens.shape[-1], dtype=feed.hiddens.dtype, device=dev)
        slot_bt = np.full((B, T), -1, dtype=np.int64)
        rope_bt = np.zeros((B, T), dtype=np.int64)
        s_t, j_t = torch.as_tensor(s, device=dev), torch.as_tensor(j, device=dev)
        tok[s_t, j_t] = torch.as_tensor(feed.token[order], device=dev)
        hidden_rows = feed.hiddens[torch.as_tensor(order, device=dev)]
        hid[s_t, j_t] = hidden_rows
        slot_bt[s, j], rope_bt[s, j] = slots, ropes
        self._forward(tok, hid, slot_bt, rope_bt)   # KV rows are the point; the output is unused
        np.add.at(self.rows, s, 1)
        self.row_key[s, slots] = keys
        self.row_target[s, slots] = True
        return RowsWritten(s, keys, slots, ropes, feed.label[order], hidden_rows)

    prefill_drafter = _write_rows
    catchup_drafter = _write_rows

    # -- propose -----------------------------------------------------------
    def _draft_fn(self, topk: int, first: bool, logits: bool = False):
        """One draft step; `first`: its hidden is the target's (handed through `_handoff`), else
        the previous step's recycled output. Returns the hidden for the next draft, the head's
        outputs and (`logits`: a sampled draft) the head's logits."""
        def step(tok, hid, pos, slots, length):
            if first:
                hid = self._handoff(hid)
            out = self.mtp.forward(tok[:, None], hid[:, None], pos[:, None], slots[:, None], self.kv,
                                   self.embed, length=length, zero_at=self.zero_at)
            z = self.mtp.logits(out, self.lm_head)[:, 0]
            return (self._recycle(out[:, 0]), *head_outputs(z, topk)) + ((z,) if logits else ())
        return step

    @torch.no_grad()
    def propose(self, history, last_tokens, target_hidden, positions, num_drafts, active, topk=0, draws=None):
        base = self.rows.copy()
        act = np.nonzero(active)[0]
        tok, hid = last_tokens, target_hidden
        chain = DraftChain(topk)
        # every draft's RoPE positions and KV slots, in one host->device copy
        i = np.arange(num_drafts)[None, :]
        keys = positions[:, None] - 1 + i
        slots = np.where(active[:, None], base[:, None] + i, -1)
        idx = torch.as_tensor(np.stack([rope_of(self.row_space, keys, base[:, None] + i), slots]), device=hid.device)
        length = int(slots.max()) + 1
        for i in range(num_drafts):
            first = i == 0 and self.handoff_norm == "post"    # (pre: the same step as later drafts)
            sampled = draws is not None
            out, conf, draft, ids, p, *z = self.steps(("draft", topk, first, sampled),
                                                      self._draft_fn(topk, first, sampled),
                                                      [tok, hid, idx[0, :, i], idx[1, :, i]], length,
                                                      self.kv.max_capacity)
            draft, q = drawn(draws, i, z[0] if z else None, draft)
            chain.add(draft, conf, ids, p, q)
            tok, hid = draft, out   # the recycled hidden: the drafter's own feeds draft i+2
            self.row_key[act, base[act] + i] = keys[act, i]
            self.row_target[act, base[act] + i] = i == 0
        self.rows[act] += num_drafts
        self.last_drafted[act] = num_drafts
        return chain.proposal(np.where(active, base, -1))

    @torch.no_grad()
    def oracle_draft2(self, draft1, true_hidden, positions, row0_slot, active) -> torch.Tensor:
        """ORACLE_P2: draft 2 as it would be from the target's true hidden of
        position n (teacher-forced), written over draft 2's own row and put back,
        so the drafter's state is untouched (observational only)."""
        slots = np.where(active, row0_slot + 1, -1)
        slot_t = torch.as_tensor(slots, device=true_hidden.device)
        snap = self.kv.snapshot(slot_t)
        out = self._forward(draft1[:, None], true_hidden[:, None], slots[:, None],
                            rope_of(self.row_space, positions, row0_slot + 1)[:, None])
        self.kv.restore(snap)
        return self.mtp.logits(out, self.lm_head)[:, 0].argmax(dim=-1)

    # -- after verify ------------------------------------------------------
    def after_verify(self, num_accepted: np.ndarray, active: np.ndarray) -> None:
        act = np.nonzero(active & (self.last_drafted > 0))[0]
        if len(act) == 0:
            return
        K = int(self.last_drafted[act].max())
        # the row-space rule, tabulated for this propose's K
        table = np.array([rows_to_trim(self.row_space, K, a, self.refeed) for a in range(K + 1)])
        trim = table[num_accepted[act]]
        self.rows[act] -= trim
        b, j = np.nonzero(np.arange(K)[None, :] < trim[:, None])
        self.row_key[act[b], self.rows[act[b]] + j] = -1      # trimmed rows are forgotten
        self.row_target[act[b], self.rows[act[b]] + j] = False
        self.last_drafted[act] = 0
