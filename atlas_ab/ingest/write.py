"""Write an ingested run directory in the contract (docs/telemetry.md), atomically as the store does.

The manifest says `running` first, then each table lands via a temporary file and a
rename (atlas_ab.atomic), and only then does the manifest list the shards, with each
table's row count and sha256, and say `complete`. A crash leaves a `running` run that the
analysis refuses, never half-written data that reads as a result.
"""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from atlas_ab import AtlasError
from atlas_ab.atomic import write_json, write_table
from atlas_ab.clock import now
from atlas_ab.run.store import MANIFEST
from atlas_ab.telemetry.grain import Telemetry
from atlas_ab.telemetry.schema import MANIFEST_SCHEMA, SHARD_ROWS

SHARD = "part-00000.parquet"


def check_out(out: Path, own_running: bool = False, create: bool = True) -> None:
    """Refuse a directory that already holds a run (unless it is the caller's own running one)."""
    mf = out / MANIFEST
    if mf.exists() and not own_running:
        raise AtlasError(f"{out} already holds a run (manifest.json); choose another --out")
    if not create:
        return
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-probe.tmp"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise AtlasError(f"run directory {out} is not writable: {e.strerror or e}") from None


def write_run(out: str | Path, telemetry: Telemetry, arm: str, *, steps: pa.Table | None = None,
              counts: pa.Table | None = None, events: pa.Table | None = None, base: dict | None = None,
              own_running: bool = False) -> dict:
    """Write the tables and the manifest (status complete last); returns the manifest."""
    out = Path(out)
    check_out(out, own_running)
    manifest = {"schema": MANIFEST_SCHEMA, "status": "running", "arm": arm, "levers": {},
                "model": {"name": None, "hash": None}, "workload": {"hash": None},
                "started": now(), **(base or {})}
    manifest.update(status="running", arm=arm, telemetry=telemetry.to_dict(), shards=[],
                    rows={"steps": 0, "events": 0, "counts": 0}, finished=None)
    try:
        write_json(out / MANIFEST, manifest)
        shard, rows = {"steps": None, "events": None, "counts": None, "sha256": {}}, {}
        for name, table in (("steps", steps), ("counts", counts), ("events", events)):
            if table is None:
                continue
            (out / name).mkdir(exist_ok=True)
            shard["sha256"][name] = write_table(out / name / SHARD, table)
            shard[name] = f"{name}/{SHARD}"
            shard[SHARD_ROWS[name]] = rows[name] = table.num_rows
        if steps is not None:
            shard["rows"] = steps.num_rows
            shard["docs"] = sorted({int(d) for d in steps.column("doc_id").to_pylist()})
        manifest["shards"] = [shard]
        manifest["rows"] = {"steps": rows.get("steps", 0), "events": rows.get("events", 0),
                            "counts": rows.get("counts", 0)}
        manifest.update(status="complete", finished=now())
        write_json(out / MANIFEST, manifest)
    except OSError as e:
        raise AtlasError(f"cannot write the run in {out}: {e.strerror or e}") from None
    return manifest
