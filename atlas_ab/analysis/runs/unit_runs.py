"""Any run as its per-unit table (metrics.Units): an ingested engine run's counts table (ingest
writes it: telemetry/schema.py COUNT_COLUMNS), or a step run reduced to one unit per (doc_id, turn).
What each grain gives of each metric is comparison/per_unit.py's."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from atlas_ab import AtlasError
from atlas_ab.analysis.metrics import Units, units_from_counts, units_from_steps
from atlas_ab.analysis.runs.base import AnyRun, rows_in
from atlas_ab.analysis.runs.load import Run, check_written, load_run, read_manifest
from atlas_ab.telemetry.grain import Telemetry, from_manifest
from atlas_ab.telemetry.schema import REQUIRED_COUNT


@dataclass(frozen=True)
class UnitRun(AnyRun):
    """A run read as its per-unit table: an ingested counts table, or one reduced from steps."""

    path: Path
    arm: str
    manifest: dict | None
    telemetry: Telemetry | None
    units: Units
    warnings: tuple[str, ...] = ()

    @property
    def K(self) -> int:
        return self.units.K

    @property
    def clusters(self) -> str | None:
        return "doc_id" if self.telemetry is None else self.telemetry.clusters

    @property
    def source(self) -> str:
        return "atlas" if self.telemetry is None else f"{self.telemetry.source} ({self.telemetry.format})"

    @property
    def grain(self) -> str:
        return "steps" if self.telemetry is None else self.telemetry.grain

    def why_not(self, figure: str) -> str | None:
        return None if self.telemetry is None else self.telemetry.why_not(figure)

    @property
    def has_steps(self) -> bool:
        return False

    def cells(self) -> Units:
        """What metrics.compare takes, as Run.cells() gives a step run's (metrics.doc_sums reads both)."""
        return self.units

    def declared_clusters(self, unit: str) -> tuple[None, str]:
        return None, self.units.cluster_unit

    def counts(self, clusters: tuple) -> Units:
        return self.units

    def of_turns(self, turns: str) -> UnitRun:
        if turns != "all":
            raise AtlasError(f"{self.path}: a run without a step table is judged over all turns only, not "
                             f"{turns} turns")
        return self

    def rows_per_cluster(self, cmap, ids: np.ndarray) -> np.ndarray:
        t = self.units.table
        weight = np.asarray([0 if v is None or v != v else int(v) for v in t["n"]], np.float64)
        return rows_in(t["doc_id"].to_numpy(np.int64), weight, self.units.cluster_map, ids)


def needs_units(path, allow_incomplete: bool = False) -> bool:
    """True for an ingested run whose manifest says it has no step table."""
    root = Path(path)
    if not root.is_dir():
        return False
    t = from_manifest(read_manifest(root, allow_incomplete), str(root / "manifest.json"))
    return t is not None and not t.has_steps


def load_units(path, allow_incomplete: bool = False) -> UnitRun:
    root = Path(path)
    if not root.is_dir():
        raise AtlasError(f"{root}: run directory does not exist")
    manifest = read_manifest(root, allow_incomplete)
    tel = from_manifest(manifest, str(root / "manifest.json"))
    arm = str((manifest or {}).get("arm") or root.resolve().name)
    if tel is not None and tel.grain == "events":
        raise AtlasError(f"{root}: {tel.source} telemetry holds fingerprint events only; `fingerprints RUN` reads it")
    if tel is not None and "counts" in tel.tables:
        shard = next((s for s in manifest.get("shards") or [] if isinstance(s, dict) and s.get("counts")), None)
        rel = shard["counts"] if shard else None
        if rel is None or not (root / rel).exists():
            raise AtlasError(f"{root / 'manifest.json'}: telemetry lists a counts table but no shard holds one")
        try:
            df = pq.read_table(root / rel).to_pandas()
        except (pa.ArrowException, OSError) as e:
            raise AtlasError(f"{root / rel}: unreadable Parquet ({e.__class__.__name__})") from None
        check_written(root / rel, shard, "counts", len(df))
        missing = [c for c in REQUIRED_COUNT if c not in df.columns]
        if missing:
            raise AtlasError(f"{root / rel}: missing column {missing[0]!r} (written by an older ingest: ingest "
                             "the engine's files again)")
        unit = {"doc_id": "document", "request": "request"}.get(tel.clusters) if tel.clusters else None
        units = units_from_counts(df, arm, unit, tel.not_available, str(root))
    else:
        return from_run(load_run(root, allow_incomplete=allow_incomplete))
    if units.table.empty:
        raise AtlasError(f"{root}: no unit with a verify step")
    return UnitRun(root, arm, manifest, tel, units)


def from_run(run: Run) -> UnitRun:
    """A loaded step run at the per-unit grain (what a report of it beside an engine run reads)."""
    cmap, cunit = run.clusters
    units = units_from_steps(run.steps, run.arm, run.K, cmap, cunit)
    if units.table.empty:
        raise AtlasError(f"{run.path}: no unit with a verify step")
    return UnitRun(run.path, run.arm, run.manifest, run.telemetry, units, run.warnings)


# ---- one metric of one run -------------------------------------------------------------------


# ---- two runs paired request by request -------------------------------------------------------


