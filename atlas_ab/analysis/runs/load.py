"""Read one run directory (docs/telemetry.md) into a validated steps DataFrame.

Only the columns asked for are read (pyarrow column projection), because the
step tables are large and the metrics need five integer columns. Every problem
is one AtlasError line naming the file it was found in; nothing is dropped.
The data read is the data written: each shard's row count and sha256 must be the ones its
manifest lists, and a complete run's table directory holds exactly the files listed.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from atlas_ab import AtlasError
from atlas_ab.analysis.metrics import EXPECTED_COLUMNS, Cells, cell_counts
from atlas_ab.analysis.runs.base import AnyRun, rows_in
from atlas_ab.atomic import sha256_file
from atlas_ab.telemetry.grain import from_manifest, no_steps_line
from atlas_ab.telemetry.schema import REQUIRED_STEP as REQUIRED, SHARD_ROWS, STEP_INT_TYPES as INT_TYPES


NONNEGATIVE = REQUIRED
#: A run's final statuses: every wave ran, or its sequential study stopped it at a look (run/store.py)
FINAL = ("complete", "stopped")


@dataclass(frozen=True)
class Run(AnyRun):
    """A step run: where it came from, its provenance and its steps (one row per step)."""

    path: Path
    arm: str
    manifest: dict | None
    steps: pd.DataFrame
    files: tuple[Path, ...]
    warnings: tuple[str, ...] = field(default=())

    @property
    def K(self) -> int:
        """The arm's configured K: the manifest's num_drafts, else the largest k any step submitted."""
        k = ((self.manifest or {}).get("levers") or {}).get("num_drafts")
        return int(k) if k is not None else int(self.steps["k"].max())

    @property
    def clusters(self) -> tuple[object, str]:
        """(doc_id -> cluster map or None, the cluster unit) from the manifest's workload."""
        w = (self.manifest or {}).get("workload") or {}
        if w.get("doc_cluster") is not None and w.get("cluster_unit", "document") != "document":
            return w["doc_cluster"], w["cluster_unit"]
        return None, "document"

    @property
    def has_steps(self) -> bool:
        return True

    def cells(self) -> Cells:
        """The run's count table (metrics.Cells) with its K and cluster map."""
        return self.counts(self.clusters)

    def declared_clusters(self, unit: str) -> tuple[np.ndarray | None, str]:
        # a workload whose documents each come from their own file has no map: its files are its documents
        if unit == "document":
            return None, "document"
        cmap, words = self.clusters
        return (cmap, words) if cmap is not None else (None, "document")

    def counts(self, clusters: tuple) -> Cells:
        return cell_counts(self.steps, self.arm, K=self.K, clusters=clusters[0], cluster_unit=clusters[1])

    def of_turns(self, turns: str) -> Run:
        if turns == "all":
            return self
        t = self.steps["turn"]
        return replace(self, steps=self.steps[(t == 0) if turns == "cold" else (t >= 1)])

    def rows_per_cluster(self, cmap, ids: np.ndarray) -> np.ndarray:
        doc = self.steps["doc_id"].to_numpy(np.int64)
        return rows_in(doc, np.ones(len(doc)), cmap, ids)

    @property
    def telemetry(self):
        """An ingested run's grain and what it makes exact (None for our own runs)."""
        return from_manifest(self.manifest, str(self.path / "manifest.json"))

    def __str__(self) -> str:
        return f"{self.arm} ({self.path}, {len(self.steps):,} steps, K={self.K})"


def read_manifest(root: Path, allow_incomplete: bool = False) -> dict | None:
    """The run's manifest (None without one); a run not `complete` (or `stopped` by its sequential
    study) is refused unless allow_incomplete."""
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
    if status not in FINAL and not allow_incomplete:
        raise AtlasError(f"{mf}: run status is {status!r}, not 'complete' "
                         "(pass --allow-incomplete to analyse it anyway)")
    return manifest


def shard_files(root: Path, manifest: dict | None, table: str = "steps") -> tuple[list[Path], list[str]]:
    """The Parquet shards of one table (`steps` or `events`) and warnings.

    With a manifest that lists shards, exactly those files (a shard may have no events file).
    Anything else on disk is refused in a `complete` run (its manifest and its files disagree)
    and ignored loudly in an unfinished one (debris of a crash, which a resume overwrites)."""
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
    if debris and manifest.get("status") in FINAL:
        raise AtlasError(f"{debris[0]}: not listed in the complete run's manifest.json shards "
                         "(an entry was removed or a file added after the run): refused")
    warnings = [f"{p}: not listed in manifest.json shards; ignored" for p in debris]
    return listed, warnings


def _shard_entries(root: Path, manifest: dict | None, table: str) -> dict[Path, dict]:
    """The manifest's shard entry of each listed file of `table`, by resolved path."""
    out = {}
    for shard in (manifest or {}).get("shards") or []:
        if isinstance(shard, dict) and shard.get(table):
            out[(root / shard[table]).resolve()] = shard
    return out


