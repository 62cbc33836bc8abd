"""The batched speculative loop: propose -> verify -> accept -> commit.

One `Wave` runs B documents through all their turns together. Turn t appends
the document's next chunk to the context, prefills the target over it (the
target KV is reused across turns, so turns >= 1 are warm), then generates
exactly `gen_tokens` tokens: the prefill's own next token, then verify steps.
Exactly G tokens per turn (a step that would overshoot commits only what the
turn still needs) keeps every arm of a greedy run on the same target trajectory,
so arms stay comparable position by position.

A step reads like gpt-fast's `speculative_decode`: the drafter proposes K drafts,
the verifier (verify.py: greedy, speculative sampling, or its coupled replay)
runs the target and accepts a prefix, and the accepted drafts and the token after
them are committed. It runs in three parts: the host plans it (positions, KV slots,
the catch-up rows: one host->device copy), the device runs it as one static-shape
function (`_device_step`: catch-up rows, drafts, verify, acceptance, and the device half
of the commit: the next propose's hidden and the ring writes), captured as ONE CUDA graph
per shape on the GPU (runtime/graphs.py), and the host commits it after ONE read
(host_io.py: accepted and committed counts, drafts, the target's tokens, confidences,
the ring labels written, and under sampling the exact acceptance probabilities and PITs).
Each lever is one short, named branch:
CATCHUP (`_catchup`), REFEED and SHIFT (`_ring_take`), RING_PREFILL
(`_ring_prefill`), DRAFT_CONF (`gated`), SHADOW_TOPK (`topk`), ORACLE_P2
(`_oracle`), DRAFTER_PREFILL (`_prefill_turn`), FINGERPRINTS (`self.ev`), TREE (`_verify_tree`:
a static draft tree verified in one forward, then read as the linear step of its accepted path).

At static shapes a turn's steps also run ahead of the host (`_run_ahead`, the default where
the arm allows: every arm but DRAFT_CONF's): the device plans each step itself from state the
previous step left on the device, the host launches a chunk of steps back to back and books
each one (its own plan, checked equal to the device's) while the device runs the next ones.
The rows are the same; the host's part of a step leaves the device's critical path.

The target side (the turn prefill and the verify) is the wave's `target`
(targets.py): the trunk's forwards in live mode, a stored trajectory in
replay mode. Everything else here is the same code in both modes; only live
mode times its steps (`step_ms` is null in replay; each kind's first step in a wave is warm-up,
timed apart in `warmup_ms`: timing.py).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np
import torch

from atlas_ab.config.structured import ArmConfig
from atlas_ab.config.tree import parse_tree
from atlas_ab.proposers.base import Proposal, RowFeed
from atlas_ab.proposers.ring import Ring, gap_keys, gap_keys_on_device
from atlas_ab.runtime.batch import ragged_runs
from atlas_ab.runtime.fusion import fused
from atlas_ab.runtime.graphs import bucket
from atlas_ab.runtime.side_stream import SideStream
from atlas_ab.speculative.host_io import (
    StepRead,
    first_difference,
    layout_columns,
    layout_width,
    pack_on_device,
    pack_plan,
    pack_read,
    unpack_plan,
    unpack_read,
)
from atlas_ab.speculative.sampling import SamplingPlan
from atlas_ab.speculative.timing import StepTimer
from atlas_ab.speculative.tree_accept import as_linear, tree_tensors
from atlas_ab.speculative.tree_step import verify_tree
from atlas_ab.speculative.verify import CoupledVerify, GreedyVerify, SampledVerify, Verified
from atlas_ab.telemetry.events import EventLog, StepEvents
from atlas_ab.telemetry.fingerprint import fingerprint_rows as default_fingerprint_rows
from atlas_ab.telemetry.records import StepBlocks
from atlas_ab.workload.documents import Document


def commit_counts(accepted: torch.Tensor, left: torch.Tensor) -> torch.Tensor:
    """[B] tokens each sequence commits: its accepted drafts and the token after them (the target's,
    recovered or bonus), cut at what its turn still needs (`left`: 0 for an inactive sequence)."""
    return torch.minimum(accepted + 1, left)


def runs_ahead(arm: ArmConfig, graphs: bool, proposer) -> bool:
    """Whether a wave can run ahead of the host (`Wave._run_ahead`): static shapes, a proposer that
    plans on the device, and no DRAFT_CONF (its gate is read by the host between the propose and
    the verify)."""
    return graphs and arm.draft_conf <= 0 and arm.tree is None and hasattr(proposer, "plan_on_device")


def verifier(plan: SamplingPlan | None, target, doc: torch.Tensor, K: int, fuse: bool = False):
    """Greedy verification, live speculative sampling, or its coupled replay (verify.py); fuse:
    greedy's acceptance runs compiled (runtime/fusion.py)."""
    if plan is None:
        return GreedyVerify(fuse)
    return SampledVerify(plan, doc, K) if target.live else CoupledVerify(plan, doc, K)


@dataclass
class WaveTrace:
    """What a wave produced: telemetry and each sequence's tokens per turn (for the gate)."""
    steps: StepBlocks
    events: EventLog | None
    generated: list = field(default_factory=list)   # [seq][turn] -> list[int] of G tokens
    n_tokens: int = 0
    pit: list = field(default_factory=list)         # sampled runs: float32 arrays, the PIT of every committed token


