"""A turn's steps run ahead of the host: the device plans each step itself and books it.

The step's plan (positions, slots, what the turn still needs, the last token, the drafter's rows,
the catch-up rows) is a function of state the step itself moves on: five numbers per sequence (the
`book`: n, tokens generated, drafter rows, last token, halted) and, for CATCHUP, device copies of
the committed tokens (`hist_dev`), the drafter rows' pair keys (`row_key_dev`) and the ring's
labels (`Ring.mirror`). So the device plans step s+1 from step s without the host (`plan`, then
the step, then `next_book`). The host launches a chunk of steps back to back, as many as the turn
looks set to need (`chunk`), each with its read queued behind it (`launch`), and books each step
as its read lands while the device runs the next ones (`book_chunk`): the host plans the step
itself, checks its plan equal to the device's column by column (a difference raises: the two
halves of the loop disagree), then commits it. A step launched after every sequence finished its
turn is empty: it changes nothing and gives no row, but its time is charged to the chunk's steps.
A catch-up wider than its fixed width halts the chunk: that step and the rest are empty, the host
runs that step itself and the next chunk starts from its state. The rows are those of the
step-by-step loop; a chunk's steps share its mean time.

Only at static shapes ("graphs"), with a proposer that plans on the device (proposers/capabilities.py's
DevicePlanner), and without DRAFT_CONF (its gate is read by the host between the propose and the
verify): `runs_ahead`.

Shapes: B sequences, K drafts, G tokens a turn, W catch-up rows (`cu_width`), X a packed row's
columns (step.py's vocabulary).
"""
from __future__ import annotations

import functools

import numpy as np
import torch

from atlas_ab.config.structured import ArmConfig
from atlas_ab.proposers.capabilities import plans_on_device
from atlas_ab.proposers.ring import gap_keys_on_device
from atlas_ab.runtime.fusion import fused
from atlas_ab.speculative.host_io import first_difference, layout_width, pack_on_device, unpack_plan, unpack_read
from atlas_ab.speculative.turn_requests import rebuilds


def runs_ahead(arm: ArmConfig, graphs: bool, proposer) -> bool:
    """Whether a wave can run ahead of the host: static shapes, a proposer that plans on the device,
    no DRAFT_CONF and no TREE (its propose books one row per internal node, which the device plan
    does not do yet: a tree step waits for the host's plan), and no fresh drafter prefilled over whole
    prompts (PREFIX_REUSE + DRAFTER_PREFILL: the host keeps each commit's hiddens, which a run-ahead
    does not read back)."""
    return graphs and arm.draft_conf <= 0 and arm.tree is None and plans_on_device(proposer) and not rebuilds(arm)


