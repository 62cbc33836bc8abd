"""The step as one graph or two (propose, then verify, launched back to back), A/B in one process.

    python bench/bench_split_step.py [--models gpu,llama8b] [--widths 16,64] [--ks 1,2,3] [--json OUT]

For each shape: each variant on its own target and proposer (kept across its waves, as a run keeps
its graphs), a warm-up wave each, then `--reps` alternations; the step median of each wave, and
the graphed bare verify of the same shape, so both read as step / bare.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from statistics import median

import torch

sys.path.insert(0, str(Path(__file__).parent))
from bench_runner import GRAPHS, bare_forward_ms, docs_for, load_models, run_wave  # noqa: E402

from atlas_ab.config.structured import ArmConfig  # noqa: E402
from atlas_ab.proposers.mtp_head import MTPProposer  # noqa: E402
from atlas_ab.speculative import loop  # noqa: E402
from atlas_ab.speculative.targets import LiveTarget  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="gpu,llama8b")
    ap.add_argument("--widths", default="16,64")
    ap.add_argument("--ks", default="1,2,3")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--smoke", action="store_true", help="the default model on the CPU, tiny (CI)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    models, widths, ks = a.models.split(","), [int(w) for w in a.widths.split(",")], [int(k) for k in a.ks.split(",")]
    turns, chunk, gen, reps = 2, 64, 32, a.reps
    if a.smoke:
        models, widths, ks, turns, chunk, gen, reps = ["default"], [2], [2], 1, 16, 6, 1
    out = {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu", "rows": []}
    for name in models:
        ck = load_models(name, dev, dtype)
        trunk, mtp = ck.trunk.eval(), ck.mtp.eval()
        for B in widths:
            docs = docs_for(B, turns, chunk, gen)
            for K in ks:
                arm = ArmConfig(name=f"k{K}", num_drafts=K, catchup=True, refeed=True)
                kept = {v: (LiveTarget(trunk, GRAPHS), MTPProposer(trunk, mtp, arm.row_space, arm.refeed))
                        for v in ("one", "two")}
                step_ms, rows = {"one": [], "two": []}, {}
                for i in range(reps + 1):
                    for v in ("one", "two"):
                        loop.SPLIT_STEP = v == "two"
                        r, trace = run_wave(trunk, kept[v][1], arm, docs, gen, target=kept[v][0])
                        if i:                       # the first of each is its warm-up (captures)
                            step_ms[v].append(r["step_ms_median"])
                        rows[v] = trace.steps.table().drop_columns(["step_ms", "warmup_ms"])
                loop.SPLIT_STEP = False
                bare = bare_forward_ms(trunk, B, K, int(r["mean_position"]), dev, 5 if a.smoke else 50)
                one, two = median(step_ms["one"] or [float("nan")]), median(step_ms["two"] or [float("nan")])
                row = dict(model=name, B=B, K=K, bare_ms=bare, one_graph_ms=one, two_graphs_ms=two,
                           one_over_bare=one / bare, two_over_bare=two / bare, runs=step_ms,
                           same_rows=rows["one"].equals(rows["two"]))
                out["rows"].append(row)
                print(f"{name:8s} B={B:3d} K={K} bare {bare:.3f} ms  one graph {one:.3f} ms (x{one / bare:.3f})  "
                      f"two {two:.3f} ms (x{two / bare:.3f})  same rows {row['same_rows']}", file=sys.stderr)
    print(json.dumps(out, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    sys.exit(main())