def check_written(path: Path, shard: dict, table: str, rows: int) -> None:
    """Refuse a shard file whose row count or sha256 is not the one its manifest entry lists."""
    want = shard.get(SHARD_ROWS.get(table, ""))
    if want is not None and int(want) != rows:
        raise AtlasError(f"{path}: {rows} rows, but manifest.json lists {want} for it "
                         "(the file was rewritten after the run): refused")
    sha = (shard.get("sha256") or {}).get(table)
    if sha is not None:
        got = sha256_file(path)
        if got != sha:
            raise AtlasError(f"{path}: sha256 {got[:12]}, but manifest.json lists {sha[:12]} for it "
                             "(the file was replaced or rewritten after the run): refused")


def unhashed_line(root: Path, manifest: dict | None) -> str | None:
    """The warning for a manifest written before shards carried a sha256 (None otherwise)."""
    shards = [s for s in (manifest or {}).get("shards") or [] if isinstance(s, dict)]
    if shards and not any(s.get("sha256") for s in shards):
        return (f"{root}: manifest.json records no shard sha256 (written before shard hashes): "
                "its shards' row counts are checked, their bytes are not")
    return None


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


def _read_shard(path: Path, columns: list[str], optional: tuple[str, ...] = (),
                integer: tuple[str, ...] = ()) -> pa.Table:
    """One shard's `columns` (all required) plus whichever `optional` ones it has; the
    `integer` columns must have an integer type."""
    try:
        schema = pq.read_schema(path)
        missing = [c for c in columns if c not in schema.names]
        if missing:
            raise AtlasError(f"{path}: missing required column {missing[0]!r}")
        for c in integer:
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


def open_run(path: str | Path, allow_incomplete: bool = False) -> tuple[Path, dict | None]:
    """A run directory and its manifest (None without one): the one way every reader opens a run."""
    root = Path(path)
    if not root.is_dir():
        raise AtlasError(f"{root}: run directory does not exist")
    return root, read_manifest(root, allow_incomplete)


def read_shards(root: Path, manifest: dict | None, table: str, columns: list[str], optional=(),
                integer=(), check=None) -> tuple[list[pa.Table], list[Path], list[str]]:
    """Every listed shard of one table (`steps`/`events`), read and checked; plus the warnings."""
    files, warnings = shard_files(root, manifest, table)
    if not files:
        what = "steps/*.parquet shards" if table == "steps" else "fingerprint events (was FINGERPRINTS on?)"
        raise AtlasError(f"{root / table}: empty run (no {what})" if table == "steps" else
                         f"{root / table}: no {what}")
    entries = _shard_entries(root, manifest, table)
    unhashed = unhashed_line(root, manifest)
    if unhashed:
        warnings.append(unhashed)
    tables = []
    for f in files:
        t = _read_shard(f, list(columns), tuple(optional), tuple(integer))
        if check is not None:
            check(f, t)
        if f.resolve() in entries:
            check_written(f, entries[f.resolve()], table, t.num_rows)
        tables.append(t)
    return tables, files, warnings


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
    root, manifest = open_run(path, allow_incomplete)
    # engine telemetry (atlas_ab/ingest): refuse what its grain cannot give, saying why
    tel = from_manifest(manifest, str(root / "manifest.json"))
    if tel is not None and not tel.has_steps:
        raise AtlasError(no_steps_line(root, tel))
    if tel is not None and "position" in columns and tel.why_not("position_pairing"):
        raise AtlasError(f"{root}: no step positions to pair on: {tel.why_not('position_pairing')}")
    want = list(REQUIRED) + [c for c in columns if c not in REQUIRED]
    optional = tuple(optional) + EXPECTED_COLUMNS       # a sampled run's exact acceptance probabilities
    tables, files, warnings = read_shards(root, manifest, "steps", want, optional, integer=REQUIRED,
                                          check=_check_shard)
    lengths = [t.num_rows for t in tables]
    if sum(lengths) == 0:
        raise AtlasError(f"{root / 'steps'}: empty run (shards hold no rows)")
    listed_rows = ((manifest or {}).get("rows") or {}).get("steps")
    if (manifest or {}).get("status") in FINAL and listed_rows is not None and int(listed_rows) != sum(lengths):
        raise AtlasError(f"{root / 'manifest.json'}: lists {listed_rows} step rows in all, but its shards hold "
                         f"{sum(lengths)}: refused")
    table = pa.concat_tables(tables, promote_options="permissive")
    df = table.to_pandas()
    for c, dtype in INT_TYPES.items():
        df[c] = df[c].astype(dtype)
    _check_unique(root, files, lengths, df)
    arm = (manifest or {}).get("arm") or root.resolve().name
    run = Run(path=root, arm=str(arm), manifest=manifest, steps=df, files=tuple(files), warnings=tuple(warnings))
    if manifest is not None and run.gate_status == "not run":
        warnings.append(f"{root}: the lossless gate checked no sequence (gate not run): nothing shows that "
                        "this run's drafts were verified losslessly")
    return replace(run, warnings=tuple(warnings))


