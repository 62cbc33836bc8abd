"""Read one run directory (docs/telemetry.md) into a validated steps DataFrame.

Only the columns asked for are read (pyarrow column projection), because the
step tables are large and the metrics need five integer columns. Every problem
is one AtlasError line naming the file it was found in; nothing is dropped.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from atlas_ab import AtlasError
from atlas_ab.ingest.grain import from_manifest, no_steps_line
from atlas_ab.telemetry.schema import REQUIRED_STEP as REQUIRED, STEP_INT_TYPES as INT_TYPES

NONNEGATIVE = REQUIRED


@dataclass(frozen=True)
class Run:
    """A loaded run: where it came from, its provenance and its steps."""

    path: Path
    arm: str
    manifest: dict | None
    steps: pd.DataFrame
    files: tuple[Path, ...]
    warnings: tuple[str, ...] = field(default=())

    @property
    def K(self) -> int:
        """The arm's configured K: the largest k any step submitted."""
        return int(self.steps["k"].max())

    @property
    def telemetry(self):
        """An ingested run's grain and what it makes exact (None for our own runs)."""
        return from_manifest(self.manifest, str(self.path / "manifest.json"))

    @property
    def status(self) -> str:
        return (self.manifest or {}).get("status", "external")

    def hash(self, section: str) -> str | None:
        """`workload.hash` / `model.hash` from the manifest (None without one)."""
        return ((self.manifest or {}).get(section) or {}).get("hash")

    def __str__(self) -> str:
        return f"{self.arm} ({self.path}, {len(self.steps):,} steps, K={self.K})"


def read_manifest(root: Path, allow_incomplete: bool = False) -> dict | None:
    """The run's manifest (None without one); a run not `complete` is refused
    unless allow_incomplete."""
    mf = root / "manifest.json"
    if not mf.exists():
        return None
    try:
        manifest = json.loads(mf.read_text())
    except (OSError, ValueError) as e:
        raise AtlasError(f"{mf}: unreadable manifest ({e.__class__.__name__}: {e})") from None
    if not isinstance(manifest, dict):
        raise AtlasError(f"{mf}: manifest is not a JSON object")
    status = manifest.get("status")
    if status != "complete" and not allow_incomplete:
        raise AtlasError(f"{mf}: run status is {status!r}, not 'complete' "
                         "(pass --allow-incomplete to analyse it anyway)")
    return manifest


def shard_files(root: Path, manifest: dict | None, table: str = "steps") -> tuple[list[Path], list[str]]:
    """The Parquet shards of one table (`steps` or `events`) and warnings.

    With a manifest that lists shards, exactly those files (a shard may have no
    events file); anything else on disk is debris of a crash, ignored loudly."""
    tdir = root / table
    on_disk = sorted(tdir.glob("*.parquet")) if tdir.is_dir() else []
    if manifest is None or "shards" not in manifest:
        return on_disk, []
    listed = []
    for i, shard in enumerate(manifest["shards"] or []):
        rel = shard.get(table) if isinstance(shard, dict) else None
        if not rel:
            if table == "steps":
                raise AtlasError(f"{root / 'manifest.json'}: shard {i} names no steps file")
            continue
        p = root / rel
        if not p.exists():
            raise AtlasError(f"{p}: listed in manifest.json but missing")
        listed.append(p)
    listed_real = {p.resolve() for p in listed}
    debris = [p for p in on_disk if p.resolve() not in listed_real]
    warnings = [f"{p}: not listed in manifest.json shards; ignored" for p in debris]
    return listed, warnings


def _check_shard(path: Path, table: pa.Table) -> None:
    for name in table.column_names:
        if table.column(name).null_count and name in REQUIRED:
            raise AtlasError(f"{path}: column {name!r} has {table.column(name).null_count} null values")
    k = table.column("k").to_numpy()
    a = table.column("accept_len").to_numpy()
    for name in NONNEGATIVE:
        col = table.column(name).to_numpy()
        if col.size and col.min() < 0:
            bad = int(np.argmax(col < 0))
            raise AtlasError(f"{path}: negative {name} ({int(col[bad])}) at row {bad}")
    over = a > k
    if over.any():
        bad = int(np.argmax(over))
        raise AtlasError(f"{path}: accept_len > k at row {bad} (accept_len={int(a[bad])}, k={int(k[bad])})")


def _read_shard(path: Path, columns: list[str], optional: tuple[str, ...]) -> pa.Table:
    try:
        schema = pq.read_schema(path)
        missing = [c for c in columns if c not in schema.names]
        if missing:
            raise AtlasError(f"{path}: missing required column {missing[0]!r}")
        for c in REQUIRED:
            t = schema.field(c).type
            if not pa.types.is_integer(t):
                raise AtlasError(f"{path}: column {c!r} has type {t}, expected an integer type")
        cols = columns + [c for c in optional if c in schema.names and c not in columns]
        table = pq.read_table(path, columns=cols)
    except AtlasError:
        raise
    except (pa.ArrowException, OSError) as e:
        raise AtlasError(f"{path}: unreadable Parquet ({e.__class__.__name__}: {str(e).splitlines()[0]})") from None
    return table


