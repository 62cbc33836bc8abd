"""Two sweeps of the same study: does each arm hold the same steps, which device ran each job,
and how long each sweep took (first job's start to last job's finish, from the manifests).

    python scripts/compare_sweeps.py SWEEP_A SWEEP_B     -> one JSON object on stdout
"""
from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def runs(sweep: Path) -> dict[str, Path]:
    return {json.loads((d / "manifest.json").read_text())["arm"]: d
            for d in sorted(sweep.iterdir()) if (d / "manifest.json").exists()}


def steps(run: Path) -> pa.Table:
    m = json.loads((run / "manifest.json").read_text())
    t = pa.concat_tables([pq.read_table(run / s["steps"]) for s in m["shards"]])
    timing = [c for c in ("step_ms", "warmup_ms") if c in t.column_names]   # wall times differ run to run
    return t.drop(timing).sort_by([("doc_id", "ascending"), ("turn", "ascending"), ("step", "ascending")])


def span(sweep: Path) -> dict:
    ms = [json.loads((d / "manifest.json").read_text()) for d in runs(sweep).values()]
    t = lambda s: dt.datetime.fromisoformat(s)  # noqa: E731
    start, end = min(t(m["started"]) for m in ms), max(t(m["finished"]) for m in ms)
    return {"jobs": len(ms), "first_start": str(start), "last_finish": str(end),
            "seconds": (end - start).total_seconds(),
            "devices": {m["arm"]: (m.get("device_claim") or {}).get("device") for m in ms}}


def main(a: str, b: str) -> int:
    A, B = runs(Path(a)), runs(Path(b))
    arms = sorted(set(A) & set(B))
    equal = {arm: steps(A[arm]).equals(steps(B[arm])) for arm in arms}
    print(json.dumps({"arms": arms, "identical_steps": equal, "all_identical": all(equal.values()),
                      "a": {"path": a, **span(Path(a))}, "b": {"path": b, **span(Path(b))}}, indent=1))
    return 0 if all(equal.values()) else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
