"""The batched speculative loop: a wave of B documents through all their turns.

Turn t appends each document's next chunk to its context, prefills the target over it (its KV is
kept across turns), then generates exactly G tokens: the prefill's next token, then speculative
steps. Exactly G a turn (a step that would overshoot commits only what the turn needs) keeps every
arm of a greedy run on one target trajectory, so arms compare position by position.

A step: the host plans it (`_plan`; one host->device copy), the device runs it (step.py's
`DeviceStep`, where to start reading; one CUDA graph per shape on the GPU), the host commits it
after one read (`_commit`; host_io.py). At static shapes a turn's steps run ahead of the host where
the arm allows (run_ahead.py: the device plans and books them; the host's own plan of each is
checked equal behind it). The target (targets.py) is the trunk in live mode, a stored trajectory in
replay mode; the rest is the same code in both, and only live mode times its steps (timing.py).

The levers, by name (shapes: step.py's vocabulary; lever_rows.py: the host's rows of three of them):
  CATCHUP          `lever_rows.catchup_rows` (host plan), `DeviceStep.feed_rows`, `RunAhead.plan` (device plan)
  REFEED, SHIFT    `DeviceStep.ring_take`: which hiddens the ring gets, under which labels
  RING_PREFILL     `lever_rows.ring_prefill`
  DRAFTER_PREFILL  `_prefill_turn`, `lever_rows.drafter_context`
  PREFIX_REUSE,    `_prefill_turn` (a warm turn's new request: `turn_requests.fresh_drafter`, the proposer's
  CARRY_DRAFTER    `new_request`), `_commit` (`turn_requests.PositionHiddens`, for a fresh drafter's prefill)
  DRAFT_CONF       `DeviceStep.propose`'s gate; `_run`'s two graphs and `_all_gated`
  SHADOW_TOPK      `DeviceStep.propose` (the drafter's top-k; `StepTable.write`, step_table.py)
  ORACLE_P2        `DeviceStep.oracle`; `_plan`'s `plan_oracle`
  FINGERPRINTS     `self.probe`, the step probe (step_probe.py) the wave, the step and the run-ahead call;
                   FINGERPRINTS' is its recorder (step_events.py)
  TREE             `verify_depth` (`_plan`: positions by depth), `DeviceStep.propose` / `verify_tree`, `_commit`
  HEAD_FP8, KV_FP8, HEAD_SHARDS  none here: the MTP proposer's head (`MTPProposer.head`) and KV pool (`_new_kv`)
"""
from __future__ import annotations

import functools

import numpy as np
import torch

from atlas_ab.config.structured import ArmConfig
from atlas_ab.config.tree import parse_tree
from atlas_ab.proposers.capabilities import require
from atlas_ab.proposers.ring import Ring
from atlas_ab.runtime.graphs import bucket
from atlas_ab.speculative.host_io import StepRead, pack_plan, unpack_read
from atlas_ab.speculative.lever_rows import catchup_rows, drafter_context, ring_prefill
from atlas_ab.speculative.run_ahead import RunAhead, runs_ahead
from atlas_ab.speculative.sampling import SamplingPlan
from atlas_ab.speculative.step import DeviceStep
from atlas_ab.speculative.step_events import Fingerprints
from atlas_ab.speculative.step_table import StepRecord, StepTable, WaveTrace
from atlas_ab.speculative.timing import StepTimer
from atlas_ab.speculative.turn_requests import PositionHiddens, fresh_drafter, rebuilds
from atlas_ab.speculative.verify import verifier
from atlas_ab.telemetry.step_blocks import StepBlocks
from atlas_ab.workload.documents import Document


