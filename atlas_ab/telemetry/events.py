"""Fingerprint events (FINGERPRINTS): host metadata now, device hashes later.

Every hidden that enters or leaves the ring, every row fed to the drafter and
every propose's target hidden is fingerprinted as the BF16 row it was when the
event happened, with no host sync per row (the reference engine paid a copy and a
sync per row). Three ways, one hash:
  - an eager wave snapshots the rows and hashes all rows of the wave on the device in
    one kernel call when it ends (one call also keeps the CPU fallback, a loop over
    byte columns, cheap);
  - a wave of captured steps hashes them inside the step's graph, on a branch beside the
    step's path (runtime/side_stream.py), and hands the fingerprints over with the step's one
    read (`fp=`): no snapshot, no gather;
  - a wave that runs ahead of the host (speculative/run_ahead.py) hands over a run of steps' own
    outputs, with a map of where each kind's events sit in them (`StepEvents`): the host does
    nothing per step; the wave's runs are laid out in event order on the device when the table
    is made, in ~25 device calls and one read.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import torch

from atlas_ab.telemetry.schema import EVENT_KINDS, EVENT_SCHEMA

#: An event's integer fields, in the order each batch keeps them.
FIELDS = ("doc_id", "turn", "step", "seq", "label", "key", "rope", "slot", "position")
#: A batch's block [len(COLUMNS), n]: its FIELDS, its kind (index into EVENT_KINDS), fp, fp2 and
#: whether it has an fp2 (0/1).
COLUMNS = FIELDS + ("kind", "fp", "fp2", "fp2_valid")
_KIND, _FP, _FP2, _VALID = (COLUMNS.index(c) for c in ("kind", "fp", "fp2", "fp2_valid"))
#: The columns a step's output gives (`StepEvents`), in this order.
STEP_COLUMNS = ("label", "key", "rope", "slot", "position", "fp", "fp2", "fp2_valid")


@dataclass(frozen=True)
class StepEvents:
    """Where one kind's events sit in a step's output row (X int64 columns per sequence): w
    candidates per sequence; candidate j is an event where column `mask[j]` > `above`; its
    STEP_COLUMNS are `columns[c][j]` + `add[c]` (a column -1: just `add[c]`). A step's kinds are a
    tuple of these, in the order its events happen."""
    kind: str
    mask: tuple                 # [w] column indices
    above: int
    columns: tuple              # [len(STEP_COLUMNS)][w] column indices (-1: none)
    add: tuple                  # [len(STEP_COLUMNS)] added to each column's value

    @property
    def width(self) -> int:
        return len(self.mask)

    @classmethod
    def of(cls, kind: str, mask, above: int, **fields) -> "StepEvents":
        """kind's events where column mask[j] > above; each field (of STEP_COLUMNS) is columns [w]
        (a list), a constant (an int) or both ((columns, added)); unnamed: -1 (fp2 and its
        validity: 0)."""
        w, cols, add = len(mask), [], []
        for c in STEP_COLUMNS:
            v = fields.pop(c, 0 if c.startswith("fp2") else -1)
            v = v if isinstance(v, tuple) else (v, 0) if isinstance(v, list) else (None, v)
            cols.append(tuple(v[0]) if v[0] is not None else (-1,) * w)
            add.append(v[1])
        if fields:
            raise ValueError(f"StepEvents: no column {sorted(fields)} (the columns: {STEP_COLUMNS})")
        return cls(kind, tuple(mask), above, tuple(cols), tuple(add))


@functools.lru_cache(maxsize=16)
def _places(kinds: tuple, B: int, X: int, device: torch.device):
    """`lay_out_steps`' index tensors on the device (made once per wave shape: cached): each
    candidate's source columns, added values, mask column and threshold, the permutation into event
    order, and each place's sequence and kind code."""
    w = [k.width for k in kinds]
    off = np.cumsum([0] + w)[:-1]
    n = sum(w)                                                              # candidates per sequence
    cols = np.full((n, len(STEP_COLUMNS)), X, dtype=np.int64)              # [candidate, column]: source column
    add = np.zeros((n, len(STEP_COLUMNS)), dtype=np.int64)
    mask = np.zeros(n, dtype=np.int64)
    above = np.zeros(n, dtype=np.int64)
    for k, o in zip(kinds, off):
        mask[o:o + k.width], above[o:o + k.width] = k.mask, k.above
        add[o:o + k.width] = k.add
        for i, c in enumerate(k.columns):
            cols[o:o + k.width, i] = [x if x >= 0 else X for x in c]
    # event order in a step: kind, then sequence, then column; `perm` maps it to the (sequence,
    # candidate) order the gather lays out
    b, j = np.meshgrid(np.arange(B), np.arange(n), indexing="ij")           # [B, n]
    kind_of = np.searchsorted(off, j, side="right") - 1
    order = np.lexsort((j.ravel(), b.ravel(), kind_of.ravel()))             # kind, sequence, candidate
    perm = (b * n + j).ravel()[order]
    codes = np.array([EVENT_KINDS.index(k.kind) for k in kinds])
    t = lambda a: torch.as_tensor(a, device=device)                        # noqa: E731
    return t(cols.ravel()), t(add), t(mask), t(above), t(perm), t(b.ravel()[order]), t(codes[kind_of.ravel()[order]])


