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

The head a draft is read from is `self.head` (draft_head.py: HEAD_FP8, HEAD_SHARDS); the drafter's
KV pool is `_new_kv`'s (KV_FP8). With those levers off both are exactly what they were before them.
"""
from __future__ import annotations

import numpy as np
import torch

from atlas_ab.proposers.base import DraftChain, DraftProposer, Proposal, RowFeed, RowsWritten, drawn
from atlas_ab.proposers.capabilities import CatchupFeed, DevicePlanner, NewRequest, OracleDraft
from atlas_ab.proposers.draft_head import DraftHead
from atlas_ab.proposers.layout import pad_layout
from atlas_ab.proposers.mtp_tree import MTPTree
from atlas_ab.proposers.rowspace import rope_of, trim_table
from atlas_ab.runtime.graphs import bucket
from atlas_ab.runtime.kv import KVPool
from atlas_ab.runtime.kv_fp8 import Fp8KVPool

# A propose can write up to K rows past the sequence's own positions.
_SLACK = 10


class MTPProposer(MTPTree, DraftProposer, CatchupFeed, OracleDraft, DevicePlanner, NewRequest):
    kind = "mtp"
    per_depth = ("d_rope", "d_slot")   # plan arrays read a depth's column at a time (the loop lays them out so)

    def __init__(self, trunk, mtp, row_space: str, refeed: bool, graphs: bool = False,
                 handoff_norm: str = "pre", recycle_norm: str = "pre", head_fp8: bool = False,
                 kv_fp8: bool = False, head_shards: int = 1, prefill_full: bool = False,
                 drafter_skip: str = "none"):
        if mtp is None:
            raise ValueError("the checkpoint has no MTP module (num_nextn_predict_layers = 0)")
        for name, v in (("handoff_norm", handoff_norm), ("recycle_norm", recycle_norm)):
            if v not in ("pre", "post"):
                raise ValueError(f"{name}={v!r} must be 'pre' or 'post' (resolve 'checkpoint' first)")
        self.trunk, self.mtp = trunk, mtp
        self.row_space, self.refeed = row_space, refeed
        self.handoff_norm, self.recycle_norm = handoff_norm, recycle_norm
        self.prefill_full = prefill_full     # PREFILL_FULL: context rows through the whole block (`write_rows`)
        if drafter_skip not in ("none", "head", "block"):
            raise ValueError(f"drafter_skip={drafter_skip!r} must be 'none', 'head' or 'block'")
        self.drafter_skip = drafter_skip     # DRAFTER_SKIP: a timing arm's propose (`_draft_step`)
        self.slot_is_key = row_space == "dense"
        self.zero_at = int(rope_of(row_space, 0, 0))   # RoPE position of pair key 0 (zero_first_embed layouts)
        self.embed = trunk.embed_tokens
        self.lm_head = trunk.lm_head
        self.kv_fp8 = kv_fp8
        self.head = DraftHead(mtp, self.lm_head, fp8=head_fp8, shards=head_shards)   # HEAD_FP8, HEAD_SHARDS act there

    # -- state -------------------------------------------------------------
    def alloc(self, budgets: np.ndarray) -> None:
        caps = np.asarray(budgets, dtype=np.int64) + _SLACK
        if self.kv is None or self.kv.capacities != caps.tolist():
            self.kv = self._new_kv(caps.tolist())        # else the last wave's: a step graph reads it by address
        B = len(caps)
        self.rows = np.zeros(B, dtype=np.int64)
        self.row_key = np.full((B, int(caps.max())), -1, dtype=np.int64)
        self.row_target = np.zeros((B, int(caps.max())), dtype=bool)  # row carries a target hidden
        self.last_drafted = np.zeros(B, dtype=np.int64)
        self.row0_slot = np.full(B, -1, dtype=np.int64)

    def _new_kv(self, capacities: list) -> KVPool:
        """The drafter's KV pool: KV_FP8 acts here and only here (its rows stored as FP8 E4M3)."""
        if not self.kv_fp8:
            return self.mtp.new_kv(capacities)
        a = self.mtp.args
        return Fp8KVPool(1, a.num_key_value_heads, a.head_dim, capacities, device=self.mtp.device, dtype=self.mtp.dtype)

    def numerics(self) -> dict | None:
        """What the manifest records of HEAD_FP8 / KV_FP8 / HEAD_SHARDS (None with all three off)."""
        out = self.head.numerics()
        if self.kv_fp8:
            read = str(self.mtp.dtype).replace("torch.", "")
            out = {**(out or {}), "kv_fp8": f"float8_e4m3fn storage, scale 1, read as {read}"}
        return out

    def free(self) -> None:
        """Kept: the next wave of the same shape reuses the KV pool (and the step graphs that read it)."""

    def new_request(self) -> None:
        """PREFIX_REUSE: a fresh drafter state for a turn's new request, as `alloc` leaves it (a row
        written later attends only to slots written after this: from 0 up to its own)."""
        self.rows[:] = 0
        self.row_key[:] = -1
        self.row_target[:] = False
        self.last_drafted[:] = 0
        self.row0_slot[:] = -1

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

    def write_rows(self, tok, hid, rope, slot, length: int) -> None:
        """Device: drafter KV rows for target-hidden inputs (context, catch-up): tok, rope, slot
        [B, T] (padding at slot -1), hid [B, T, H] the trunk's pre-norm hiddens. The output is
        unused: the KV rows are the point, so by default only they are computed (the engine's
        KV-only `drafter_write_kv_row`); PREFILL_FULL runs the whole block as a propose does
        (the engine's diagnostic arm). Both write the same rows bit for bit (model.write_kv_rows)."""
        if self.prefill_full:
            self.mtp.forward(tok, self._handoff(hid), rope, slot, self.kv, self.embed, length=length,
                             zero_at=self.zero_at)
        else:
            self.mtp.write_kv_rows(tok, self._handoff(hid), rope, slot, self.kv, self.embed, zero_at=self.zero_at)

    # -- context rows: prompt prefill and catch-up feed share one plan -----
    def plan_rows(self, feed: RowFeed, static: bool = False, width: int | None = None) -> tuple[RowsWritten, dict]:
        """Host: lay `feed`'s rows out as a padded [B, T] batch (T: the widest sequence's count;
        `static`: that rounded up to a power of two, a graph's shape; `width`: T itself, the
        loop's fixed catch-up width) and book them. Returns what will be written (hiddens None) and
        the batch as int64 arrays tok, slot, rope, label, each [B, T] (padding: slot -1, label 0)."""
        B = len(self.rows)
        order, s, j, T = pad_layout(feed.seq, B)
        if width is not None and T > width:
            raise ValueError(f"{T} catch-up rows for one sequence: the fixed width is {width}")
        T = width if width is not None else bucket(T) if static else T
        slots = self.rows[s] + j
        keys = feed.key[order]
        ropes = rope_of(self.row_space, keys, slots)
        batch = {"tok": np.zeros((B, T), np.int64), "slot": np.full((B, T), -1, np.int64),
                 "rope": np.zeros((B, T), np.int64), "label": np.zeros((B, T), np.int64)}
        batch["tok"][s, j], batch["slot"][s, j], batch["rope"][s, j] = feed.token[order], slots, ropes
        batch["label"][s, j] = np.maximum(feed.label[order], 0)
        np.add.at(self.rows, s, 1)
        self.row_key[s, slots] = keys
        self.row_target[s, slots] = True
        return RowsWritten(s, keys, slots, ropes, feed.label[order], None), {"order": order, "s": s, "j": j, **batch}

    def prefill_drafter(self, feed: RowFeed) -> RowsWritten:
        """Plan and write rows whose hiddens are on hand: a turn prefill's context rows
        (DRAFTER_PREFILL; the catch-up's are written inside the step, from the ring)."""
        if len(feed) == 0:
            return RowsWritten.empty()
        w, b = self.plan_rows(feed)
        dev = feed.hiddens.device
        s_t, j_t = torch.as_tensor(b["s"], device=dev), torch.as_tensor(b["j"], device=dev)
        hidden_rows = feed.hiddens[torch.as_tensor(b["order"], device=dev)]
        hid = torch.zeros(*b["tok"].shape, feed.hiddens.shape[-1], dtype=feed.hiddens.dtype, device=dev)
        hid[s_t, j_t] = hidden_rows
        idx = torch.as_tensor(np.stack([b["tok"], b["rope"], b["slot"]]), device=dev)
        self.write_rows(idx[0], hid, idx[1], idx[2], int(b["slot"].max()) + 1)
        w.hiddens = hidden_rows
        return w

    # -- propose: planned on the host, drafted on the device ---------------
    def _draft_step(self, tok, hid, rope, slot, length, topk: int, first: bool, logits: bool):
        """One draft; `first`: its hidden is the target's (handed through `_handoff`), else the
        previous draft's recycled output. Returns the hidden for the next draft, the head's outputs
        and (`logits`: a sampled draft) the head's logits."""
        if first:
            hid = self._handoff(hid)
        out = self.mtp.forward(tok[:, None], hid[:, None], rope[:, None], slot[:, None], self.kv,
                               self.embed, length=length, zero_at=self.zero_at,
                               **({"block": False} if self.drafter_skip == "block" else {}))   # DRAFTER_SKIP=block
        if self.drafter_skip == "head":      # DRAFTER_SKIP=head: no norm, head or argmax; the engine's draft 0
            return self._skipped_head(out)
        conf, draft, ids, p, z = self.head.outputs(out, topk, fp32=logits)   # sampled: fp32 logits for q
        return (self._recycle(out[:, 0]), conf, draft, ids, p) + ((z,) if logits else ())

    def _skipped_head(self, out):
        """DRAFTER_SKIP=head (a timing arm: validate_arm refuses it with sampling, SHADOW_TOPK, DRAFT_CONF):
        the draft is token 0, as the engine's `forward_one` returns `Ok(0)`, its confidence 0."""
        draft = torch.zeros(out.shape[0], dtype=torch.long, device=out.device)
        conf = torch.zeros(out.shape[0], dtype=torch.float32, device=out.device)
        return self._recycle(out[:, 0]), conf, draft, draft, conf

    def plan_propose(self, history, positions, num_drafts, active, static: bool = False) -> tuple[dict, dict]:
        """Host: book the propose's K rows per active sequence (pair keys n-1 .. n+K-2) and return
        their RoPE positions and KV slots ([B, K] int64: d_rope, d_slot; slot -1 inactive) and
        the drafter's KV read length."""
        return self._book_propose(positions, active, np.arange(num_drafts))

    def _book_propose(self, positions, active, depth: np.ndarray) -> tuple[dict, dict]:
        """Host: book M = len(depth) rows per active sequence: row r at slot base + r, pair key
        n-1+depth[r], and the RoPE position a linear draft gives that key (at slot base + depth[r]).
        A chain's depths are 0..K-1; a tree's are its internal nodes' (`plan_propose_tree`)."""
        base = self.rows.copy()
        act = np.nonzero(active)[0]
        dep = np.asarray(depth)[None, :]                                                 # [1, M]
        M = dep.shape[1]
        r = np.arange(M)[None, :]                                                        # [1, M]
        keys = positions[:, None] - 1 + dep                                              # [B, M]
        slots = np.where(active[:, None], base[:, None] + r, -1)                         # [B, M]
        self.row_key[act[:, None], base[act][:, None] + r] = keys[act]
        self.row_target[act[:, None], base[act][:, None] + r] = r == 0
        self.rows[act] += M
        self.last_drafted[act] = M
        self.row0_slot = np.where(active, base, -1)
        plan = {"d_rope": rope_of(self.row_space, keys, base[:, None] + dep), "d_slot": slots}
        return plan, {"draft": int(slots.max()) + 1}

    # -- the same plan on the device (the loop's run-ahead: speculative/run_ahead.py) --
    def plan_on_device(self, rows, positions, active, num_drafts: int, oracle: bool) -> dict:
        """Device: `plan_propose`'s arrays (and `plan_oracle`'s) from the drafter's row count rows,
        positions and active [B], exactly as the host computes them. Books nothing: the host does,
        when it replays the step and checks these values against its own."""
        i = torch.arange(num_drafts, device=rows.device)[None, :]                      # [1, K]
        slots = rows[:, None] + i                                                       # [B, K]
        plan = {"d_rope": rope_of(self.row_space, positions[:, None] - 1 + i, slots),
                "d_slot": torch.where(active[:, None], slots, -1)}
        if oracle:
            row0 = torch.where(active, rows, -1)
            plan.update(o_slot=torch.where(active, rows + 1, -1), o_rope=rope_of(self.row_space, positions, row0 + 1))
        return plan

    def feed_on_device(self, keys, live, rows, history, width: int) -> tuple[dict, torch.Tensor]:
        """Device: `plan_rows` of the catch-up's live keys (keys, live [B, R]: `gap_keys_on_device`)
        as a [B, width] batch, the row of key k fed the committed token k+1 (history [B, L+1])
        and ring label k+1. Returns cu_tok, cu_slot, cu_rope, cu_label [B, width] (padding as
        plan_rows: tok 0, slot -1, rope 0, label 0) and the rows fed per sequence [B] (at most
        width: the caller refuses more). Books nothing: the host does, when it replays the step."""
        B = keys.shape[0]
        rank = live.long().cumsum(dim=1) - 1                                            # [B, R]
        col = torch.where(live & (rank < width), rank, width)                           # width: a dump column
        key = torch.zeros(B, width + 1, dtype=torch.long, device=keys.device).scatter_(1, col, keys)[:, :width]
        count = live.sum(dim=1).clamp(max=width)                                        # [B]
        j = torch.arange(width, device=keys.device)[None, :]                            # [1, W]
        filled = j < count[:, None]                                                     # [B, W]
        slot = rows[:, None] + j
        tok = history.gather(1, torch.where(filled, key + 1, 0))
        return ({"cu_tok": torch.where(filled, tok, 0), "cu_slot": torch.where(filled, slot, -1),
                 "cu_rope": torch.where(filled, rope_of(self.row_space, key, slot), 0),
                 "cu_label": torch.where(filled, key + 1, 0)}, count)

    def trim_table(self, num_drafts: int) -> list[int]:
        """Rows `after_verify` drops for each accepted count 0..K."""
        return trim_table(self.row_space, num_drafts, self.refeed).tolist()

    def rows_on_device(self, rows, accepted, active, num_drafts: int, trim) -> torch.Tensor:
        """Device: the drafter's row count [B] after a propose of K rows and its verify (accepted
        [B] drafts kept; trim: `trim_table` as a tensor), as `plan_propose` + `after_verify` book it."""
        return torch.where(active, rows + num_drafts - trim[accepted], rows)

    def full_lengths(self) -> dict:
        """The drafter KV read lengths at static shapes: its pool's full capacity."""
        return dict.fromkeys(("catchup", "draft", "oracle"), self.kv.max_capacity)

    def draft(self, plan: dict, last_tokens, target_hidden, num_drafts: int, topk: int = 0, draws=None,
              lengths: dict | None = None) -> Proposal:
        """Device: K drafts per sequence, autoregressively (plan: `plan_propose`'s arrays as tensors)."""
        tok, hid = last_tokens, target_hidden
        chain = DraftChain(topk)
        sampled = draws is not None
        for i in range(num_drafts):
            first = i == 0 and self.handoff_norm == "post"    # (pre: the same step as later drafts)
            out, conf, draft, ids, p, *z = self._draft_step(tok, hid, plan["d_rope"][:, i], plan["d_slot"][:, i],
                                                            lengths["draft"], topk, first, sampled)
            draft, q = drawn(draws, i, z[0] if z else None, draft)
            chain.add(draft, conf, ids, p, q)
            tok, hid = draft, out   # the recycled hidden: the drafter's own feeds draft i+2
        return chain.proposal()


    def plan_oracle(self, positions, active) -> tuple[dict, dict]:
        """Host: ORACLE_P2's row (draft 2's own slot) and its RoPE position, [B] int64 each."""
        slots = np.where(active, self.row0_slot + 1, -1)
        return ({"o_slot": slots, "o_rope": rope_of(self.row_space, positions, self.row0_slot + 1)},
                {"oracle": int(slots.max()) + 1})

    @torch.no_grad()
    def oracle_draft2(self, draft1, true_hidden, plan: dict, lengths: dict) -> torch.Tensor:
        """Device: ORACLE_P2, draft 2 as it would be from the target's true hidden of position n
        (teacher-forced), written over draft 2's own row and put back, so the drafter's state is
        untouched (observational only)."""
        slot = plan["o_slot"]
        snap = self.kv.snapshot(slot)
        out = self.mtp.forward(draft1[:, None], self._handoff(true_hidden)[:, None], plan["o_rope"][:, None],
                               slot[:, None], self.kv, self.embed, length=lengths["oracle"], zero_at=self.zero_at)
        self.kv.restore(snap)
        return self.head.argmax(out)

    # -- after verify ------------------------------------------------------
    def after_verify(self, num_accepted: np.ndarray, active: np.ndarray) -> None:
        act = np.nonzero(active & (self.last_drafted > 0))[0]
        if len(act) == 0:
            return
        K = int(self.last_drafted[act].max())
        trim = trim_table(self.row_space, K, self.refeed)[num_accepted[act]]   # the row-space rule, tabulated
        self.rows[act] -= trim
        b, j = np.nonzero(np.arange(K)[None, :] < trim[:, None])
        self.row_key[act[b], self.rows[act[b]] + j] = -1      # trimmed rows are forgotten
        self.row_target[act[b], self.rows[act[b]] + j] = False
        self.last_drafted[act] = 0
