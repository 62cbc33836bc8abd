"""`fingerprints RUN`: the reference engine's REFEED verification table, rebuilt from events.

The events (docs/telemetry.md, FINGERPRINTS) carry an FNV-1a fingerprint of
every hidden that enters or leaves the catch-up ring, is fed to the drafter, or
is consumed by a propose. Replayed in `order`, per sequence (doc_id, seq; a
sequence's ring spans its turns):

  a. ring copy landed            ring_write fp == fp2
  b. fed == live ring content    feed fp == fp2 of the latest earlier ring_write of its label
  c. label/RoPE arithmetic       label == key + 1; RoPE == key + 1 (compact) or == slot (dense)
  d. ring row at a propose       propose fp == fp2 (proposes with no ring row are only counted)
  e. feed(key k) == the target hidden consumed by the propose at position k + 1

Rows a-c check the ring's own bookkeeping and are self-consistent even when
the label convention is wrong (the reference engine's `mtp_refeed_shift`): a uniformly
shifted ring still lands its copies, feeds what it holds, and computes
label = key + 1. Row d sees a shift only where the propose's ring lookup does
not share the writer's label arithmetic (in the reference engine it shares the
buffer offset formula and reads 100% regardless). Row e is the
non-tautological one: it compares what the re-feed hands pair key k against
what the drafter's own propose consumed for that pair, two different code
paths, so it sees a wrong mapping whenever a pair is checkable. A correct run
reads 100% on every row.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from atlas_ab import AtlasError
from atlas_ab.analysis import cli
from atlas_ab.analysis.runs import open_run, read_shards
from atlas_ab.proposers.rowspace import rope_of
from atlas_ab.telemetry.schema import EVENT_KINDS, EVENT_NAMES, ROW_SPACES

SEQ = ["doc_id", "turn", "seq"]
# A sequence keeps its ring and drafter rows across turns (the target KV is
# reused), so a feed on turn t may read a label written on turn t-1: joins are
# per sequence, not per turn.
SEQUENCE = ["doc_id", "seq"]
COLUMNS = list(EVENT_NAMES)
KINDS = EVENT_KINDS


@dataclass(frozen=True)
class Check:
    """One row of the table: `matched` of `checked` events passed.

    failures: the `order` of every event that failed, so a broken run can be
    read back event by event.
    """

    name: str
    check: str
    matched: int
    checked: int
    failures: tuple[int, ...] = ()
    note: str = ""

    @property
    def rate(self) -> float | None:
        return self.matched / self.checked if self.checked else None

    @property
    def ok(self) -> bool:
        return self.matched == self.checked

    def result(self) -> str:
        s = f"{self.matched:,} / {self.checked:,}"
        return s + (f" ({self.note})" if self.note else "")

    def to_dict(self) -> dict:
        return {"check": self.name, "description": self.check, "matched": self.matched,
                "checked": self.checked, "rate": self.rate, "note": self.note,
                "failures": list(self.failures)}


@dataclass(frozen=True)
class ContextRows:
    """The drafter prefill rows ('context' events) of one sequence."""

    doc_id: int
    turn: int
    seq: int
    rows: int
    key_min: int
    key_max: int
    rope_ok: int  # rows whose RoPE follows the row space's rule

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class FingerprintTable:
    row_space: str
    rows: tuple[Check, ...]
    n_events: int
    n_sequences: int
    context: tuple[ContextRows, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.rows)

    def row(self, name: str) -> Check:
        for r in self.rows:
            if r.name == name:
                return r
        raise KeyError(name)

    @property
    def context_rows(self) -> int:
        return sum(c.rows for c in self.context)

    def summary(self, max_listed: int = 20, max_failures: int = 5) -> str:
        lines = [f"fingerprint table ({self.row_space} row space; {self.n_events:,} events over "
                 f"{self.n_sequences:,} sequences)", "",
                 "| check | result |", "|---|---|"]
        lines += [f"| {r.name}. {r.check} | {r.result()} |" for r in self.rows]
        lines.append("")
        rope_ok = sum(c.rope_ok for c in self.context)
        lines.append(f"context (drafter prefill rows): {self.context_rows:,} rows over "
                     f"{len(self.context):,} sequences; RoPE rule held on {rope_ok:,}")
        for c in self.context[:max_listed]:
            lines.append(f"  doc {c.doc_id} turn {c.turn} seq {c.seq}: {c.rows:,} rows, "
                         f"keys {c.key_min}..{c.key_max}, RoPE ok {c.rope_ok:,}")
        if len(self.context) > max_listed:
            lines.append(f"  ... {len(self.context) - max_listed:,} more (see --json)")
        failed = [r for r in self.rows if not r.ok]
        for r in failed:
            shown = ", ".join(str(o) for o in r.failures[:max_failures])
            more = f" and {len(r.failures) - max_failures:,} more" if len(r.failures) > max_failures else ""
            lines.append(f"row {r.name} failed at event order {shown}{more}")
        empty = [r.name for r in self.rows if r.checked == 0]
        if failed:
            lines.append("FAILED: rows " + ", ".join(r.name for r in failed))
        elif empty:  # nothing failed, but nothing was confirmed there either
            lines.append("every checked row 100%; nothing to check on rows " + ", ".join(empty))
        else:
            lines.append("every row 100%")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"row_space": self.row_space, "ok": self.ok, "n_events": self.n_events,
                "n_sequences": self.n_sequences, "rows": [r.to_dict() for r in self.rows],
                "context_rows": self.context_rows, "context": [c.to_dict() for c in self.context]}


def _check(name: str, check: str, events: pd.DataFrame, passed: np.ndarray, note: str = "") -> Check:
    passed = np.asarray(passed, dtype=bool)
    return Check(name, check, int(passed.sum()), int(passed.size),
                 tuple(int(o) for o in events["order"].to_numpy()[~passed]), note)


def _normalise(events: pd.DataFrame) -> pd.DataFrame:
    missing = [c for c in COLUMNS if c not in events.columns]
    if missing:
        raise AtlasError(f"events: missing column {missing[0]!r}")
    if len(events) == 0:
        raise AtlasError("events: no fingerprint events")
    ev = events[COLUMNS].copy()
    # fp2 is nullable. A float column means the 64-bit hashes already went
    # through float64 and lost bits: refuse rather than compare rounded values.
    for c in ("fp", "fp2"):
        if pd.api.types.is_float_dtype(ev[c]):
            raise AtlasError(f"events: column {c!r} is float (64-bit fingerprints need integer columns)")
    ev["fp2"] = ev["fp2"].astype("Int64")
    if ev["fp"].isna().any():
        raise AtlasError(f"events: {int(ev['fp'].isna().sum())} events have no fp")
    for c in COLUMNS:
        if c not in ("kind", "fp2"):
            if ev[c].isna().any():
                raise AtlasError(f"events: column {c!r} has null values")
            ev[c] = ev[c].astype(np.int64)
    unknown = sorted(set(ev["kind"]) - set(KINDS))
    if unknown:
        raise AtlasError(f"events: unknown kind {unknown[0]!r} (expected {', '.join(KINDS)})")
    if ev["order"].duplicated().any():
        raise AtlasError(f"events: duplicate order {int(ev['order'][ev['order'].duplicated()].iloc[0])}")
    return ev.sort_values("order", kind="stable").reset_index(drop=True)


def _rope_ok(rows: pd.DataFrame, row_space: str) -> np.ndarray:
    return (rows["rope"] == rope_of(row_space, rows["key"], rows["slot"])).to_numpy()


def fingerprint_table(events: pd.DataFrame, row_space: str) -> FingerprintTable:
    """Rebuild the verification table from the events of one run (pure)."""
    if row_space not in ROW_SPACES:
        raise AtlasError(f"unknown row space {row_space!r} (expected {' or '.join(ROW_SPACES)})")
    ev = _normalise(events)
    writes = ev[ev["kind"] == "ring_write"]
    feeds = ev[ev["kind"] == "feed"]
    proposes = ev[ev["kind"] == "propose"]
    context = ev[ev["kind"] == "context"]

    # a. the ring copy landed: destination row == source hidden
    a = _check("a", "ring copy landed (ring_write fp == fp2)", writes,
               (writes["fp2"] == writes["fp"]).fillna(False).to_numpy())

    # b. what each feed read is what the ring held at its label then: the fp2 of
    # the latest ring_write of that label, in the same sequence, before the feed
    # (a feed of a label never written fails: it read no ring content)
    live = pd.merge_asof(
        feeds, writes[SEQUENCE + ["label", "order", "fp2"]].rename(columns={"order": "w_order", "fp2": "ring"}),
        left_on="order", right_on="w_order", by=SEQUENCE + ["label"],
        direction="backward", allow_exact_matches=False)
    b = _check("b", "fed hidden == live ring content at its label", feeds,
               (live["ring"] == live["fp"]).fillna(False).to_numpy())

    # c. the label/RoPE arithmetic of every feed
    rope_rule = "RoPE == key + 1" if row_space == "compact" else "RoPE == slot"
    c = _check("c", f"label == key + 1 and {rope_rule} on every feed", feeds,
               (feeds["label"] == feeds["key"] + 1).to_numpy() & _rope_ok(feeds, row_space))

    # d. the ring row at a propose's position == the hidden the propose consumed;
    # a propose with no ring row (e.g. a run's first) cannot be checked
    has_row = proposes["fp2"].notna().to_numpy()
    checked = proposes[has_row]
    d = _check("d", "ring row at the propose position == hidden saved for the propose", checked,
               (checked["fp2"] == checked["fp"]).fillna(False).to_numpy(),
               note=f"{int((~has_row).sum()):,} proposes had no ring row")

    # e. the non-tautological row: the hidden fed for pair key k == the target
    # hidden the propose at position k + 1 consumed (when it wrote pair key k
    # itself). Should a position be proposed twice, the latest propose counts.
    consumed = (proposes.drop_duplicates(SEQUENCE + ["position"], keep="last")
                .loc[:, SEQUENCE + ["position", "fp"]].rename(columns={"fp": "consumed"}))
    pairs = feeds.assign(position=feeds["key"] + 1).merge(consumed, on=SEQUENCE + ["position"], how="inner")
    e = _check("e", "feed(key k) == target hidden consumed by the propose at position k + 1", pairs,
               (pairs["fp"] == pairs["consumed"]).to_numpy(),
               note=f"{len(pairs):,} of {len(feeds):,} feeds have a propose at key + 1")

    listed = []
    if len(context):
        ctx = context.assign(rope_ok=_rope_ok(context, row_space))
        for (doc, turn, seq), g in ctx.groupby(SEQ, sort=True):
            listed.append(ContextRows(int(doc), int(turn), int(seq), len(g), int(g["key"].min()),
                                      int(g["key"].max()), int(g["rope_ok"].sum())))
    n_seq = len(ev.drop_duplicates(SEQUENCE))
    return FingerprintTable(row_space, (a, b, c, d, e), len(ev), n_seq, tuple(listed))


# ---- reading a run -----------------------------------------------------------

def read_events(path: str | Path, allow_incomplete: bool = False) -> tuple[pd.DataFrame, dict | None]:
    """The run's events (only the shards its manifest lists, if it lists any) and its manifest."""
    root, manifest = open_run(path, allow_incomplete)
    tables, _, warnings = read_shards(root, manifest, "events", COLUMNS)
    for w in warnings:
        cli.warn(w)
    table = pa.concat_tables([t.select(COLUMNS) for t in tables], promote_options="permissive")
    if table.num_rows == 0:
        raise AtlasError(f"{root / 'events'}: no fingerprint events (the shards hold no rows)")
    # nullable integers, so fp2's nulls never turn the 64-bit hashes into floats
    events = table.to_pandas(types_mapper=lambda t: pd.Int64Dtype() if pa.types.is_integer(t) else None)
    return events, manifest