def lay_out_steps(outs: torch.Tensor, kinds: tuple, doc_id: np.ndarray, turn: np.ndarray,
                  step: np.ndarray) -> np.ndarray:
    """Device: the events of M steps from their outputs outs [M, B, X] (`StepEvents` say where),
    in event order (step, kind in the given order, sequence, column), as the log's columns plus
    each event's step index m in outs: [len(COLUMNS) + 1, N] int64 on the host, one read.
    doc_id [B] each sequence's document, turn [M] each step's turn, step [M, B] each sequence's
    step number. ~25 device calls, whatever M and B."""
    M, B, X = outs.shape
    cols, add, mask, above, perm, seq_of, kind_of = _places(kinds, B, X, outs.device)
    n, L = len(mask), B * len(mask)
    t = lambda a: torch.as_tensor(a, device=outs.device).reshape(-1)       # noqa: E731
    # index_select, not [] with an index tensor: the host's dispatch is the cost here, not the device's
    ext = torch.nn.functional.pad(outs, (0, 1))                             # [M, B, X+1]: column X is 0
    values = (ext.index_select(2, cols).view(M, B, n, -1) + add).view(M, L, -1).index_select(1, perm)  # [M, L, C]
    at = (ext.index_select(2, mask) > above).view(M, L).index_select(1, perm).view(-1).nonzero()[:, 0]   # [N]
    v = values.view(M * L, -1).index_select(0, at).T                        # [C, N] in event order
    m = at.div(L, rounding_mode="floor")
    place = at - m * L
    seq, kind = seq_of.index_select(0, place), kind_of.index_select(0, place)
    where = torch.stack([t(doc_id).index_select(0, seq), t(turn).index_select(0, m),
                         t(step).index_select(0, m * B + seq), seq])
    return _to_host(torch.cat([where, v[:5], kind[None], v[5:], m[None]]))   # COLUMNS, then m


def _to_host(x: torch.Tensor) -> np.ndarray:
    """A device tensor's values on the host, read through page-locked memory: a wave's events read
    several times faster into pinned memory than pageable (bench/RESULTS.md,
    "FINGERPRINTS"). The array keeps the pinned block (the caching host allocator's) until the wave's
    table is dropped."""
    if x.device.type != "cuda":
        return x.numpy()
    host = torch.empty(x.shape, dtype=x.dtype, pin_memory=True)
    host.copy_(x)                  # blocking: the values are there on return
    return host.numpy()


class _Batch:
    """n events of one kind as a block [len(COLUMNS), n] (fp, fp2 and fp2_valid filled when the
    table is made where the rows were snapshotted: `rows`, `rows2`)."""
    __slots__ = ("block", "rows", "rows2")

    def __init__(self, block, rows, rows2):
        self.block, self.rows, self.rows2 = block, rows, rows2


class _Steps:
    """`add_steps`' run of M steps (laid out when the table is made)."""
    __slots__ = ("turn", "doc_id", "step", "outs", "kinds")

    def __init__(self, turn, doc_id, step, outs, kinds):
        self.turn, self.doc_id, self.step, self.outs, self.kinds = turn, doc_id, step, outs, kinds


