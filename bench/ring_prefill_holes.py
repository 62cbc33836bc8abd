"""RING_PREFILL on the default model and workload: how many turns carry the one-row hole.

    python bench/ring_prefill_holes.py [--arms a,b,...] [--smoke] [--json OUT]

A turn carries the hole when its drafter never holds pair key P-1 (P = the turn's first
generated position) once the run is over: read from the drafter's row bookkeeping
(`MTPProposer.row_key`), nothing rebuilds a key behind the drafter's newest row. For each
arm (default: catchup_on, ring_prefill_on, refeed_on, refeed_ring_prefill), live, through
the real runner: turns with a hole, turns whose first step was rejected outright (or
gated), and the acceptance summary `python -m atlas_ab +arm=NAME` prints.
"""
from __future__ import annotations

import argparse
import json
import sys

import pyarrow as pa
import torch

from atlas_ab.config.levers import compose_arm
from atlas_ab.config.structured import ModelConfig, RunnerConfig, WorkloadConfig
from atlas_ab.run.runner import Runner
from atlas_ab.run.session import acceptance_summary

ARMS = ["catchup_on", "ring_prefill_on", "refeed_on", "refeed_ring_prefill"]


def hole_turns(proposer, docs, G) -> list[tuple[int, int]]:
    out = []
    for b, d in enumerate(docs):
        keys = set(proposer.row_key[b, :proposer.rows[b]].tolist())
        P = 0
        for t, chunk in enumerate(d.chunks):
            P += len(chunk) + (G if t else 0)
            if P - 1 not in keys:
                out.append((d.doc_id, t))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arms", default=",".join(ARMS))
    p.add_argument("--smoke", action="store_true", help="the tiny workload, catchup_on vs ring_prefill_on (CI)")
    p.add_argument("--json")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    wl = WorkloadConfig(n_docs=4, turns=2, chunk_tokens=16, gen_tokens=8) if a.smoke else WorkloadConfig()
    arms = ARMS[:2] if a.smoke else a.arms.split(",")
    res = {}
    for name in arms:
        r = Runner(compose_arm([f"+arm={name}"]), ModelConfig(), wl, RunnerConfig(progress=False))
        holes, steps = [], []
        for i in range(len(r.waves)):
            out = r.run_wave(i)
            assert out.gate["passed"], out.gate["first_divergence"]
            holes += hole_turns(r.proposer, r.docs_of(i), wl.gen_tokens)
            steps.append(out.steps)
        st = pa.concat_tables(steps)
        df = st.select(["doc_id", "turn", "step", "accept_len", "gated"]).to_pandas()
        first = df[df.step == 0]
        rejected = int(((first.accept_len == 0) | first.gated).sum())
        res[name] = {"turns": len(first), "hole_turns": len(holes), "rejected_first_steps": rejected,
                     **acceptance_summary(st)}
        s = res[name]
        print(f"{name:22s} turns {s['turns']}  with the hole {s['hole_turns']}  first step rejected {rejected}  "
              f"p1 {s['p1']:.4f}  p2_uncond {s['p2_uncond']:.4f}  p2_cond {s['p2_cond']:.4f}  "
              f"tokens/step {s['tokens_per_step']:.3f}  n {s['n_steps']}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
