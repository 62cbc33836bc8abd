"""A run's wave loop with its shards written in line or behind the next wave (runner.write_behind),
FINGERPRINTS on and off, alternated in one process.

    python bench/bench_writes.py [--model default] [--docs 1024] [--batch 256] [--reps 5] [--json OUT]

Each timed run is the session's loop: every wave of the workload through the Runner (its lossless
gate included), each wave's shard submitted to a ShardWriter over a fresh RunStore, until the last
shard has landed. The four runs (FINGERPRINTS off/on x in line/behind) alternate `reps` times after
one warm-up each; the figures are medians of the alternations' own ratios. Also the time
`add_shard` itself takes (the encode, hash and fsync the writer moves off the loop).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="default")
    ap.add_argument("--docs", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--turns", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--smoke", action="store_true", help="CPU, 4 documents of 2 turns, one alternation")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    if a.smoke:
        a.docs, a.batch, a.turns, a.reps = 4, 2, 2, 1
    from atlas_ab.run.runner import Runner
    from atlas_ab.run.session import compose_configs
    from atlas_ab.run.shard_writer import ShardWriter
    from atlas_ab.run.store import RunStore
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    runners = {}
    for fp in (False, True):
        c = compose_configs([f"model={a.model}", "+arm=refeed_on", f"arm.fingerprints={str(fp).lower()}",
                             f"workload.n_docs={a.docs}", f"workload.turns={a.turns}", f"runner.batch_width={a.batch}"]
                            + (["workload.chunk_tokens=16", "workload.gen_tokens=6"] if a.smoke else []))
        runners[fp] = Runner(c.arm, c.model, c.workload, c.runner)
    write_s: dict = {}

    def run(fp: bool, behind: bool, root: Path) -> dict:
        """One run of every wave; returns its wall time and rows."""
        r = runners[fp]
        store = RunStore(root / f"fp{int(fp)}_behind{int(behind)}_{time.monotonic_ns()}")
        store.dir.mkdir()
        store.lock()
        store.start({})
        add = store.add_shard

        def timed_add(*args, **kw):
            t0 = time.perf_counter()
            try:
                return add(*args, **kw)
            finally:
                write_s.setdefault((fp, behind), []).append(time.perf_counter() - t0)
        store.add_shard = timed_add
        sync()
        t0 = time.perf_counter()
        rows = 0
        try:
            with ShardWriter(store, behind=behind) as w:
                for i in range(len(r.waves)):
                    t1 = time.perf_counter()
                    res = r.run_wave(i)
                    rows += res.steps.num_rows
                    w.submit(i, r.waves[i], res.steps, res.events, res.gate, res.n_tokens, time.perf_counter() - t1)
            wall = time.perf_counter() - t0
        finally:
            store.unlock()
        return {"wall_s": wall, "rows": rows}

    keys = [(fp, behind) for fp in (False, True) for behind in (False, True)]
    name = {k: f"fp_{'on' if k[0] else 'off'}_{'behind' if k[1] else 'in_line'}" for k in keys}
    walls = {k: [] for k in keys}
    with tempfile.TemporaryDirectory() as tmp:
        for k in keys:                                   # warm-up: graphs captured, kernels compiled
            run(*k, Path(tmp))
        write_s.clear()
        for _ in range(a.reps):
            for k in keys:
                r = run(*k, Path(tmp))
                walls[k].append(r["wall_s"])
                rows = r["rows"]
    ratio = lambda x, y: statistics.median(p / q for p, q in zip(walls[y], walls[x]))   # noqa: E731  x's speed / y's
    out = {"device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu", "model": a.model,
           "docs": a.docs, "batch": a.batch, "turns": a.turns, "waves": len(runners[True].waves), "rows": rows,
           "alternations": a.reps, "smoke": a.smoke,
           "wall_s": {name[k]: v for k, v in walls.items()},
           "add_shard_ms_median": {name[k]: 1e3 * statistics.median(v) for k, v in write_s.items()},
           "fingerprints_on_over_off": {"in_line": ratio((True, False), (False, False)),
                                        "behind": ratio((True, True), (False, True))},
           "behind_over_in_line": {"fp_off": ratio((False, True), (False, False)),
                                   "fp_on": ratio((True, True), (True, False))}}
    print(json.dumps(out, indent=1))
    print(f"throughput, FINGERPRINTS on / off: shards in line {out['fingerprints_on_over_off']['in_line']:.3f}, "
          f"behind {out['fingerprints_on_over_off']['behind']:.3f}; behind / in line: FINGERPRINTS off "
          f"{out['behind_over_in_line']['fp_off']:.3f}, on {out['behind_over_in_line']['fp_on']:.3f}; "
          f"add_shard ms {out['add_shard_ms_median']}", file=sys.stderr)
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
