"""DRAFTER_PREFILL + CATCHUP at turn boundaries, on the default model and workload.

    python bench/prefill_boundary_rows.py [--arms a,b,...] [--smoke] [--threads N] [--json OUT]

At a warm turn's drafter prefill the catch-up first feeds the rows the ring holds below the
prefill's first key (the previous turn's last accepted drafts, under REFEED); its 'feed' events
carry step -1. For each arm (default: prefill_catchup, prefill_refeed), live, through the real
runner: warm turn boundaries, the boundaries and rows so fed, and the acceptance summary
`python -m atlas_ab +arm=NAME` prints. Run on a tree without that feed, the boundary counts are 0.
"""
from __future__ import annotations

import argparse
import json
import sys

import pyarrow as pa
import pyarrow.compute as pc
import torch

from atlas_ab.config.levers import compose_arm
from atlas_ab.config.structured import ModelConfig, RunnerConfig, WorkloadConfig
from atlas_ab.run.runner import Runner
from atlas_ab.run.session import acceptance_summary

ARMS = ["prefill_catchup", "prefill_refeed"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arms", default=",".join(ARMS))
    p.add_argument("--smoke", action="store_true", help="a tiny workload (CI)")
    p.add_argument("--json")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    wl = WorkloadConfig(n_docs=4, turns=2, chunk_tokens=16, gen_tokens=8) if a.smoke else WorkloadConfig()
    res = {}
    for name in a.arms.split(","):
        arm = compose_arm([f"+arm={name}", "arm.fingerprints=true"])
        r = Runner(arm, ModelConfig(), wl, RunnerConfig(progress=False))
        steps, fed = [], []
        for i in range(len(r.waves)):
            out = r.run_wave(i)
            assert out.gate["passed"], out.gate["first_divergence"]
            steps.append(out.steps)
            ev = out.events
            fed.append(ev.filter(pc.and_(pc.equal(ev["kind"], "feed"), pc.equal(ev["step"], -1)))
                       .select(["doc_id", "turn"]))
        st, fed = pa.concat_tables(steps), pa.concat_tables(fed).to_pandas()
        warm = st.filter(pc.and_(pc.greater(st["turn"], 0), pc.equal(st["step"], 0))).num_rows
        res[name] = {"warm_boundaries": warm, "boundaries_fed": int(len(fed.drop_duplicates())),
                     "rows_fed": int(len(fed)), **acceptance_summary(st)}
        s = res[name]
        print(f"{name:18s} warm boundaries {warm}  fed at {s['boundaries_fed']}  rows {s['rows_fed']}  "
              f"p1 {s['p1']:.4f}  p2_uncond {s['p2_uncond']:.4f}  p2_cond {s['p2_cond']:.4f}  "
              f"tokens/step {s['tokens_per_step']:.3f}  n {s['n_steps']}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
