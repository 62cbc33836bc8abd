"""Benchmark: the analysis over 10 million step rows (two runs of 5M).

    python bench/bench_analysis.py [--rows 5000000] [--docs 2000] [--bootstrap 2000]

Generates two synthetic runs (written as Parquet into a temp dir; not timed), then
times each stage of what `compare` does: load (validation included), the cell
counts (one bincount), every per-arm figure, and the comparison of every headline
metric with binomial/delta se, document-clustered se and a document bootstrap.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # the checkout: its tests/helpers write the runs

from atlas_ab.analysis.comparison import compare_runs  # noqa: E402
from atlas_ab.analysis.metrics import arm_metrics, cell_counts  # noqa: E402
from atlas_ab.analysis.runs import load_run  # noqa: E402
from tests.helpers.synth import simulate_steps, write_run  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=5_000_000, help="rows per run (two runs)")
    ap.add_argument("--docs", type=int, default=2000)
    ap.add_argument("--bootstrap", type=int, default=2000)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        for i, (arm, p) in enumerate((("off", (0.61, 0.686)), ("on", (0.626, 0.711)))):
            df = simulate_steps(args.rows, p, n_docs=args.docs, doc_sd=0.3, serial_frac=0.02, seed=i)
            write_run(Path(tmp) / arm, df, arm, shards=4)
            del df
        print(f"generated + written {2 * args.rows:,} rows in {time.perf_counter() - t0:.1f} s (not timed)")

        timings = {}
        t = time.perf_counter()
        runs = [load_run(Path(tmp) / arm) for arm in ("off", "on")]
        timings["load + validate"] = time.perf_counter() - t
        t = time.perf_counter()
        cells = [cell_counts(r.steps, r.arm) for r in runs]
        timings["cell counts"] = time.perf_counter() - t
        t = time.perf_counter()
        for c in cells:
            arm_metrics(c)
        timings["per-arm metrics"] = time.perf_counter() - t
        t = time.perf_counter()
        comp = compare_runs(runs[0], runs[1], "p2_uncond", n_boot=args.bootstrap, seed=0)
        timings["compare (4 metrics: binomial/delta, cluster se, bootstrap)"] = time.perf_counter() - t

    total = sum(timings.values())
    for name, s in timings.items():
        print(f"{name:<60} {s:6.2f} s")
    print(f"{'total (10M rows)' if args.rows == 5_000_000 else 'total':<60} {total:6.2f} s"
          f"   [{os.cpu_count()} CPUs]")
    print(comp.primary.summary())


if __name__ == "__main__":
    main()