class Wave:
    """One wave. `target`: a `targets.LiveTarget` or `targets.ReplayTarget`; `plan`: how a
    sampled run verifies (None: greedy verification)."""

    def __init__(self, target, proposer, arm: ArmConfig, docs: list[Document], gen_tokens: int,
                 fingerprint_rows=None, on_step=None, plan: SamplingPlan | None = None, capacity: int | None = None,
                 run_ahead: bool = True):
        """capacity: every sequence's token budget (at least its own), for a run whose waves share
        one static shape, so its step graphs serve every wave; None: each sequence's own.
        run_ahead: at static shapes, let the device plan and run a turn's steps ahead of the host
        where the arm allows it (`_run_ahead`); False: every step waits for the host's plan.
        fingerprint_rows: FINGERPRINTS' hash of a [..., H] tensor's rows (None: the FNV-1a of
        telemetry/fingerprint.py; tests pass a stand-in)."""
        self.target = target
        self.proposer, self.arm = proposer, arm
        self.docs, self.G = docs, gen_tokens
        self.K = arm.num_drafts
        # TREE: the static tree (validate_arm: K is its depth); its verify reads N + 1 rows
        self.tree = parse_tree(arm.tree) if arm.tree is not None else None
        width = self.tree.n_nodes if self.tree is not None else self.K
        self.on_step = on_step
        B = self.B = len(docs)
        self.turns = len(docs[0].chunks)
        self.doc_ids = np.array([d.doc_id for d in docs], dtype=np.int64)
        budgets = np.array([sum(len(c) for c in d.chunks) + self.turns * gen_tokens + width + 2
                            for d in docs], dtype=np.int64)
        if capacity is not None:
            budgets = np.full(B, max(int(capacity), int(budgets.max())), dtype=np.int64)
        self.device, self.dtype = self.target.device, self.target.dtype
        self.tt = tree_tensors(self.tree, self.device) if self.tree is not None else None
        self.target.alloc(budgets)
        proposer.alloc(budgets)
        self.history = np.zeros((B, int(budgets.max()) + 1), dtype=np.int64)  # committed tokens
        self.n_tok = np.zeros(B, dtype=np.int64)     # tokens in history (last one not yet processed)
        self.kv_len = np.zeros(B, dtype=np.int64)    # positions the target has processed
        H = self.target.hidden_size
        bufs = self.target.buffers        # the state a step graph reads, kept for the next wave
        self.last_hidden = bufs.get("last_hidden", (B, H), self.dtype, self.device).zero_()  # hidden of kv_len-1
        R = arm.ring_size
        self.steps = self.target.steps    # the device step, one graph per shape
        # its bookkeeping compiled into a few kernels (runtime/fusion.py): GPU static shapes only
        self.fuse = self.steps.graphs and self.steps.fuse and self.device.type == "cuda"
        # run-ahead: the device plans the turn's steps itself (`_run_ahead`)
        self.ahead = run_ahead and runs_ahead(arm, self.steps.graphs, proposer)
        mirror = bufs.get("ring_labels", (B, R + 1), torch.long, self.device) if self.ahead and arm.has_ring else None
        self.ring = Ring(B, R, H, self.device, self.dtype, bufs.get("ring", (B, R + 1, H), self.dtype, self.device)
                         .zero_(), mirror) if arm.has_ring else None
        self.ev = EventLog(fingerprint_rows or default_fingerprint_rows) if arm.fingerprints_on else None
        self.trace = WaveTrace(StepBlocks(self.K, arm.shadow_topk), self.ev, [[] for _ in range(B)])
        self.timer = StepTimer(self.target.live)   # step_ms, with each kind's warm-up kept apart
        self.full = {"verify": self.target.full_length(), **proposer.full_lengths()}
        # FINGERPRINTS at static shapes: the step hashes its event rows itself, in its graph
        self.fp_in_step = self.ev is not None and self.steps.graphs
        # and run ahead: a chunk's events go to the log as the steps' own outputs, laid out on the
        # device when the table is made (`_step_events_on_device`): nothing per step on the host
        self.fp_dense = self.fp_in_step and self.ahead
        # the step's hashing beside its path (`_propose`, `_verify`): the drafter and the bookkeeping
        # do not wait for it
        self.side = SideStream(self.device) if self.fp_in_step else None
        # CATCHUP in captured steps: the catch-up rows' fixed width, in both loops (a wider gap takes
        # its bucket; a run-ahead halts there), so both run the same kernels on the same shapes
        # and give bit-equal rows on any machine
        self.cu_width = bucket(self.K + 1) if self.steps.graphs and arm.catchup else None
        self._feed_plan = None
        self._pending = None       # the last step's telemetry rows, written while the device runs the next
        self._later: list = []     # and its fingerprint events (hashed in the step): calls, made the same way
        self.turn = 0
        if self.ahead:
            # n, tokens generated, drafter rows, last token, halted (a catch-up wider than its width)
            self.book = bufs.get("book", (5, B), torch.long, self.device)
            K = self.K
            # CATCHUP: the device's copies of the committed tokens and the drafter rows' pair keys
            # (+1 column each: a dump for masked writes)
            self.hist_dev = bufs.get("history", (B, self.history.shape[1] + 1), torch.long, self.device)
            self.row_key_dev = bufs.get("row_key", (B, proposer.row_key.shape[1] + 1), torch.long, self.device)
            self.trim = bufs.get("trim", (K + 1,), torch.long, self.device).copy_(self._t(proposer.trim_table(K)))
            self._host_reads = None                                           # [G, B, X]: a chunk's reads
            self._seen_tokens = np.zeros(B, dtype=np.int64)                   # committed tokens and steps
            self._seen_steps = np.zeros(B, dtype=np.int64)                    # per sequence, from the reads
        doc = bufs.get("doc", (B,), torch.long, self.device).copy_(self._t(self.doc_ids))
        self.verifier = verifier(plan, self.target, doc, self.K, self.fuse)
        self.steps.bind(self._graph_state(doc))
        self.step_no = np.zeros(B, dtype=np.int64)
        self.gen = np.zeros(B, dtype=np.int64)

    # ------------------------------------------------------------------ run
    @torch.no_grad()
    def run(self) -> WaveTrace:
        for t in range(self.turns):
            self.turn = t
            self._prefill_turn(t)
            if self.ahead and (self.ev is None or self.fp_in_step):   # snapshot FINGERPRINTS read vh: step by step
                self._run_ahead()
            while (self.gen < self.G).any():
                self._step(self.gen < self.G)
            self._flush()
            for b in range(self.B):
                n = self.n_tok[b]
                self.trace.generated[b].append(self.history[b, n - self.G:n].tolist())
        self.proposer.free()
        self.target.free()
        return self.trace

    def _t(self, x) -> torch.Tensor:
        return torch.as_tensor(x, device=self.device)

    def _graph_state(self, doc: torch.Tensor) -> list[torch.Tensor]:
        """Every tensor a step graph reads or writes by address besides its input: the KV pools and
        this wave's state (the graphs of an earlier wave serve this one while these are the same)."""
        pools = [p for p in (getattr(self.target, "kv", None), getattr(self.proposer, "kv", None)) if p is not None]
        return [t for p in pools for t in (p.k, p.v, p.base, p.capacity)] + [doc] + self._written_state() \
            + ([self.trim] if self.ahead else [])

    def _written_state(self) -> list[torch.Tensor]:
        """What a step graph writes besides the KV rows: put back after a capture's warm-up runs."""
        ring = [] if self.ring is None else [t for t in (self.ring.hiddens, self.ring.mirror) if t is not None]
        return [self.last_hidden] + ring + ([self.book, self.hist_dev, self.row_key_dev] if self.ahead else [])

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

        # DRAFTER_PREFILL: context rows keys start-1 .. n_tok-2, i.e. (token k+1,
        # hidden k). OFF keeps the reference engine's behaviour: only a prefill that starts
        # at position 0 (the cold turn) prefills the drafter.
        if self.arm.drafter_prefill or t == 0:
            if self.arm.catchup:   # the ring's rows below key start-1 first: the prefill's rows would pass over them
                plan, lengths = {}, {}
                self._catchup(np.ones(B, dtype=bool), start, plan, lengths, step=-1)
                if plan:
                    self._feed_rows({k: self._t(v) for k, v in plan.items()}, lengths["catchup"])
            self._drafter_context(start, count, hid)

        self.last_hidden.copy_(hid[ar, last])     # in place: a captured step reads this buffer
        self.kv_len = self.n_tok.copy()
        if self.arm.ring_prefill:
            self._ring_prefill()
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

    def _drafter_context(self, start, count, hid) -> None:
        # Keys from start-1 (it pairs the pending token with the saved hidden),
        # never re-writing a key the drafter already holds. The dense space only
        # appends at slot == key (the reference engine refuses a feed that would leave a
        # hole), so a misaligned dense drafter is left as it is.
        drafter_rows, newest = self.proposer.drafter_rows(), self.proposer.last_pair_key()
        k0 = np.maximum(np.maximum(start - 1, newest + 1), 0)              # [B] each sequence's first key
        n = np.maximum(start + count - 1 - k0, 0)                           # keys k0 .. start+count-2
        if self.proposer.slot_is_key:
            n = np.where(drafter_rows == k0, n, 0)
        seq, j = ragged_runs(n)
        if not len(seq):
            return
        key = k0[seq] + j
        # hidden of position k: from this prefill, or the saved hidden of start-1
        rel = key - start[seq]
        from_saved = rel < 0
        hiddens = hid[self._t(seq), self._t(np.maximum(rel, 0))]
        if from_saved.any():
            hiddens[self._t(np.nonzero(from_saved)[0])] = self.last_hidden[self._t(seq[from_saved])]
        feed = RowFeed(seq=seq, key=key, token=self.history[seq, key + 1], label=np.full(len(seq), -1),
                       hiddens=hiddens)
        w = self.proposer.prefill_drafter(feed)
        if self.ev is not None and len(w) and w.hiddens is not None:
            self.ev.add("context", doc_id=self.doc_ids[w.seq], turn=self.turn, step=-1, seq=w.seq,
                        rows=w.hiddens, key=w.key, rope=w.rope, slot=w.slot)

    # ----------------------------------------------------------------- step
    def _step(self, active: np.ndarray) -> None:
        """Plan on the host, run on the device (one graph), commit after one read."""
        self.timer.start()
        n = self.kv_len.copy()                      # position of the last committed token
        plan, lengths, fed, rows_at_propose = self._plan(active, n)
        packed, read_layout, vh, serial = self._run(plan, lengths, active)
        self._flush()                               # the previous step's rows, while the device runs this one
        h = unpack_read(packed.cpu().numpy(), read_layout)   # the step's one device->host read
        record = self._after_read(h, vh, active, n, fed, rows_at_propose)
        self._pending = record + (self.timer.stop("serial" if serial else "verify"),)
        self._notify(h, record[1])

    def _after_read(self, h: StepRead, vh, active, n, fed, rows_at_propose, events: bool = True) -> tuple:
        """The host's half of a step once it has read it: the fingerprint events (`events` False:
        the run-ahead's chunk gives them, `_step_events_on_device`), the commit, the step counters.
        Returns the step's telemetry record (`_record`'s arguments, less the timing)."""
        if self.fp_in_step and events:
            self._pre_events(active, n, h.fp)
        written = self._commit(h, vh, n, active)
        if self.ev is not None and written is not None and events:
            self._ring_events(h.ring_label, written, vh, h.fp)
        act = np.nonzero(active)[0]
        record = (h, act, n, rows_at_propose, fed, self.step_no[act].copy(), self.turn)
        self.step_no[act] += 1
        self.trace.n_tokens += int(h.committed.sum())
        return record

    def _notify(self, h: StepRead, act) -> None:
        if self.on_step is not None:
            self.on_step(int(h.committed.sum()), np.where(h.gated[act], 0, self.K), h.acc[act])

    # ----------------------------------------------------- the run-ahead
    def _run_ahead(self) -> None:
        """A turn's steps, planned on the device and launched in chunks ahead of the host.

        The step's plan (positions, slots, what the turn still needs, the last token, the drafter's
        rows, the catch-up rows) is a function of state the step itself moves on: four numbers per
        sequence (`book`: n, tokens generated, drafter rows, last token) and, for CATCHUP, device
        copies of the committed tokens, the drafter rows' pair keys and the ring's labels. So the
        device plans step s+1 from step s without the host (`_ahead_step`). The host launches a
        chunk of steps back to back, as many as the turn looks set to need (`_chunk`), each with
        its read queued behind it, and replays each step as its read lands, while the device runs
        the next ones: its own plan, checked equal to the device's column by column, then the
        commit and the telemetry. A step launched after every sequence finished its turn is
        empty: it changes nothing and gives no row, but its time is charged to the chunk's steps.
        A catch-up wider than its fixed width (`cu_width`) halts the chunk: that step and the
        rest are empty, the host runs the step itself (`_step`) and the next chunk starts from
        its state. The rows are those of the step-by-step loop; a chunk's steps share its mean
        time."""
        self._load_book()
        while (self.gen < self.G).any():
            M = self._chunk(self.gen)
            self.timer.start()
            ready = self._launch(M)
            records, halted = self._replay(ready)
            self._emit(records, self.timer.stop("verify", max(len(records), 1)))
            if halted:
                self._step(self.gen < self.G)
                self._flush()
                self._load_book()

    def _load_book(self) -> None:
        """The device's state for planning := the host's (one copy each)."""
        B = self.B
        self.book.copy_(self._t(np.stack([self.kv_len, self.gen, self.proposer.drafter_rows(),
                                          self.history[np.arange(B), self.kv_len], np.zeros(B, dtype=np.int64)])))
        if self.arm.catchup:
            self.hist_dev[:, :-1].copy_(self._t(self.history))
            self.row_key_dev[:, :-1].copy_(self._t(self.proposer.row_key))
            self.ring.load_mirror()

    def _turn_key(self):
        """The turn, where a step graph bakes it in (sampled: the uniforms' keys hold it), else None."""
        return self.turn if self.verifier.sampled else None

    def _ahead_key(self) -> tuple:
        return ("ahead", self._turn_key())

    def _chunk(self, gen: np.ndarray) -> int:
        """Steps to launch: the most tokens a sequence has left over the fastest rate any sequence
        has committed at in this wave (tokens per step, K+1 before any was seen), so a chunk seldom
        outruns the turn (an empty step costs a whole step; a short chunk one more read). Random
        weights commit one token a step: the chunk is then exact. One step while the wave's first
        step or a first capture is warm-up (timing.py), so the warm-up is one step, as without."""
        if "verify" not in self.timer.seen or not self.steps.seen(self._ahead_key()):
            return 1
        seen = self._seen_steps > 0
        rate = (self._seen_tokens[seen] / self._seen_steps[seen]).max() if seen.any() else self.K + 1
        return int(np.ceil((self.G - gen.min()) / min(max(rate, 1.0), self.K + 1)))

    def _launch(self, M: int) -> list:
        """Device: M steps back to back, each step's read copied behind it into pinned host memory
        (`_host_reads` [G, B, X]); returns, per step, the event its read is complete at (None on
        the CPU, where the copy is done on return)."""
        state = self._written_state()
        cuda = self.device.type == "cuda"
        ready = []
        for m in range(M):
            out, self._read_layout, self._plan_layout = self.steps(self._ahead_key(), self._ahead_step, [self.book],
                                                                   self.full, self.full, state)
            if self._host_reads is None or self._host_reads.shape[2] != out.shape[1]:
                self._host_reads = torch.zeros((self.G, self.B, out.shape[1]), dtype=torch.long, pin_memory=cuda)
                self._read_width = layout_width(self._read_layout)
                self._plan_width = layout_width(self._plan_layout)
                if self.fp_dense:
                    self._event_kinds = self._event_kinds_of(self._read_layout, self._plan_layout)
            self._host_reads[m].copy_(out, non_blocking=cuda)
            ready.append(torch.cuda.Event() if cuda else None)
            if cuda:
                ready[-1].record()
        return ready

    def _ahead_step(self, book: torch.Tensor, length) -> tuple:
        """Device: plan the step from the book [5, B] (n, gen, drafter rows, last token, halted) and
        the CATCHUP copies, run it, and move them on; returns the packed read, the plan, whether the
        ring held the propose's label (laid-out FINGERPRINTS only) and the halt flag side by side
        [B, X] and the read's and the plan's layouts."""
        x, layout, a, s = self._plan_ahead(book, fuse=self.fuse)
        packed, read_layout, _ = self._device_step(x, layout, length, join=False, a=a)
        # the region returns the book rather than write it: the step's input is the book itself where
        # the step is not captured, and a compiled region must not write what it reads through a view
        self.book.copy_(self._book_ahead(packed, read_layout, s, fuse=self.fuse))
        if self.side is not None:
            self.side.join()          # the read's fingerprints, hashed beside the bookkeeping above
        return torch.cat([packed, x, *s["live"], s["halted"].expand(self.B)[:, None]], dim=1), read_layout, layout

    @fused
    def _plan_ahead(self, book: torch.Tensor) -> tuple:
        """Device: the step's plan from the book [5, B] and the CATCHUP copies (whose pair keys it
        books for the propose's and the fed rows); returns the packed plan [B, X], its layout, its
        arrays laid out for the step (`_laid_out`) and what `_book_ahead` reads (n, gen, rows after
        the catch-up, last, active, halted [B], and the FINGERPRINTS column of `_ahead_step`'s
        output)."""
        n, gen, rows, last, halted = book                                               # [B] each
        K, B = self.K, self.B
        ar = torch.arange(B, device=n.device)
        active = (gen < self.G) & (halted == 0)
        plan = {}
        if self.arm.catchup:        # the gap rows, as `_catchup` plans them (+ their fixed width)
            last_key = torch.where(rows > 0, self.row_key_dev[ar, (rows - 1).clamp(min=0)], -1)
            keys, live = gap_keys_on_device(self.ring.mirror, self.ring.capacity, self.arm.row_space, last_key,
                                            rows, n, active)
            over = (live.sum(dim=1) > self.cu_width).any()        # too wide: this step and the rest halt
            active = active & ~over
            halted = halted | over.long()
            plan, fed = self.proposer.feed_on_device(keys, live & active[:, None], rows, self.hist_dev,
                                                     self.cu_width)
            j = torch.arange(self.cu_width, device=n.device)[None, :]
            at = torch.where(j < fed[:, None], rows[:, None] + j, self.row_key_dev.shape[1] - 1)
            self.row_key_dev.scatter_(1, at, plan["cu_label"] - 1)                        # their pair keys
            rows = rows + fed
        pos = n[:, None] + torch.arange(K + 1, device=n.device)[None, :]                  # [B, K+1]
        plan = {"last_tok": last, "pos": pos, "vslot": torch.where(active[:, None], pos, -1),
                "left": torch.where(active, self.G - gen, 0), **plan}
        plan.update(self.proposer.plan_on_device(rows, n, active, K, self.arm.oracle_p2))
        x, layout = pack_on_device(**plan)
        if self.arm.catchup:
            i = torch.arange(K, device=n.device)[None, :]
            at = torch.where(active[:, None], rows[:, None] + i, self.row_key_dev.shape[1] - 1)
            self.row_key_dev.scatter_(1, at, n[:, None] - 1 + i)                          # the propose's rows
        # FINGERPRINTS: whether the ring holds the propose's label n before the step writes (`_pre_events`;
        # a column of the output only where the events are laid out from it)
        live = ([(self.ring.mirror[ar, n.remainder(self.ring.capacity)] == n).long()[:, None]
                 if self.ring is not None else torch.zeros_like(n)[:, None]] if self.fp_dense else [])
        return x, layout, self._laid_out(plan), {"n": n, "gen": gen, "rows": rows, "last": last, "active": active,
                                                 "halted": halted, "live": live}

    @fused
    def _book_ahead(self, packed: torch.Tensor, read_layout, s: dict) -> torch.Tensor:
        """Device: the next step's book [5, B] from this one's read (packed [B, X]) and `_plan_ahead`'s s:
        n and gen moved on by the committed tokens, the last committed token, the drafter's rows
        after the verify; CATCHUP: the committed tokens into the device's history."""
        K, B = self.K, self.B
        n, last = s["n"], s["last"]
        r = unpack_plan(packed, read_layout)
        c = r["committed"]                                                                # [B]
        kept = (c - 1).clamp(min=0)                                                       # [B] drafts kept
        last = torch.where(c > 0, r["target"].gather(1, kept[:, None])[:, 0], last)       # the last committed token
        if self.arm.catchup:
            d = torch.arange(K + 1, device=n.device)[None, :]
            at = torch.where(d < c[:, None], n[:, None] + 1 + d, self.hist_dev.shape[1] - 1)
            self.hist_dev.scatter_(1, at, r["target"])                                    # the committed tokens
        rows = self.proposer.rows_on_device(s["rows"], kept, s["active"], K, self.trim)
        return torch.stack([n + c, s["gen"] + c, rows, last, s["halted"].expand(B)])

    def _replay(self, ready: list) -> tuple[list, bool]:
        """Host: a chunk's steps as the step-by-step loop books them, each as soon as its read has
        landed (`ready`: `_launch`'s events): its own plan (checked against the one the device
        made), the commit, the fingerprint events. Returns the steps' telemetry records and
        whether the chunk halted (the rest of its steps are empty)."""
        records = []
        Xr, Xp = self._read_width, self._plan_width
        for m, event in enumerate(ready):
            active = self.gen < self.G
            if not active.any():                      # launched past the turn's end: an empty step
                continue
            if event is not None:
                event.synchronize()
            read = self._host_reads[m].numpy().copy()     # [B, X]; the next chunk reuses the buffer
            if read[0, -1]:                            # a catch-up too wide for the run-ahead: halted
                if ready[-1] is not None:
                    ready[-1].synchronize()
                return records, True
            n = self.kv_len.copy()
            plan, lengths, fed, rows_at_propose = self._plan(active, n)
            x, layout = pack_plan(**plan)
            diff = ("layout", 0) if layout != self._plan_layout else first_difference(x, read[:, Xr:Xr + Xp], layout)
            if diff is not None:
                raise RuntimeError(f"run-ahead: turn {self.turn}, step {int(self.step_no[diff[1]])} of sequence "
                                   f"{diff[1]}: the device planned {diff[0]} differently from the host")
            h = unpack_read(read[:, :Xr], self._read_layout)
            self._seen_tokens += h.committed
            self._seen_steps += h.committed > 0
            records.append(self._after_read(h, None, active, n, fed, rows_at_propose, events=not self.fp_dense))
            self._notify(h, records[-1][1])
        if ready and ready[-1] is not None:
            ready[-1].synchronize()                   # the chunk's time holds its empty steps too
        return records, False

    def _emit(self, records: list, timing) -> None:
        """A replayed chunk's telemetry: its fingerprint events, then its rows."""
        self._flush()
        if self.fp_dense and records:
            self._step_events_on_device(records)
        for record in records:
            self._record(*record, timing)

    def _step_events_on_device(self, records: list) -> None:
        """FINGERPRINTS of a replayed chunk: its steps' feed, propose and ring-write events, as
        `_step_events` and `_ring_write_events` record them, handed to the log as the steps' own
        outputs, laid out on the device when the table is made (`_event_kinds_of`). The outputs go
        back to the device in one copy from the chunk's reads (a copy of each step's output on the
        device would cost the host a call a step); the next chunk's reads queue behind it."""
        M = len(records)
        step = np.full((M, self.B), -1, dtype=np.int64)
        for i, record in enumerate(records):
            step[i, record[1]] = record[5]
        reads = self._host_reads[:M]                                               # [M, B, X] pinned
        outs = reads.to(self.device, non_blocking=True) if self.device.type == "cuda" else reads.clone()
        self.ev.add_steps(self.turn, self.doc_ids, step, outs, self._event_kinds)

    def _event_kinds_of(self, read_layout, plan_layout) -> tuple:
        """Where a run-ahead step's events sit in its output row (the read, the plan, whether the
        ring held the propose's label, the halt flag), in a step's order: the catch-up rows fed,
        the propose, the ring writes, as `_step_events` and `_ring_write_events` record them."""
        r, p = layout_columns(read_layout), layout_columns(plan_layout, layout_width(read_layout))
        live = layout_width(read_layout) + layout_width(plan_layout)
        K1, fp = self.K + 1, r["fp"]
        kinds = []
        if "cu_slot" in p:                # the catch-up rows fed (slot -1: padding)
            W = len(p["cu_slot"])
            kinds.append(StepEvents.of("feed", p["cu_slot"], -1, label=p["cu_label"], key=(p["cu_label"], -1),
                                       rope=p["cu_rope"], slot=p["cu_slot"], fp=fp[2:2 + W]))
        kinds.append(StepEvents.of("propose", p["left"], 0, position=p["pos"][:1], fp=fp[:1], fp2=fp[1:2],
                                   fp2_valid=[live]))
        if "ring_label" in r:
            kinds.append(StepEvents.of("ring_write", r["ring_label"], -1, label=r["ring_label"], fp=fp[-2 * K1:-K1],
                                       fp2=fp[-K1:], fp2_valid=1))
        return tuple(kinds)

    def _plan(self, active: np.ndarray, n: np.ndarray):
        """Host: the step's int64 arrays (the verify of [t_n, d1..dK] at positions n..n+K, what the
        turn still needs, the catch-up rows, the drafts' slots) and KV read lengths. The catch-up
        rows at `cu_width` (captured steps; a wider gap takes its bucket)."""
        B, K = self.B, self.K
        pos = n[:, None] + np.arange(K + 1)[None, :]
        plan = {"last_tok": self.history[np.arange(B), n], "pos": pos, "vslot": np.where(active[:, None], pos, -1),
                "left": np.where(active, self.G - self.gen, 0)}
        lengths = {"verify": int(n[active].max()) + K + 1}
        if self.tree is not None:                   # TREE: every node, positions by depth, slots by node id
            pos = n[:, None] + self.tree.depth[None, :]                                   # [B, N+1]
            plan.update(pos=pos, vslot=np.where(active[:, None], n[:, None] + np.arange(self.tree.n_nodes + 1), -1))
            lengths["verify"] = int(n[active].max()) + self.tree.n_nodes + 1
        self._feed_plan = None
        fed = self._catchup(active, n, plan, lengths, width=self.cu_width) if self.arm.catchup \
            else np.zeros(B, dtype=np.int64)
        rows_at_propose = self.proposer.drafter_rows()
        if self.ev is not None and not self.fp_in_step:
            self._pre_events(active, n)
        propose = self.proposer.plan_propose_tree(n, self.tree, active) if self.tree is not None else \
            self.proposer.plan_propose(self.history, n, K, active, static=self.steps.graphs)
        for part in (propose,
                     self.proposer.plan_oracle(n, active) if self.arm.oracle_p2 else ({}, {})):
            plan.update(part[0])
            lengths.update(part[1])
        return plan, lengths, fed, rows_at_propose

    def _run(self, plan: dict, lengths: dict, active: np.ndarray):
        """Device: the planned step, one graph per shape (two for DRAFT_CONF). Returns the packed
        read, its layout, the verify's hiddens and whether the step decoded serially."""
        x, layout = pack_plan(**plan)
        x = self._t(x)                              # the step's one host->device copy
        key = (layout, self._turn_key())
        state = self._written_state()
        if self.arm.draft_conf <= 0:
            step = functools.partial(self._device_step, layout=layout)
            return (*self.steps(("step",) + key, step, [x], lengths, self.full, state), False)
        # DRAFT_CONF: a chain below tau is dropped; when all are, the step decodes serially,
        # which is the host's decision: propose and verify are two graphs with a read between.
        propose = functools.partial(self._propose, layout=layout)
        prop, gated, fp = self.steps(("propose",) + key, propose, [x], lengths, self.full, state)
        serial = self._all_gated(gated, active)
        verify = functools.partial(self._verify, layout=layout, prop=prop, gated=gated, all_gated=serial, fp=fp)
        return (*self.steps(("verify", serial) + key, verify, [x], lengths, self.full, state), serial)

    def _flush(self) -> None:
        """The last step's telemetry: its fingerprint events hashed in the step, then its rows."""
        for record in self._later:
            record()
        self._later.clear()
        if self._pending is not None:
            self._record(*self._pending)
            self._pending = None

    def _commit(self, h: StepRead, vh: torch.Tensor, n: np.ndarray, active: np.ndarray):
        """The host half of the commit: accepted drafts + the target's token after them, cut at the
        turn's G tokens, into the history; the ring's and the drafter's bookkeeping. Returns the
        ring writes booked (`_book_ring`), None without a ring."""
        c = h.committed
        rows, cols = np.nonzero(np.arange(self.K + 1)[None, :] < c[:, None])
        self.history[rows, n[rows] + 1 + cols] = h.target[rows, cols]
        a_eff = np.maximum(c - 1, 0)           # accepted drafts the trajectory kept
        self.kv_len = np.where(active, n + c, self.kv_len)
        self.n_tok = np.where(active, self.n_tok + c, self.n_tok)
        self.gen += c
        written = self._book_ring(h.ring_label) if self.ring is not None else None
        if self.tree is not None:                  # the path booked as a linear propose (cut at the turn's end)
            last = h.tree_path[np.arange(self.B), a_eff]
            self.proposer.after_verify_tree(a_eff, last, self.tree, active)
            return written
        # dropped (gated) drafts were never verified: their rows go as rejected ones do
        self.proposer.after_verify(np.where(h.gated, 0, a_eff), active)
        return written

    # ------------------------------------------------- the device step
    def _device_step(self, x, layout, length, join: bool = True, a: dict | None = None):
        """The whole step on the device, static shapes: x [B, X] the packed plan (a: its arrays laid
        out, `_plan_arrays`, where the caller has them). join False: the read's fingerprints are
        still being hashed beside the path (the caller joins `self.side`)."""
        a = self._plan_arrays(x, layout, fuse=self.fuse) if a is None else a
        prop, gated, fp = self._propose(x, layout, length, join=False, a=a)
        return self._verify(x, layout, prop, gated, False, length, fp, join=join, a=a)

    def _laid_out(self, a: dict) -> dict:
        """The plan's arrays as the step's forwards read them, so that none of them copies one:
        each contiguous, and the drafter's per-depth arrays (its `per_depth`) with the batch
        innermost, so a depth's column is one contiguous [B] (views of the packed plan were six
        copy kernels a step at K=2 on the GPU: bench/RESULTS.md, ninth session)."""
        cols = getattr(self.proposer, "per_depth", ())
        return {k: v.t().contiguous().t() if k in cols else v.contiguous() for k, v in a.items()}

    @fused
    def _plan_arrays(self, x: torch.Tensor, layout) -> dict:
        """Device: the packed plan x [B, X] by name (`unpack_plan`), laid out (`_laid_out`)."""
        return self._laid_out(unpack_plan(x, layout))

    def _propose(self, x, layout, length, join: bool = True, a: dict | None = None):
        """Catch-up rows, then K drafts; returns the Proposal, DRAFT_CONF's gate [B] bool and
        (FINGERPRINTS at static shapes) the fingerprints [B, 2+W] of the propose's hidden, the
        ring's row of its label and each fed row, hashed beside the drafter (`self.side`; join
        False: not joined yet, `_verify` joins before it writes what they read)."""
        a = self._plan_arrays(x, layout, fuse=self.fuse) if a is None else a
        n = a["pos"][:, 0]
        fed = self._feed_rows(a, length["catchup"]) if "cu_tok" in a else None
        fp = None
        if self.fp_in_step:
            with self.side.fork(n, fed):
                ar = torch.arange(self.B, device=x.device)
                ring_row = self.ring.hiddens[ar, n.remainder(self.ring.capacity)] if self.ring is not None \
                    else self.last_hidden
                fp = self.ev.fingerprint_rows(torch.cat([self.last_hidden[:, None], ring_row[:, None]]
                                                        + ([fed] if fed is not None else []), dim=1))  # [B, 2+W]
            if join:
                self.side.join()
        if self.tree is not None:                  # TREE: the nodes' drafts (node 0: t_n), conf per node
            nodes, conf = self.proposer.draft_tree(a, a["last_tok"], self.last_hidden, self.tree, length)
            return Proposal(drafts=nodes[:, 1:], conf=conf, topk_ids=None, topk_probs=None), \
                torch.zeros(self.B, dtype=torch.bool, device=x.device), fp
        draws = self.verifier.draws(self.target, self.turn, n)
        prop = self.proposer.draft(a, a["last_tok"], self.last_hidden, self.K, self.arm.shadow_topk, draws, length)
        tau = self.arm.draft_conf
        gated = prop.chain_conf < tau if tau > 0 else torch.zeros(self.B, dtype=torch.bool, device=x.device)
        return prop, gated, fp

    def _feed_rows(self, a: dict, length: int) -> torch.Tensor:
        """Device: the planned catch-up rows (`_catchup`: cu_* [B, W]), their hiddens read from the
        ring; returns those hiddens [B, W, H]."""
        hid = self.ring.hiddens[torch.arange(self.B, device=self.device)[:, None],
                                a["cu_label"].remainder(self.ring.capacity)]          # [B, W, H]
        self.proposer.write_rows(a["cu_tok"], hid, a["cu_rope"], a["cu_slot"], length)
        return hid

    def _verify(self, x, layout, prop, gated, all_gated: bool, length, fp=None, join: bool = True,
                a: dict | None = None):
        """Verify and accept, then the device half of the commit (the next propose's hidden, the
        ring writes); returns the packed read, its layout and the verify's hiddens [B, K+1, H].
        FINGERPRINTS at static shapes (fp: `_propose`'s [B, 2+W]): the read's fp columns are the
        propose's and, with a ring, the verify's rows and the ring's rows after the write, hashed
        beside the path into the packed read (join False: the caller joins `self.side`)."""
        a = self._plan_arrays(x, layout, fuse=self.fuse) if a is None else a
        vtok = torch.cat([a["last_tok"][:, None], prop.drafts], dim=1)               # [B, K+1] (a tree: [B, N+1])
        path = None
        if self.tree is not None:                  # TREE: verified, walked, compacted; then read as a linear step
            v, prop, path = self._verify_tree(prop, vtok, a, length["verify"])
        else:
            v = self.verifier.verify(self.target, prop, vtok, a["pos"], a["vslot"], length["verify"], gated,
                                     all_gated, self.turn)
        if self.side is not None:
            self.side.join()               # the propose's rows are hashed: last_hidden and the ring may move on
        c, label, take, ring_label = self._accept_on_device(a["left"], a["pos"][:, 0], v.accepted, v.vh, gated,
                                                            fuse=self.fuse)
        ring = self.ring is not None
        slot = self.ring.write_masked(label, take, v.vh) if ring else None
        # the read's fp columns [B, S], filled beside the path once the read is packed (below)
        late = None if fp is None else torch.empty((self.B, fp.shape[1] + 2 * (self.K + 1) * ring),
                                                   dtype=torch.long, device=x.device)
        oracle = self._oracle(prop, v, a, length) if self.arm.oracle_p2 else None
        packed, read_layout = pack_read(fuse=self.fuse, acc=v.accepted, gated=gated, drafts=prop.drafts,
                                        target=v.tokens, conf=prop.conf, committed=c, ring_label=ring_label,
                                        oracle=oracle, topk_ids=prop.topk_ids, topk_probs=prop.topk_probs,
                                        accept_prob=v.accept_prob, alpha1=v.alpha1, pit=v.pit, fp=late,
                                        tree_path=path)
        if fp is not None:
            cols = layout_columns(read_layout)["fp"]
            ar = torch.arange(self.B, device=x.device)
            with self.side.fork(fp, packed, v.vh, ar, slot):
                if ring:                   # the rows written and the ring's rows after the write
                    after = self.ring.hiddens[ar[:, None], slot]                         # [B, K+1, H]
                    fp = torch.cat([fp, self.ev.fingerprint_rows(torch.cat([v.vh, after], dim=1))], dim=1)
                packed[:, cols[0]:cols[-1] + 1].copy_(fp)
            if join:
                self.side.join()
        return packed, read_layout, v.vh

    def _verify_tree(self, prop, nodes, a: dict, length: int):
        """Device, TREE: the tree's verify (`tree_step.verify_tree`: every node under the tree mask,
        the greedy walk, both KVs compacted), returned as a K-chain's: the Verified along the
        accepted path continued by rank-0 children (`tree_accept.linear_view`: [B, K+1] tokens and
        hiddens, K the tree's depth), the Proposal of its drafts and confidences ([B, K]; -1 and 0
        where the tree has no rank-0 child) and the accepted path [B, K+1]."""
        s = verify_tree(self.target, self.proposer, self.tree, self.tt, nodes, a["pos"], a["vslot"], length)
        conf = torch.cat([torch.ones_like(prop.conf[:, :1]), prop.conf], dim=1)          # [B, N+1] (root: 1)
        lin = Proposal(drafts=as_linear(s.view, nodes, fill=-1)[:, 1:], conf=as_linear(s.view, conf, fill=0.0)[:, 1:],
                       topk_ids=None, topk_probs=None)
        return Verified(vh=s.vh, tokens=s.tokens, accepted=s.accepted), lin, s.path

    def _record(self, h: StepRead, act, n, rows_at_propose, fed, step_no, turn, timing) -> None:
        """A step's telemetry rows (active sequences)."""
        step_ms, warmup_ms = timing
        c = h.committed
        k = np.where(h.gated[act], 0, self.K)
        extra = {}
        if h.oracle is not None:
            extra["oracle"] = h.oracle[act]
        if h.topk_ids is not None:
            extra["topk_ids"], extra["topk_probs"] = h.topk_ids[act], h.topk_probs[act]
        if h.tree_path is not None:
            extra["tree_path"], extra["tree_nodes"] = h.tree_path[act], np.full(len(act), self.tree.n_nodes)
        if h.pit is not None:
            extra.update(accept_prob=h.accept_prob[act], alpha1=h.alpha1[act], pit=h.pit[act])
            self.trace.pit.append(h.pit[act][np.arange(self.K + 1)[None, :] < c[act][:, None]])
        self.trace.steps.add(
            doc_id=self.doc_ids[act], turn=np.full(len(act), turn), step=step_no, k=k,
            accept_len=h.acc[act], arm=[self.arm.name], seq=act, position=n[act], drafts=h.drafts[act],
            target=h.target[act], conf=h.conf[act], gated=h.gated[act], n_committed=c[act],
            step_ms=np.full(len(act), step_ms), warmup_ms=np.full(len(act), warmup_ms),
            drafter_rows=rows_at_propose[act], fed_rows=fed[act], **extra)

    # ------------------------------------------------------------- levers
    def _all_gated(self, gated: torch.Tensor, active: np.ndarray) -> bool:
        """DRAFT_CONF's decision, read before the verify: when every active sequence dropped its
        drafts, the step is a one-token decode, which is what gating saves. The read is the one
        the engine's confidence path pays too (the reference engine's `last_confidence`: a D2H per propose);
        arms with DRAFT_CONF off never make it (the loop's one read per step stands)."""
        return bool(gated.cpu().numpy()[active].all())

    def _catchup(self, active, n, plan: dict, lengths: dict, step=None, width: int | None = None) -> np.ndarray:
        """CATCHUP: plan the gap rows between the drafter's newest row and this propose, fed
        from the ring (target hiddens) on the device before the drafts; or, `step` -1, before a
        turn's drafter prefill, whose first key is n-1. width: the rows' fixed width, planned
        even when there are none (captured steps), unless a sequence's gap is wider: then the
        rows' bucket (a run-ahead halts on such a step and the host runs it). Returns rows fed
        per sequence."""
        seq, key = gap_keys(self.ring, self.arm.row_space, self.proposer.last_pair_key(),
                            self.proposer.drafter_rows(), n, active)
        fed = np.zeros(self.B, dtype=np.int64)
        if width is not None and len(seq) and np.bincount(seq).max() > width:
            width = None
        if len(key) == 0:
            if width is not None:
                z = np.zeros((self.B, width), dtype=np.int64)
                plan.update(cu_tok=z, cu_slot=z - 1, cu_rope=z, cu_label=z)
            return fed
        labels = key + 1                          # pair key k reads ring label k+1
        feed = RowFeed(seq=seq, key=key, token=self.history[seq, key + 1], label=labels, hiddens=None)
        w, rows = self.proposer.plan_rows(feed, static=self.steps.graphs, width=width)
        if rows is None:
            return fed
        plan.update(cu_tok=rows["tok"], cu_slot=rows["slot"], cu_rope=rows["rope"], cu_label=rows["label"])
        lengths["catchup"] = int(rows["slot"].max()) + 1
        np.add.at(fed, w.seq, 1)
        self._feed_plan = (w, rows["j"])
        if self.ev is not None and len(w) and (step is not None or not self.fp_in_step):   # rows as they are now
            self.ev.add("feed", doc_id=self.doc_ids[w.seq], turn=self.turn,
                        step=self.step_no[w.seq] if step is None else np.full(len(w), step),
                        seq=w.seq, rows=self.ring.read(w.seq, w.label), label=w.label, key=w.key, rope=w.rope,
                        slot=w.slot)
        return fed

    @fused
    def _accept_on_device(self, left, n, accepted, vh, gated) -> tuple:
        """Device: the commit's device half from the verify (left, n, accepted, gated [B]; vh
        [B, K+1, H]): the tokens committed [B] (`commit_counts`), the next propose's hidden (the
        last kept position's, into last_hidden) and, with a ring, the label each depth's hidden
        goes to, whether it goes, and the label as read (-1 where not) ([B, K+1] each: `_ring_take`;
        None without a ring). The ring's write itself is outside (`Ring.write_masked`)."""
        active = left > 0
        c = commit_counts(accepted, left)                                              # [B]
        a_eff = (c - 1).clamp(min=0)                                                   # [B] drafts kept
        ar = torch.arange(self.B, device=vh.device)
        self.last_hidden.copy_(torch.where(active[:, None], vh[ar, a_eff], self.last_hidden))
        if self.ring is None:
            return c, None, None, None
        label, take = self._ring_take(active, n, a_eff, gated)
        return c, label, take, torch.where(take, label, -1)

    def _ring_take(self, active, n, a_eff, gated) -> tuple:
        """Device: the ring's writes after a verify. Serial (gated) steps ring their one hidden
        (CATCHUP); with REFEED every accepted position's true hidden is ringed,
        0..=accepted, the last being the next propose's own target hidden.
        SHIFT moves every re-fed label by s (mapping validation). All tensors [B]; returns the
        label of each depth's hidden and whether it is written, [B, K+1] each."""
        j = torch.arange(self.K + 1, device=n.device)[None, :]
        serial = active & gated                                  # a serial step: ring its hidden (CATCHUP)
        refed = active & ~gated & self.arm.refeed                # REFEED: every accepted position, 0..=accepted
        take = (serial[:, None] & (j == 0)) | (refed[:, None] & (j <= a_eff[:, None]))
        label = n[:, None] + 1 + j + refed[:, None].long() * self.arm.refeed_shift
        return label, take & (label >= 0)

    def _book_ring(self, ring_label: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Host: book the labels the step wrote (ring_label [B, K+1], -1: none); returns where they
        are in ring_label (seq, j)."""
        seq, j = np.nonzero(ring_label >= 0)
        if len(seq):
            self.ring.book(seq, ring_label[seq, j])
        return seq, j

    def _ring_events(self, ring_label: np.ndarray, written: tuple, vh: torch.Tensor, fp=None) -> None:
        """The ring writes' fingerprint events (written: `_book_ring`'s (seq, j); fp [B, S]: the
        step's fingerprints, hashed in it; None: the rows snapshotted now, before the next step
        writes the ring)."""
        seq, j = written
        if len(seq) == 0:
            return
        if fp is not None:       # recorded while the device runs the next step
            self._later.append(functools.partial(self._ring_write_events, seq, j, ring_label, fp,
                                                 self.step_no.copy(), self.turn))
        else:
            src, dst = self._t(np.stack([seq, j])), self.ring.index(seq, ring_label[seq, j])
            self.ev.add("ring_write", doc_id=self.doc_ids[seq], turn=self.turn, step=self.step_no[seq],
                        seq=seq, rows=vh[src[0], src[1]], rows2=self.ring.hiddens[dst[0], dst[1]],
                        label=ring_label[seq, j])

    def _ring_write_events(self, seq, j, ring_label, fp, step_no, turn) -> None:
        """The ring writes' events of a step, from their fingerprints hashed in it (fp [B, S]: the
        written rows, then the ring's rows after the writes, in its last 2(K+1) columns)."""
        fp = fp[:, -2 * (self.K + 1):]
        self.ev.add("ring_write", doc_id=self.doc_ids[seq], turn=turn, step=step_no[seq], seq=seq, fp=fp[seq, j],
                    fp2=fp[seq, self.K + 1 + j], label=ring_label[seq, j])

    def _ring_prefill(self) -> None:
        """RING_PREFILL: ring the prefill's last hidden (position P-1, P = the turn's first
        generated position) under its label P. The turn's first propose pairs it with
        key P-1 (row 0); when that propose is rejected outright, the compact row space
        trims the row, and without this write no ring label could rebuild it."""
        seq = np.arange(self.B)
        label = self.kv_len.copy()                # label n holds the hidden of position n-1
        rows = self.last_hidden[self._t(seq)]     # a gather: last_hidden changes in place later
        dst = self.ring.write(seq, label, rows)
        if self.ev is not None:
            self.ev.add("ring_write", doc_id=self.doc_ids, turn=self.turn, step=-1, seq=seq, rows=rows,
                        rows2=self.ring.hiddens[dst[0], dst[1]], label=label)

    def _oracle(self, prop, v, plan, length):
        """ORACLE_P2: when draft 1 is accepted, would draft 2 from the target's
        true hidden of position n have hit? Null (-1) otherwise."""
        o2 = self.proposer.oracle_draft2(prop.drafts[:, 0], v.vh[:, 0], plan, length)
        return torch.where(v.accepted >= 1, (o2 == v.tokens[:, 1]).long(), -1)

    def _pre_events(self, active, n, fp=None) -> None:
        """The step's catch-up feed and propose events: their rows gathered now, before the step
        moves them on, or (fp [B, S]) their fingerprints hashed in the step (columns 0-1 the
        propose's rows, 2.. the fed ones)."""
        act = np.nonzero(active)[0]
        live = self.ring.live(act, n[act]) if self.ring is not None else np.zeros(len(act), bool)
        if fp is not None:       # the ring's state is read now; the events are recorded during the next step
            self._later.append(functools.partial(self._step_events, act, n, live, fp, self._feed_plan,
                                                 self.step_no.copy(), self.turn))
            return
        meta = dict(doc_id=self.doc_ids[act], turn=self.turn, step=self.step_no[act], seq=act, fp2_valid=live,
                    position=n[act])
        if self.ring is not None:
            idx = self.ring.index(act, n[act])          # one copy serves both gathers
            rows, ring_rows = self.last_hidden[idx[0]], self.ring.hiddens[idx[0], idx[1]]
        else:
            rows = self.last_hidden[self._t(act)]
            ring_rows = torch.zeros_like(rows)
        self.ev.add("propose", rows=rows, rows2=ring_rows, **meta)

    def _step_events(self, act, n, live, fp, feed_plan, step_no, turn) -> None:
        """A step's catch-up feed and propose events from their fingerprints hashed in it (fp [B, S]:
        columns 0-1 the propose's rows, 2.. the fed ones)."""
        if feed_plan is not None and len(feed_plan[0]):
            w, j = feed_plan
            self.ev.add("feed", doc_id=self.doc_ids[w.seq], turn=turn, step=step_no[w.seq], seq=w.seq,
                        fp=fp[w.seq, 2 + j], label=w.label, key=w.key, rope=w.rope, slot=w.slot)
        self.ev.add("propose", doc_id=self.doc_ids[act], turn=turn, step=step_no[act], seq=act, fp2_valid=live,
                    position=n[act], fp=fp[act, 0], fp2=fp[act, 1])

