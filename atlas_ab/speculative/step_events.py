"""FINGERPRINTS in a wave: the recorder of its fingerprint events, in one of three modes; the
wave's step probe (step_probe.py) when the arm has FINGERPRINTS on.

An event is a hidden row entering or leaving the ring, a row fed to the drafter or a propose's
target hidden, fingerprinted as it was when it happened (telemetry/events.py). The modes differ
only in where the row's hash is taken, never in the events:

  snapshot  (eager steps) the host gathers each event's rows when it happens; the log hashes
            every row of the wave when its table is made.
  in_step   (static-shape steps) the step hashes its event rows itself, on a side stream beside
            its path (`propose`, `verify`: runtime/side_stream.py), into its one read;
            the host records each step's events from that read while the device runs the next.
  laid_out  (a run-ahead) as in_step, but a chunk's events go to the log as its steps' own
            outputs (`chunk`), laid out on the device when the table is made: nothing per
            step on the host.

Shapes: B sequences, K drafts, W catch-up rows, H hidden, S the fingerprint columns of a read
(2 + W of the propose, then 2(K+1) of the ring writes where there is a ring).
"""
from __future__ import annotations

import functools

import numpy as np
import torch

from atlas_ab.runtime.side_stream import SideStream
from atlas_ab.speculative.host_io import layout_columns, layout_width
from atlas_ab.speculative.step_probe import NO_PROBE, StepProbe
from atlas_ab.telemetry.events import EventLog, StepEvents
from atlas_ab.telemetry.fingerprint import fingerprint_rows as fnv1a_rows

MODES = ("snapshot", "in_step", "laid_out")