class EventLog:
    def __init__(self, fingerprint_rows):
        self.fingerprint_rows = fingerprint_rows
        self.entries: list = []      # _Batch and _Steps, in the order events happened

    def add(self, kind: str, *, doc_id, turn, step, seq, rows: torch.Tensor | None = None,
            rows2: torch.Tensor | None = None, fp2_valid: np.ndarray | None = None,
            label=-1, key=-1, rope=-1, slot=-1, position=-1, fp=None, fp2=None) -> None:
        """Record n events; fields are scalars or length-n arrays, laid out here as one int64 block
        (a loop step calls this while the device runs the next step, so the table at the wave's end
        only joins the blocks). Give the rows (snapshotted, hashed at the end) or their fingerprints
        `fp` (and `fp2`) already hashed on the device."""
        n = len(seq)
        if n == 0:
            return
        block = np.zeros((len(COLUMNS), n), dtype=np.int64)
        for i, v in enumerate((doc_id, turn, step, seq, label, key, rope, slot, position, EVENT_KINDS.index(kind))):
            block[i] = v
        if fp is not None:
            block[_FP] = fp
            if fp2 is not None:
                block[_FP2] = fp2
                block[_VALID] = True if fp2_valid is None else fp2_valid
            self.entries.append(_Batch(block, None, None))
        else:
            if rows2 is not None:
                block[_VALID] = True if fp2_valid is None else fp2_valid
            # rows are fresh gathers, never views of live state; .to(bf16) keeps them as hashed
            self.entries.append(_Batch(block, rows.to(torch.bfloat16),
                                       None if rows2 is None else rows2.to(torch.bfloat16)))

    def add_steps(self, turn: int, doc_id: np.ndarray, step: np.ndarray, outs: torch.Tensor, kinds: tuple) -> None:
        """Record M consecutive steps' events from their outputs on the device, outs [M, B, X]
        (kept as they are: nothing is read back until the table is made). doc_id [B] (each
        sequence's document), step [M, B] (each sequence's step number), kinds: `StepEvents`, in
        the order a step's events happen. Runs with equal kinds are laid out in one device call."""
        self.entries.append(_Steps(turn, doc_id, step, outs, kinds))

    def _step_blocks(self) -> dict:
        """Every `add_steps` run's events, laid out in one device call per kinds: per run, its
        kinds' block [len(COLUMNS), N] and the run's columns a:b in it."""
        groups: dict = {}
        for e in self.entries:
            if isinstance(e, _Steps):
                groups.setdefault(e.kinds, []).append(e)
        out = {}
        for kinds, runs in groups.items():
            lengths = [len(e.outs) for e in runs]
            block = lay_out_steps(torch.cat([e.outs for e in runs]) if len(runs) > 1 else runs[0].outs, kinds,
                                  runs[0].doc_id, np.repeat([e.turn for e in runs], lengths),
                                  np.concatenate([e.step for e in runs]))
            cut = np.searchsorted(block[-1], np.cumsum([0] + lengths))      # events come in step order
            for e, a, b in zip(runs, cut[:-1], cut[1:]):
                out[id(e)] = (block, a, b)
        return out

    def _pieces(self) -> list:
        """The log's blocks [len(COLUMNS), n] in event order: runs of batches joined, runs of
        `add_steps` runs as laid out (views)."""
        snap = [e for e in self.entries if isinstance(e, _Batch) and e.rows is not None]
        rows = [e.rows for e in snap] + [e.rows2 for e in snap if e.rows2 is not None]
        if rows:     # one hashing call for every snapshotted row of the wave (second rows where events have them)
            fps = self.fingerprint_rows(rows[0] if len(rows) == 1 else torch.cat(rows)).cpu().numpy()
            at1, at2 = 0, sum(len(e.rows) for e in snap)
            for e in snap:
                n = len(e.rows)
                e.block[_FP], at1 = fps[at1:at1 + n], at1 + n
                if e.rows2 is not None:
                    e.block[_FP2], at2 = fps[at2:at2 + n], at2 + n
        steps = self._step_blocks()
        pieces, joined, run = [], [], None            # run: (block, a, b) of the runs being joined
        for e in self.entries + [None]:
            if isinstance(e, _Steps):
                block, a, b = steps[id(e)]
                if run is not None and run[0] is block and run[2] == a:   # the next run of one layout
                    run = (block, run[1], b)
                    continue
            if run is not None:
                pieces.append(run[0][:-1, run[1]:run[2]])
                run = None
            if isinstance(e, _Batch):
                joined.append(e.block)
                continue
            if joined:
                pieces.append(joined[0] if len(joined) == 1 else np.concatenate(joined, axis=1))
                joined = []
            if e is not None:
                run = steps[id(e)]
        return pieces

    def table(self) -> pa.Table:
        """The wave's events: a column per field, in chunks where the log joined runs of steps."""
        pieces = [p for p in self._pieces() if p.shape[1]]
        if not pieces:
            return EVENT_SCHEMA.empty_table()

        def one(p, i, type_, valid):
            # narrowed by numpy (Arrow's checked cast of 50,000 values: 36 us against 6), and the
            # validity given as bits (Arrow's mask= from a bool array: 46 us against 10; this CPU)
            x = p[i] if type_ == pa.int64() else p[i].astype(np.dtype(str(type_)))
            if valid is None:
                return pa.array(x, type=type_)
            bits = np.packbits(p[valid] != 0, bitorder="little")
            return pa.Array.from_buffers(type_, len(x), [pa.py_buffer(bits), pa.py_buffer(np.ascontiguousarray(x))])

        def column(i, type_, valid=None):
            chunks = [one(p, i, type_, valid) for p in pieces]
            return chunks[0] if len(chunks) == 1 else pa.chunked_array(chunks, type=type_)
        arrays = {k: column(i, EVENT_SCHEMA.field(k).type) for i, k in enumerate(FIELDS)}
        arrays["order"] = pa.array(np.arange(sum(p.shape[1] for p in pieces)), type=EVENT_SCHEMA.field("order").type)
        # the kind column taken from codes in one call: no Python string per event
        codes = pieces[0][_KIND] if len(pieces) == 1 else np.concatenate([p[_KIND] for p in pieces])
        arrays["kind"] = pa.array(EVENT_KINDS, type=pa.string()).take(pa.array(codes))
        arrays["fp"] = column(_FP, pa.int64())
        arrays["fp2"] = column(_FP2, pa.int64(), valid=_VALID)
        return pa.table({n: arrays[n] for n in EVENT_SCHEMA.names}, schema=EVENT_SCHEMA)
