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

import sys

import pyarrow as pa

from atlas_ab.config.levers import compose_arm
from atlas_ab.config.structured import ModelConfig, RunnerConfig
from atlas_ab.run.runner import Runner
from atlas_ab.run.session import acceptance_summary

from common import acceptance_line, arm_study_args, dump_json  # bench/common.py (this folder is on sys.path)

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
    a, wl = arm_study_args(__doc__, ARMS, argv, smoke_help="the tiny workload, catchup_on vs ring_prefill_on (CI)")
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
              f"{acceptance_line(s)}", flush=True)
    dump_json(a.json, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