class Fingerprints(StepProbe):
    """One wave's FINGERPRINTS: its event log, the side stream the step hashes on and its mode."""

    def __init__(self, log: EventLog, mode: str, K: int, doc_ids: np.ndarray, ring, last_hidden: torch.Tensor):
        """ring: the wave's `Ring` (None without one); last_hidden [B, H]: the next propose's hidden."""
        if mode not in MODES:
            raise ValueError(f"FINGERPRINTS mode {mode!r}: one of {MODES}")
        self.log, self.mode, self.K, self.doc_ids = log, mode, K, doc_ids
        self.ring, self.last_hidden = ring, last_hidden
        self.B = len(doc_ids)
        # the step's hashing beside its path: the drafter and the bookkeeping do not wait for it
        self.side = SideStream(last_hidden.device) if mode != "snapshot" else None
        self.fed = None          # the catch-up rows the step's plan feeds: (RowFeed, their columns j)
        self._later: list = []   # in_step: the last step's events, recorded while the device runs the next
        self._kinds: dict = {}   # laid_out: (read layout, plan layout) -> where a step's events sit

    @classmethod
    def of(cls, arm, fingerprint_rows, mode: str, doc_ids: np.ndarray, ring, last_hidden: torch.Tensor) -> StepProbe:
        """The arm's step probe: this recorder, or the no-op probe where FINGERPRINTS is off;
        fingerprint_rows: the hash of a [..., H] tensor's rows (None: telemetry/fingerprint.py's FNV-1a)."""
        if not arm.fingerprints_on:
            return NO_PROBE
        return cls(EventLog(fingerprint_rows or fnv1a_rows), mode, arm.num_drafts, doc_ids, ring, last_hidden)

    @property
    def in_step(self) -> bool:
        """The step hashes its own event rows (in_step and laid_out)."""
        return self.mode != "snapshot"

    @property
    def laid_out(self) -> bool:
        return self.mode == "laid_out"

    @property
    def allows_run_ahead(self) -> bool:
        """Snapshots read the verify's rows as each step leaves them: step by step."""
        return self.in_step

    # ---------------------------------------------- the step's hashing (device)
    def propose(self, n: torch.Tensor, fed: torch.Tensor | None) -> torch.Tensor | None:
        """The propose's rows, hashed beside the drafter: the propose's hidden, the ring's row of its
        label n [B] and each fed row (fed [B, W, H]); returns the fingerprints [B, 2+W], not joined
        (the verify joins before it writes what they read); None in snapshot mode."""
        if not self.in_step:
            return None
        with self.side.fork(n, fed):
            ar = torch.arange(self.B, device=n.device)                                        # [B]
            ring_row = self.ring.hiddens[ar, n.remainder(self.ring.capacity)] if self.ring is not None \
                else self.last_hidden                                                         # [B, H]
            fp = self.log.fingerprint_rows(torch.cat([self.last_hidden[:, None], ring_row[:, None]]
                                                     + ([fed] if fed is not None else []), dim=1))  # [B, 2+W]
        return fp

    def read_columns(self, fp: torch.Tensor | None) -> torch.Tensor | None:
        """The read's fingerprint columns [B, S], filled beside the path once the read is packed
        (None: the propose was not hashed)."""
        if fp is None:
            return None
        ring = self.ring is not None
        return torch.empty((self.B, fp.shape[1] + 2 * (self.K + 1) * ring), dtype=torch.long, device=fp.device)

    def verify(self, fp: torch.Tensor | None, packed: torch.Tensor, read_layout, vh: torch.Tensor, slot) -> None:
        """Into the packed read [B, X]: the propose's fingerprints fp [B, 2+W] and, with a ring, the
        verify's rows vh [B, K+1, H] and the ring's rows after the write (slot: `Ring.write_masked`'s
        [B, K+1]), hashed beside the path, not joined (the step joins); fp None: nothing."""
        if fp is None:
            return
        cols = layout_columns(read_layout)["fp"]
        ar = torch.arange(self.B, device=packed.device)                                      # [B]
        with self.side.fork(fp, packed, vh, ar, slot):
            if self.ring is not None:      # the rows written and the ring's rows after the write
                after = self.ring.hiddens[ar[:, None], slot]                                  # [B, K+1, H]
                fp = torch.cat([fp, self.log.fingerprint_rows(torch.cat([vh, after], dim=1))], dim=1)  # [B, S]
            packed[:, cols[0]:cols[-1] + 1].copy_(fp)

    def ahead_columns(self, n: torch.Tensor, ar: torch.Tensor) -> list:
        """Laid out only: whether the ring holds the propose's label n [B] before the step writes,
        a [B, 1] column of the run-ahead's output (`kinds_of` reads it); ar: the plan's arange(B)."""
        if not self.laid_out:
            return []
        if self.ring is None:
            return [torch.zeros_like(n)[:, None]]
        return [(self.ring.mirror[ar, n.remainder(self.ring.capacity)] == n).long()[:, None]]

    def join(self) -> None:
        """The path waits for the step's hashing (nothing to wait for in snapshot mode)."""
        if self.side is not None:
            self.side.join()

    # ---------------------------------------------------- the events (host)
    def context(self, w, turn: int) -> None:
        """DRAFTER_PREFILL's context rows (w: the `RowsWritten` the drafter took, None: none)."""
        if w is not None and len(w) and w.hiddens is not None:
            self.log.add("context", doc_id=self.doc_ids[w.seq], turn=turn, step=-1, seq=w.seq,
                         rows=w.hiddens, key=w.key, rope=w.rope, slot=w.slot)

    def feed(self, rows, turn: int, step_no: np.ndarray, step: int | None = None) -> None:
        """CATCHUP's rows a plan feeds (rows: (RowFeed, their columns in the plan), None: none):
        recorded now, as they are (snapshot mode, or `step` -1: before a turn's drafter prefill),
        else kept for the step's own fingerprints (`propose_and_feed`)."""
        self.fed = rows
        if rows is None:
            return
        w = rows[0]
        if len(w) and (step is not None or not self.in_step):
            self.log.add("feed", doc_id=self.doc_ids[w.seq], turn=turn,
                         step=step_no[w.seq] if step is None else np.full(len(w), step),
                         seq=w.seq, rows=self.ring.read(w.seq, w.label), label=w.label, key=w.key, rope=w.rope,
                         slot=w.slot)

    def ring_prefill(self, label: np.ndarray, rows: torch.Tensor, dst: torch.Tensor, turn: int) -> None:
        """RING_PREFILL's write (rows [B, H] under label [B], at the ring's dst)."""
        self.log.add("ring_write", doc_id=self.doc_ids, turn=turn, step=-1, seq=np.arange(self.B), rows=rows,
                     rows2=self.ring.hiddens[dst[0], dst[1]], label=label)

    def planned(self, active: np.ndarray, n: np.ndarray, step_no: np.ndarray, turn: int) -> None:
        """Snapshot mode: the step's propose event, its rows gathered now."""
        if not self.in_step:
            self.propose_and_feed(active, n, step_no, turn)

    def read(self, h, active: np.ndarray, n: np.ndarray, step_no: np.ndarray, turn: int) -> None:
        """In the step: its feed and propose events from the read's fingerprints (h: `StepRead`)."""
        if self.in_step:
            self.propose_and_feed(active, n, step_no, turn, h.fp)

    def committed(self, h, written, vh: torch.Tensor, step_no: np.ndarray, turn: int) -> None:
        """The step's ring writes (written: `Ring.book_written`'s, None without a ring)."""
        if written is not None:
            self.ring_writes(h.ring_label, written, vh, step_no, turn, h.fp)

    def propose_and_feed(self, active: np.ndarray, n: np.ndarray, step_no: np.ndarray, turn: int, fp=None) -> None:
        """The step's catch-up feed and propose events: their rows gathered now, before the step
        moves them on, or (fp [B, S]) their fingerprints hashed in the step (columns 0-1 the
        propose's rows, 2.. the fed ones)."""
        act = np.nonzero(active)[0]
        live = self.ring.live(act, n[act]) if self.ring is not None else np.zeros(len(act), bool)
        if fp is not None:       # the ring's state is read now; the events are recorded during the next step
            self._later.append(functools.partial(self.record_propose_and_feed, act, n, live, fp, self.fed,
                                                 step_no.copy(), turn))
            return
        meta = dict(doc_id=self.doc_ids[act], turn=turn, step=step_no[act], seq=act, fp2_valid=live,
                    position=n[act])
        if self.ring is not None:
            idx = self.ring.index(act, n[act])          # one copy serves both gathers
            rows, ring_rows = self.last_hidden[idx[0]], self.ring.hiddens[idx[0], idx[1]]
        else:
            rows = self.last_hidden[torch.as_tensor(act, device=self.last_hidden.device)]
            ring_rows = torch.zeros_like(rows)
        self.log.add("propose", rows=rows, rows2=ring_rows, **meta)

    def record_propose_and_feed(self, act, n, live, fp, fed, step_no, turn) -> None:
        """A step's catch-up feed and propose events from their fingerprints hashed in it (fp [B, S]:
        columns 0-1 the propose's rows, 2.. the fed ones)."""
        if fed is not None and len(fed[0]):
            w, j = fed
            self.log.add("feed", doc_id=self.doc_ids[w.seq], turn=turn, step=step_no[w.seq], seq=w.seq,
                         fp=fp[w.seq, 2 + j], label=w.label, key=w.key, rope=w.rope, slot=w.slot)
        self.log.add("propose", doc_id=self.doc_ids[act], turn=turn, step=step_no[act], seq=act, fp2_valid=live,
                     position=n[act], fp=fp[act, 0], fp2=fp[act, 1])

    def ring_writes(self, ring_label: np.ndarray, written: tuple, vh: torch.Tensor, step_no: np.ndarray,
                    turn: int, fp=None) -> None:
        """The ring writes' events (ring_label [B, K+1]; written: their (seq, j); vh [B, K+1, H]: the
        verify's rows; fp [B, S]: the step's fingerprints, hashed in it; None: the rows snapshotted
        now, before the next step writes the ring)."""
        seq, j = written
        if len(seq) == 0:
            return
        if fp is not None:       # recorded while the device runs the next step
            self._later.append(functools.partial(self.record_ring_writes, seq, j, ring_label, fp,
                                                 step_no.copy(), turn))
        else:
            src = torch.as_tensor(np.stack([seq, j]), device=vh.device)
            dst = self.ring.index(seq, ring_label[seq, j])
            self.log.add("ring_write", doc_id=self.doc_ids[seq], turn=turn, step=step_no[seq],
                         seq=seq, rows=vh[src[0], src[1]], rows2=self.ring.hiddens[dst[0], dst[1]],
                         label=ring_label[seq, j])

    def record_ring_writes(self, seq, j, ring_label, fp, step_no, turn) -> None:
        """The ring writes' events of a step, from their fingerprints hashed in it (fp [B, S]: the
        written rows, then the ring's rows after the writes, in its last 2(K+1) columns)."""
        fp = fp[:, -2 * (self.K + 1):]
        self.log.add("ring_write", doc_id=self.doc_ids[seq], turn=turn, step=step_no[seq], seq=seq,
                     fp=fp[seq, j], fp2=fp[seq, self.K + 1 + j], label=ring_label[seq, j])

    def flush(self) -> None:
        """The last step's events, from the fingerprints hashed in it (in_step)."""
        for record in self._later:
            record()
        self._later.clear()

    # -------------------------------------------------- laid out (run-ahead)
    def booked(self) -> StepProbe:
        """Laid out, a booked run-ahead step records nothing of its own: its chunk's events come
        from the steps' outputs (`chunk`)."""
        return NO_PROBE if self.laid_out else self

    def chunk(self, turn: int, steps: list, ahead) -> None:
        """A run-ahead chunk's feed, propose and ring-write events, as `record_propose_and_feed` and
        `record_ring_writes` record them, handed to the log as the steps' own outputs (ahead: the
        `RunAhead` whose `host_reads` [M, B, X] hold them; steps: per step, its active sequences
        and their step numbers). They go back to the device in one copy (a copy of each step's
        output on the device would cost the host a call a step); the next chunk's reads queue
        behind it."""
        if not steps or not self.laid_out:
            return
        reads, read_layout, plan_layout = ahead.host_reads[:len(steps)], ahead.read_layout, ahead.plan_layout
        step = np.full((len(steps), self.B), -1, dtype=np.int64)                        # [M, B]
        for i, (act, step_no) in enumerate(steps):
            step[i, act] = step_no
        device = self.last_hidden.device
        outs = reads.to(device, non_blocking=True) if device.type == "cuda" else reads.clone()   # [M, B, X]
        key = (read_layout, plan_layout)
        if key not in self._kinds:
            self._kinds[key] = self.kinds_of(read_layout, plan_layout)
        self.log.add_steps(turn, self.doc_ids, step, outs, self._kinds[key])

    def kinds_of(self, read_layout, plan_layout) -> tuple:
        """Where a run-ahead step's events sit in its output row (the read, the plan, whether the
        ring held the propose's label, the halt flag), in a step's order: the catch-up rows fed,
        the propose, the ring writes."""
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