class RunAhead:
    """The device's plan and book of a wave's steps. step: the wave's `DeviceStep`; graphs: its
    `StepGraphs`; bufs: the `StaticBuffers` the step graphs read; history_width, row_key_width:
    the host's committed tokens' and the drafter's pair keys' widths; cu_width: CATCHUP's rows'
    fixed width (None without CATCHUP)."""

    def __init__(self, step, graphs, bufs, G: int, history_width: int, row_key_width: int, cu_width):
        self.step, self.graphs, self.G, self.cu_width = step, graphs, G, cu_width
        self.proposer, self.arm, self.ring = step.proposer, step.arm, step.ring
        B, K, device = step.B, step.K, step.last_hidden.device
        self.B, self.K = B, K
        self.book = bufs.get("book", (5, B), torch.long, device)          # [5, B] n, gen, rows, last, halted
        # CATCHUP: the device's copies of the committed tokens and the drafter rows' pair keys
        # (+1 column each: a dump for masked writes)
        self.hist_dev = bufs.get("history", (B, history_width + 1), torch.long, device)       # [B, L+1]
        self.row_key_dev = bufs.get("row_key", (B, row_key_width + 1), torch.long, device)    # [B, rows+1]
        self.trim = bufs.get("trim", (K + 1,), torch.long, device).copy_(
            torch.as_tensor(self.proposer.trim_table(K), device=device))                     # [K+1]
        self.host_reads = None                                      # [G, B, X] pinned: a chunk's reads
        self.read_layout = self.plan_layout = None
        self.seen_tokens = np.zeros(B, dtype=np.int64)              # committed tokens and steps
        self.seen_steps = np.zeros(B, dtype=np.int64)               # per sequence, from the reads

    def state(self) -> list[torch.Tensor]:
        """What its steps write besides the step's own state (the KV rows, last_hidden, the ring)."""
        return [self.book, self.hist_dev, self.row_key_dev]

    def load(self, n: np.ndarray, gen: np.ndarray, rows: np.ndarray, history: np.ndarray, row_key: np.ndarray) -> None:
        """The device's state for planning := the host's (one copy each): n, gen and the drafter's rows
        [B], the committed tokens [B, L+1] (the last one at n); CATCHUP: the rows' pair keys."""
        dev, last = self.book.device, history[np.arange(self.B), n]
        self.book.copy_(torch.as_tensor(np.stack([n, gen, rows, last, np.zeros(self.B, dtype=np.int64)]), device=dev))
        if self.arm.catchup:
            self.hist_dev[:, :-1].copy_(torch.as_tensor(history, device=dev))
            self.row_key_dev[:, :-1].copy_(torch.as_tensor(row_key, device=dev))
            self.ring.load_mirror()

    @staticmethod
    def key(turn_key) -> tuple:
        """The run-ahead step's graph key (turn_key: the turn where a graph bakes it in, else None)."""
        return ("ahead", turn_key)

    def chunk(self, gen: np.ndarray, warm: bool, turn_key) -> int:
        """Steps to launch: the most tokens a sequence has left over the fastest rate any sequence
        has committed at in this wave (tokens per step, K+1 before any was seen), so a chunk seldom
        outruns the turn (an empty step costs a whole step; a short chunk one more read). Random
        weights commit one token a step: the chunk is then exact. One step while the wave's first
        step (warm False) or a first capture is warm-up (timing.py), so the warm-up is one step."""
        if not warm or not self.graphs.seen(self.key(turn_key)):
            return 1
        seen = self.seen_steps > 0
        rate = (self.seen_tokens[seen] / self.seen_steps[seen]).max() if seen.any() else self.K + 1
        return int(np.ceil((self.G - gen.min()) / min(max(rate, 1.0), self.K + 1)))

    def launch(self, M: int, turn: int, turn_key, full, state: list) -> list:
        """M steps back to back, each step's read copied behind it into pinned host memory
        (`host_reads` [G, B, X]); returns, per step, the event its read is complete at (None on
        the CPU, where the copy is done on return). full: the KV pools' full lengths; state: what
        the step graph writes (put back after a capture's warm-up)."""
        cuda = self.book.device.type == "cuda"
        step = functools.partial(self.ahead_step, turn=turn)
        ready = []
        for m in range(M):
            out, self.read_layout, self.plan_layout = self.graphs(self.key(turn_key), step, [self.book],
                                                                  full, full, state)      # [B, X]
            if self.host_reads is None or self.host_reads.shape[2] != out.shape[1]:
                self.host_reads = torch.zeros((self.G, self.B, out.shape[1]), dtype=torch.long, pin_memory=cuda)
            self.host_reads[m].copy_(out, non_blocking=cuda)
            ready.append(torch.cuda.Event() if cuda else None)
            if cuda:
                ready[-1].record()
        return ready

    def ahead_step(self, book: torch.Tensor, length, turn: int) -> tuple:
        """The run-ahead step: plan it from the book [5, B] and the CATCHUP copies, run it, and move
        them on; returns the packed read, the plan, the probe's columns (`StepProbe.ahead_columns`)
        and the halt flag side by side [B, X] and the read's and the plan's layouts."""
        fuse = self.step.fuse
        x, layout, a, s = self.plan(book, fuse=fuse)
        packed, read_layout, _ = self.step.run(x, layout, length, turn, a=a)
        # the region returns the book rather than write it: the step's input is the book itself where
        # the step is not captured, and a compiled region must not write what it reads through a view
        self.book.copy_(self.next_book(packed, read_layout, s, fuse=fuse))
        self.step.probe.join()        # the probe's side work ran beside the bookkeeping above
        return torch.cat([packed, x, *s["probe"], s["halted"].expand(self.B)[:, None]], dim=1), read_layout, layout

    @fused
    def plan(self, book: torch.Tensor) -> tuple:
        """The step's plan from the book [5, B] and the CATCHUP copies (whose pair keys it books for
        the propose's and the fed rows); returns the packed plan [B, X], its layout, its arrays
        laid out for the step (`DeviceStep.laid_out`) and what `next_book` reads (n, gen, rows
        after the catch-up, last, active, halted [B], and the probe's columns of `ahead_step`'s
        output)."""
        n, gen, rows, last, halted = book                                               # [B] each
        K, B = self.K, self.B
        ar = torch.arange(B, device=n.device)                                           # [B]
        active = (gen < self.G) & (halted == 0)                                         # [B]
        plan = {}
        if self.arm.catchup:        # the gap rows as the host plans them (lever_rows.catchup_rows), fixed width
            last_key = torch.where(rows > 0, self.row_key_dev[ar, (rows - 1).clamp(min=0)], -1)          # [B]
            keys, live = gap_keys_on_device(self.ring.mirror, self.ring.capacity, self.arm.row_space, last_key,
                                            rows, n, active)                                               # [B, R]
            over = (live.sum(dim=1) > self.cu_width).any()        # [] too wide: this step and the rest halt
            active = active & ~over
            halted = halted | over.long()
            plan, fed = self.proposer.feed_on_device(keys, live & active[:, None], rows, self.hist_dev,
                                                     self.cu_width)                                        # [B, W]; [B]
            j = torch.arange(self.cu_width, device=n.device)[None, :]                    # [1, W]
            at = torch.where(j < fed[:, None], rows[:, None] + j, self.row_key_dev.shape[1] - 1)         # [B, W]
            self.row_key_dev.scatter_(1, at, plan["cu_label"] - 1)                        # their pair keys
            rows = rows + fed
        pos = n[:, None] + torch.arange(K + 1, device=n.device)[None, :]                  # [B, K+1]
        plan = {"last_tok": last, "pos": pos, "vslot": torch.where(active[:, None], pos, -1),
                "left": torch.where(active, self.G - gen, 0), **plan}
        plan.update(self.proposer.plan_on_device(rows, n, active, K, self.arm.oracle_p2))
        x, layout = pack_on_device(**plan)                                                # [B, X]
        if self.arm.catchup:
            i = torch.arange(K, device=n.device)[None, :]                                # [1, K]
            at = torch.where(active[:, None], rows[:, None] + i, self.row_key_dev.shape[1] - 1)          # [B, K]
            self.row_key_dev.scatter_(1, at, n[:, None] - 1 + i)                          # the propose's rows
        probe = self.step.probe.ahead_columns(n, ar)         # read before the step writes the ring
        return x, layout, self.step.laid_out(plan), {"n": n, "gen": gen, "rows": rows, "last": last,
                                                     "active": active, "halted": halted, "probe": probe}

    @fused
    def next_book(self, packed: torch.Tensor, read_layout, s: dict) -> torch.Tensor:
        """The next step's book [5, B] from this one's read (packed [B, X]) and `plan`'s s: n and gen
        moved on by the committed tokens, the last committed token, the drafter's rows after the
        verify; CATCHUP: the committed tokens into the device's history."""
        K, B = self.K, self.B
        n, last = s["n"], s["last"]                                                    # [B] each
        r = unpack_plan(packed, read_layout)
        c = r["committed"]                                                                # [B]
        kept = (c - 1).clamp(min=0)                                                       # [B] drafts kept
        last = torch.where(c > 0, r["target"].gather(1, kept[:, None])[:, 0], last)       # the last committed token
        if self.arm.catchup:
            d = torch.arange(K + 1, device=n.device)[None, :]                            # [1, K+1]
            at = torch.where(d < c[:, None], n[:, None] + 1 + d, self.hist_dev.shape[1] - 1)   # [B, K+1]
            self.hist_dev.scatter_(1, at, r["target"])                                    # the committed tokens
        rows = self.proposer.rows_on_device(s["rows"], kept, s["active"], K, self.trim)   # [B]
        return torch.stack([n + c, s["gen"] + c, rows, last, s["halted"].expand(B)])

    def book_chunk(self, ready: list, left, host_plan, commit) -> tuple[list, bool]:
        """Host: a chunk's steps as the step-by-step loop books them, each as soon as its read has
        landed (`ready`: `launch`'s events). left(): whether any sequence still needs tokens (a
        step launched past that is empty); host_plan() -> (x, layout, where, pending): the host's
        own plan of the step, packed, `where(seq)` naming a sequence's step for an error, and what
        the commit needs; commit(h, pending) -> the step's telemetry record. Each step's host plan
        is checked against the one the device made. Returns the records and whether the chunk
        halted (the rest of its steps are empty)."""
        records = []
        Xr, Xp = layout_width(self.read_layout), layout_width(self.plan_layout)
        for m, event in enumerate(ready):
            if not left():                            # launched past the turn's end: an empty step
                continue
            if event is not None:
                event.synchronize()
            read = self.host_reads[m].numpy().copy()   # [B, X]; the next chunk reuses the buffer
            if read[0, -1]:                            # a catch-up too wide for the run-ahead: halted
                if ready[-1] is not None:
                    ready[-1].synchronize()
                return records, True
            x, layout, where, pending = host_plan()
            self.check(x, layout, read[:, Xr:Xr + Xp], where)
            h = unpack_read(read[:, :Xr], self.read_layout)
            self.seen_tokens += h.committed
            self.seen_steps += h.committed > 0
            records.append(commit(h, pending))
        if ready and ready[-1] is not None:
            ready[-1].synchronize()                   # the chunk's time holds its empty steps too
        return records, False

    def check(self, x: np.ndarray, layout, device_x: np.ndarray, where) -> None:
        """The host's plan x [B, X] of a step against the device's (device_x): any difference is a
        bug in one of the two, and stops the wave naming the first array and sequence that differ."""
        diff = ("layout", 0) if layout != self.plan_layout else first_difference(x, device_x, layout)
        if diff is not None:
            raise RuntimeError(f"run-ahead: {where(diff[1])}: the device planned {diff[0]} differently from the host")
