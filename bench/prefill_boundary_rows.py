"""DRAFTER_PREFILL + CATCHUP at turn boundaries, on the default model and workload.

    python bench/prefill_boundary_rows.py [--arms a,b,...] [--smoke] [--threads N] [--json OUT]

At a warm turn's drafter prefill the catch-up first feeds the rows the ring holds below the
prefill's first key (the previous turn's last accepted drafts, under REFEED); its 'feed' events
carry step -1. For each arm (default: prefill_catchup, prefill_refeed), live, through the real
runner: warm turn boundaries, the boundaries and rows so fed, and the acceptance summary
`python -m atlas_ab +arm=NAME` prints. Run on a tree without that feed, the boundary counts are 0.
"""
from __future__ import annotations

import sys

import pyarrow as pa
import pyarrow.compute as pc

from atlas_ab.config.levers import compose_arm
from atlas_ab.config.structured import ModelConfig, RunnerConfig
from atlas_ab.run.runner import Runner
from atlas_ab.run.session import acceptance_summary

from common import acceptance_line, arm_study_args, dump_json  # bench/common.py (this folder is on sys.path)

ARMS = ["prefill_catchup", "prefill_refeed"]


def main(argv=None) -> int:
    a, wl = arm_study_args(__doc__, ARMS, argv)
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
              f"{acceptance_line(s)}", flush=True)
    dump_json(a.json, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