def _check_unique(root: Path, files: list[Path], lengths: list[int], df: pd.DataFrame) -> None:
    """(doc_id, turn, step) must be unique. Runs are written in key order, so an
    O(n) monotonicity check usually settles it; otherwise sort a packed key."""
    d = df["doc_id"].to_numpy(np.int64)
    t = df["turn"].to_numpy(np.int64)
    s = df["step"].to_numpy(np.int64)
    tb = int(t.max()) + 1
    sb = int(s.max()) + 1
    if float(d.max() + 1) * tb * sb < 2**62:
        key = (d * tb + t) * sb + s
        if key.size < 2 or (np.diff(key) > 0).all():
            return
        order = np.argsort(key, kind="stable")
        dup_sorted = np.flatnonzero(key[order][1:] == key[order][:-1])
        if dup_sorted.size == 0:
            return
        row = int(order[dup_sorted[0] + 1])
    else:  # keys too wide to pack: let pandas hash the triples
        dup = df.duplicated(["doc_id", "turn", "step"]).to_numpy()
        if not dup.any():
            return
        row = int(np.argmax(dup))
    shard = int(np.searchsorted(np.cumsum(lengths), row, side="right"))
    where = files[min(shard, len(files) - 1)]
    raise AtlasError(
        f"{where}: duplicate (doc_id, turn, step) = ({d[row]}, {t[row]}, {s[row]})"
    )


def load_run(path: str | Path, columns: tuple[str, ...] = (), optional: tuple[str, ...] = (),
             allow_incomplete: bool = False) -> Run:
    """Load and validate a run directory.

    columns: extra columns that must be present (beyond REQUIRED);
    optional: extra columns read when present (e.g. ``oracle_hit2``).
    """
    root = Path(path)
    if not root.is_dir():
        raise AtlasError(f"{root}: run directory does not exist")
    manifest = read_manifest(root, allow_incomplete)
    # engine telemetry (atlas_ab/ingest): refuse what its grain cannot give, saying why
    tel = from_manifest(manifest, str(root / "manifest.json"))
    if tel is not None and not tel.has_steps:
        raise AtlasError(no_steps_line(root, tel))
    if tel is not None and "position" in columns and tel.why_not("position_pairing"):
        raise AtlasError(f"{root}: no step positions to pair on: {tel.why_not('position_pairing')}")
    files, warnings = shard_files(root, manifest, "steps")
    if not files:
        raise AtlasError(f"{root / 'steps'}: empty run (no steps/*.parquet shards)")

    want = list(REQUIRED) + [c for c in columns if c not in REQUIRED]
    tables = []
    for f in files:
        table = _read_shard(f, want, optional)
        _check_shard(f, table)
        tables.append(table)
    lengths = [t.num_rows for t in tables]
    if sum(lengths) == 0:
        raise AtlasError(f"{root / 'steps'}: empty run (shards hold no rows)")
    table = pa.concat_tables(tables, promote_options="permissive")
    df = table.to_pandas()
    for c, dtype in INT_TYPES.items():
        df[c] = df[c].astype(dtype)
    _check_unique(root, files, lengths, df)
    arm = (manifest or {}).get("arm") or root.resolve().name
    return Run(path=root, arm=str(arm), manifest=manifest, steps=df, files=tuple(files),
               warnings=tuple(warnings))


def provenance_mismatches(runs: list[Run]) -> list[str]:
    """Lines describing any workload.hash / model.hash difference between runs.

    A run without a hash (external telemetry, no manifest) cannot be checked and is
    not counted as a mismatch; see unchecked_provenance."""
    out = []
    for section in ("workload", "model"):
        known = [r for r in runs if r.hash(section) is not None]
        if len({r.hash(section) for r in known}) > 1:
            listed = ", ".join(f"{r.path}={r.hash(section)}" for r in known)
            out.append(f"runs differ in {section}.hash: {listed}")
    return out


def unchecked_provenance(runs: list[Run]) -> list[str]:
    # an engine run (atlas_ab/ingest) has a manifest but no hash of the served weights
    return [f"{r.path}: no workload.hash/model.hash ({'no manifest' if r.manifest is None else 'not in its manifest'}); "
            "provenance unchecked" for r in runs if r.hash("workload") is None or r.hash("model") is None]


def check_provenance(runs: list[Run], allow_mismatch: bool) -> list[str]:
    """Refuse runs that measured different workloads or models, unless allowed.

    Returns the mismatch lines (empty when they agree) so a report can state them.
    """
    lines = provenance_mismatches(runs)
    if lines and not allow_mismatch:
        raise AtlasError(lines[0] + " (pass --allow-mismatch to compare anyway)")
    return lines