class Wave:
    """One wave. `target`: a `targets.LiveTarget` or `targets.ReplayTarget`; `sampling`: how a
    sampled run verifies (None: greedy verification)."""

    def __init__(self, target, proposer, arm: ArmConfig, docs: list[Document], gen_tokens: int,
                 fingerprint_rows=None, on_step=None, sampling: SamplingPlan | None = None,
                 capacity: int | None = None, run_ahead: bool = True):
        """capacity: every sequence's token budget (at least its own), for a run whose waves share
        one static shape, so its step graphs serve every wave; None: each sequence's own.
        run_ahead: at static shapes, let the device plan and run a turn's steps ahead of the host
        where the arm allows it (run_ahead.py). fingerprint_rows: FINGERPRINTS' hash of a [..., H]
        tensor's rows (None: the FNV-1a of telemetry/fingerprint.py; tests pass a stand-in)."""
        require(proposer, arm)      # every capability the arm needs, once (proposers/capabilities.py)
        self.target, self.proposer, self.arm, self.docs, self.G = target, proposer, arm, docs, gen_tokens
        self.K, self.on_step, self.turns = arm.num_drafts, on_step, len(docs[0].chunks)
        # TREE: the static tree (validate_arm: K is its depth); its verify reads N + 1 rows
        self.tree = parse_tree(arm.tree) if arm.tree is not None else None
        width = self.tree.n_nodes if self.tree is not None else self.K
        # the verify's rows, root first: each node's depth (a K-chain is the one-path tree: depths 0..K)
        self.verify_depth = self.tree.depth if self.tree is not None else np.arange(self.K + 1)   # [N+1]
        B = self.B = len(docs)
        self.doc_ids = np.array([d.doc_id for d in docs], dtype=np.int64)
        budgets = np.array([sum(len(c) for c in d.chunks) + self.turns * gen_tokens + width + 2
                            for d in docs], dtype=np.int64)
        if capacity is not None:
            budgets = np.full(B, max(int(capacity), int(budgets.max())), dtype=np.int64)
        self.device, self.dtype = self.target.device, self.target.dtype
        self.target.alloc(budgets)
        proposer.alloc(budgets)
        self.history = np.zeros((B, int(budgets.max()) + 1), dtype=np.int64)  # [B, L+1] committed tokens
        self.n_tok = np.zeros(B, dtype=np.int64)     # [B] tokens in history (last one not yet processed)
        self.kv_len = np.zeros(B, dtype=np.int64)    # [B] positions the target has processed
        H = self.target.hidden_size
        bufs = self.target.buffers        # the state a step graph reads, kept for the next wave
        self.last_hidden = bufs.get("last_hidden", (B, H), self.dtype, self.device).zero_()  # [B, H] of kv_len-1
        # PREFIX_REUSE + DRAFTER_PREFILL, nothing carried: every position's hidden, for a fresh drafter's prefill
        self.kept = PositionHiddens(B, self.history.shape[1], H, self.dtype, self.device) if rebuilds(arm) else None
        R = arm.ring_size
        self.graphs = self.target.step_graphs     # the device step, one graph per shape
        static = self.graphs.static
        # its bookkeeping compiled into a few kernels (runtime/fusion.py): GPU static shapes only
        fuse = static and self.graphs.fuse and self.device.type == "cuda"
        ahead = run_ahead and runs_ahead(arm, static, proposer)
        mirror = bufs.get("ring_labels", (B, R + 1), torch.long, self.device) if ahead and arm.has_ring else None
        self.ring = Ring(B, R, H, self.device, self.dtype, bufs.get("ring", (B, R + 1, H), self.dtype, self.device)
                         .zero_(), mirror) if arm.has_ring else None
        # the step probe: FINGERPRINTS' recorder (snapshots of eager steps, hashed in static-shape ones,
        # laid out from a run-ahead), else the no-op probe
        self.probe = Fingerprints.of(arm, fingerprint_rows, "snapshot" if not static else "laid_out" if ahead
                                     else "in_step", self.doc_ids, self.ring, self.last_hidden)
        self.trace = WaveTrace(StepBlocks(self.K, arm.shadow_topk), self.probe.log, [[] for _ in range(B)])
        self.table = StepTable(self.trace, arm, self.doc_ids)   # each step's records, written during the next
        self.timer = StepTimer(self.target.live)   # step_ms, with each kind's warm-up kept apart
        self.full = {"verify": self.target.full_length(), **proposer.full_lengths()}
        # CATCHUP at static shapes: the rows' fixed width in both loops (a wider gap takes its bucket; a
        # run-ahead halts there), so both run the same kernels on the same shapes: bit-equal tables
        self.cu_width = bucket(self.K + 1) if static and arm.catchup else None
        self.turn = 0
        self.step_no = np.zeros(B, dtype=np.int64)   # [B] steps of the turn so far
        self.gen = np.zeros(B, dtype=np.int64)       # [B] tokens of the turn so far
        doc = bufs.get("doc", (B,), torch.long, self.device).copy_(self._t(self.doc_ids))    # [B]
        self.verifier = verifier(sampling, self.target, doc, self.K, fuse)
        self.step = DeviceStep(self.target, proposer, self.verifier, arm, self.last_hidden, self.ring, fuse,
                               self.probe)
        self.ahead = RunAhead(self.step, self.graphs, bufs, gen_tokens, self.history.shape[1],
                              proposer.row_key.shape[1], self.cu_width) if ahead else None
        self.graphs.bind(self._graph_state(doc))

    # ------------------------------------------------------------------ run
    @torch.no_grad()
    def run(self) -> WaveTrace:
        for t in range(self.turns):
            self.turn = t
            self._prefill_turn(t)
            if self.ahead is not None and self.probe.allows_run_ahead:
                self._run_ahead()
            while (self.gen < self.G).any():
                self._step(self.gen < self.G)
            self._flush()
            for b, n in enumerate(self.n_tok):
                self.trace.generated[b].append(self.history[b, n - self.G:n].tolist())
        self.proposer.free()
        self.target.free()
        return self.trace

    def _t(self, x) -> torch.Tensor:
        return torch.as_tensor(x, device=self.device)

    def _graph_state(self, doc: torch.Tensor) -> list[torch.Tensor]:
        """Every tensor a step graph reads or writes by address besides its input: the KV pools and
        this wave's state (the graphs of an earlier wave serve this one while these are the same)."""
        return self.step.pools() + [doc] + self._written_state() + ([self.ahead.trim] if self.ahead is not None else [])

    def _written_state(self) -> list[torch.Tensor]:
        """What a step graph writes besides the KV rows: put back after a capture's warm-up runs."""
        return self.step.state() + (self.ahead.state() if self.ahead is not None else [])

    def _turn_key(self):
        """The turn, where a step graph bakes it in (sampled: the uniforms' keys hold it), else None."""
        return self.turn if self.verifier.sampled else None

    # -------------------------------------------------------- turn prefill
    def _prefill_turn(self, t: int) -> None:
        B = self.B
        for b, d in enumerate(self.docs):
            c = d.chunks[t]
            self.history[b, self.n_tok[b]:self.n_tok[b] + len(c)] = c
            self.n_tok[b] += len(c)
        start = self.kv_len.copy()
        count = self.n_tok - start
        hid, first, u = self.verifier.first(self.target, t, self.history, start, count)
        last = self._t(count - 1)
        ar = torch.arange(B, device=self.device)
        fresh = fresh_drafter(self.arm, t)          # PREFIX_REUSE: a warm turn's new request, nothing carried
        if fresh:
            self.proposer.new_request()
        if self.kept is not None:
            self.kept.put_prefill(hid, start, count)

        # DRAFTER_PREFILL: the context's rows. OFF keeps the reference engine's behaviour: only a
        # prefill that starts at position 0 (the cold turn) prefills the drafter.
        if self.arm.drafter_prefill or t == 0:
            if self.arm.catchup:   # the ring's rows below key start-1 first: the prefill's rows would pass over them
                plan, lengths = {}, {}
                self._catchup(np.ones(B, dtype=bool), start, plan, lengths, step=-1)
                if plan:
                    self.step.feed_rows({k: self._t(v) for k, v in plan.items()}, lengths["catchup"])
            before = self.kept.rows if fresh else None       # a fresh drafter: the whole prompt's rows
            self.probe.context(drafter_context(self.proposer, self.history, self.last_hidden, start, count, hid,
                                               before), self.turn)

        self.last_hidden.copy_(hid[ar, last])     # in place: a captured step reads this buffer
        self.kv_len = self.n_tok.copy()
        if self.arm.ring_prefill:
            self.probe.ring_prefill(*ring_prefill(self.ring, self.last_hidden, self.kv_len), self.turn)
        if u is None:
            first = first.cpu().numpy()
        else:          # the drawn token and its PIT, in one read
            first, u = np.split(torch.stack([first.double(), u.double()], 1).cpu().numpy(), 2, axis=1)
            first = first[:, 0].astype(np.int64)
            self.trace.pit.append(u[:, 0].astype(np.float32))
        self.history[np.arange(B), self.n_tok] = first
        self.n_tok += 1
        self.gen[:] = 1
        self.step_no[:] = 0

    # ----------------------------------------------------------------- step
    def _step(self, active: np.ndarray) -> None:
        """Plan on the host, run on the device (one graph), commit after one read."""
        self.timer.start()
        n = self.kv_len.copy()                      # [B] position of the last committed token
        plan, lengths, fed, rows_at_propose = self._plan(active, n)
        packed, read_layout, vh, serial = self._run(plan, lengths, active)
        self._flush()                               # the previous step's telemetry, while the device runs this one
        h = unpack_read(packed.cpu().numpy(), read_layout)   # the step's one device->host read
        record = self._after_read(h, vh, active, n, fed, rows_at_propose, self.probe)
        self.table.hold(record, self.timer.stop("serial" if serial else "verify"))
        self._notify(h, record.act)

    def _plan(self, active: np.ndarray, n: np.ndarray):
        """Host: the step's plan (int64 arrays: the verify of [t_n, d1..dK] at positions n..n+K,
        what the turn still needs, the catch-up rows at `cu_width`, the drafts' slots), KV lengths."""
        B, K = self.B, self.K
        pos = n[:, None] + self.verify_depth[None, :]                                    # [B, N+1] RoPE by depth
        slot = n[:, None] + np.arange(len(self.verify_depth))[None, :]                   # [B, N+1] KV by node id
        plan = {"last_tok": self.history[np.arange(B), n], "pos": pos, "vslot": np.where(active[:, None], slot, -1),
                "left": np.where(active, self.G - self.gen, 0)}
        lengths = {"verify": int(n[active].max()) + len(self.verify_depth)}
        fed = self._catchup(active, n, plan, lengths, width=self.cu_width) if self.arm.catchup \
            else np.zeros(B, dtype=np.int64)
        rows_at_propose = self.proposer.drafter_rows()
        self.probe.planned(active, n, self.step_no, self.turn)
        propose = self.proposer.plan_propose_tree(n, self.tree, active) if self.tree is not None else \
            self.proposer.plan_propose(self.history, n, K, active, static=self.graphs.static)
        for part in (propose,
                     self.proposer.plan_oracle(n, active) if self.arm.oracle_p2 else ({}, {})):
            plan.update(part[0])
            lengths.update(part[1])
        return plan, lengths, fed, rows_at_propose

    def _run(self, plan: dict, lengths: dict, active: np.ndarray):
        """Device: the planned step, one graph per shape (two for DRAFT_CONF). Returns the packed
        read, its layout, the verify's hiddens and whether the step decoded serially."""
        x, layout = pack_plan(**plan)
        x = self._t(x)                              # [B, X] the step's one host->device copy
        key = (layout, self._turn_key())
        state = self._written_state()
        if self.arm.draft_conf <= 0:
            step = functools.partial(self.step, layout=layout, turn=self.turn)
            return (*self.graphs(("step",) + key, step, [x], lengths, self.full, state), False)
        # DRAFT_CONF: when every chain is below tau the step decodes serially: the host decides, between two graphs
        propose = functools.partial(self.step.propose, layout=layout, turn=self.turn)
        prop, gated, taken = self.graphs(("propose",) + key, propose, [x], lengths, self.full, state)
        serial = self._all_gated(gated, active)
        verify = functools.partial(self.step.verify, layout=layout, prop=prop, gated=gated, all_gated=serial,
                                   turn=self.turn, taken=taken)
        return (*self.graphs(("verify", serial) + key, verify, [x], lengths, self.full, state), serial)

    def _after_read(self, h: StepRead, vh, active, n, fed, rows_at_propose, probe) -> StepRecord:
        """The host's half of a step once it has read it: the commit between the probe's `read` and
        `committed` (probe: the wave's, or for a run-ahead step the one it gives booked steps), the
        step counters. Returns its `StepTable` record."""
        probe.read(h, active, n, self.step_no, self.turn)
        written = self._commit(h, vh, n, active)
        probe.committed(h, written, vh, self.step_no, self.turn)
        act = np.nonzero(active)[0]
        record = StepRecord(h, act, n, rows_at_propose, fed, self.step_no[act].copy(), self.turn)
        self.step_no[act] += 1
        self.trace.n_tokens += int(h.committed.sum())
        return record

    def _notify(self, h: StepRead, act) -> None:
        if self.on_step is not None:
            k = self.K if h.n_valid is None else h.n_valid[act]     # a variable K: each row's real drafts
            self.on_step(int(h.committed.sum()), np.where(h.gated[act], 0, k), h.acc[act])

    def _flush(self) -> None:
        """The last step's telemetry: its probe's records, then its table records."""
        self.probe.flush()
        self.table.flush()

    # ----------------------------------------------------- the run-ahead
    def _run_ahead(self) -> None:
        """A turn's steps, planned on the device and launched in chunks ahead of the host
        (run_ahead.py); a chunk that halts (a catch-up too wide) gives its step to `_step`."""
        ahead, key = self.ahead, self._turn_key()

        def load():          # the device's state for planning := the host's
            ahead.load(self.kv_len, self.gen, self.proposer.drafter_rows(), self.history, self.proposer.row_key)
        load()
        while (self.gen < self.G).any():
            M = ahead.chunk(self.gen, "verify" in self.timer.seen, key)
            self.timer.start()
            ready = ahead.launch(M, self.turn, key, self.full, self._written_state())
            records, halted = ahead.book_chunk(ready, lambda: (self.gen < self.G).any(), self._host_plan,
                                               self._booked)
            self._emit(records, self.timer.stop("verify", max(len(records), 1)))
            if halted:
                self._step(self.gen < self.G)
                self._flush()
                load()

    def _host_plan(self) -> tuple:
        """A run-ahead step as the host plans it (`RunAhead.book_chunk`'s host_plan)."""
        active, n = self.gen < self.G, self.kv_len.copy()
        plan, lengths, fed, rows_at_propose = self._plan(active, n)
        step_no, turn = self.step_no, self.turn
        return (*pack_plan(**plan), lambda s: f"turn {turn}, step {int(step_no[s])} of sequence {s}",
                (active, n, fed, rows_at_propose))

    def _booked(self, h: StepRead, pending: tuple) -> StepRecord:
        """A run-ahead step's host half once its plan is checked (`RunAhead.book_chunk`'s commit)."""
        record = self._after_read(h, None, *pending, self.probe.booked())
        self._notify(h, record.act)
        return record

    def _emit(self, records: list, timing) -> None:
        """A booked chunk's telemetry: its probe's records, then its table records."""
        self._flush()
        self.probe.chunk(self.turn, [(r.act, r.step_no) for r in records], self.ahead)
        for record in records:
            self.table.write(record, timing)

    def _commit(self, h: StepRead, vh: torch.Tensor, n: np.ndarray, active: np.ndarray):
        """The host half of the commit: accepted drafts + the target's token after them, cut at the
        turn's G tokens, into the history; the ring's and the drafter's bookkeeping. Returns the
        ring writes booked (`Ring.book_written`), None without a ring."""
        c = h.committed
        rows, cols = np.nonzero(np.arange(self.K + 1)[None, :] < c[:, None])
        self.history[rows, n[rows] + 1 + cols] = h.target[rows, cols]
        a_eff = np.maximum(c - 1, 0)           # accepted drafts the trajectory kept
        self.kv_len = np.where(active, n + c, self.kv_len)
        self.n_tok = np.where(active, self.n_tok + c, self.n_tok)
        self.gen += c
        written = self.ring.book_written(h.ring_label) if self.ring is not None else None
        if self.kept is not None:
            self.kept.put_committed(vh, n, c, active)
        if self.tree is not None:                  # the path booked as a linear propose (cut at the turn's end)
            last = h.tree_path[np.arange(self.B), a_eff]
            self.proposer.after_verify_tree(a_eff, last, self.tree, active)
            return written
        # dropped (gated) drafts were never verified: their rows go as rejected ones do
        self.proposer.after_verify(np.where(h.gated, 0, a_eff), active)
        return written

    def _all_gated(self, gated: torch.Tensor, active: np.ndarray) -> bool:
        """DRAFT_CONF: every active sequence dropped its drafts, so the step is a one-token decode (what
        gating saves); the engine pays this read too (`last_confidence`, a D2H per propose)."""
        return bool(gated.cpu().numpy()[active].all())

    def _catchup(self, active, n, plan: dict, lengths: dict, step=None, width: int | None = None) -> np.ndarray:
        """CATCHUP's rows into the plan (`catchup_rows`), shown to the probe."""
        fed, rows = catchup_rows(self.ring, self.arm.row_space, self.proposer, self.history, n, active,
                                 self.graphs.static, width, plan, lengths)
        self.probe.feed(rows, self.turn, self.step_no, step)
        return fed
