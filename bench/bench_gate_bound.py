"""The lossless gate's near-tie bound: is SAFETY x the calibration's forward error enough?

    python bench/bench_gate_bound.py [--model default] [--device cpu] [--json OUT]

A run measures the forward error E (|logit_bf16 - logit_fp32| / (u m), speculative/precision.py) over
its calibration batch: the first 4 documents' context, 256 tokens each. Two things can exceed it:
the workload's other positions (the batch is a sample), and the loop's own bf16 verify (a KV-cached
forward of other shapes than the gate's). This runs the default workload (16 documents x 8 turns) in
bf16 with every sequence gated against the ceiling, and reports, against the calibration's E:
  all_contexts  E over all 16 documents' whole context (8 x 64 tokens each)
  needed        per divergence, the E it needs to pass: fp32_margin / (2 u m)
SAFETY must cover the larger ratio.
"""
from __future__ import annotations

import argparse
import json

import torch


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="default")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--docs", type=int, default=16)
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    from atlas_ab.run.runner import Runner
    from atlas_ab.run.session import compose_configs
    from atlas_ab.speculative.precision import CEILING, SAFETY, UNIT_ROUNDOFF, calibration_tokens, forward_error
    c = compose_configs([f"model={a.model}", "+arm=refeed_on", "runner.dtype=bfloat16", f"runner.device={a.device}",
                         f"workload.n_docs={a.docs}", f"workload.turns={a.turns}", f"runner.batch_width={a.docs}",
                         f"runner.gate_sequences={a.docs}", "runner.progress=false"])
    r = Runner(c.arm, c.model, c.workload, c.runner)
    cal = r.near_tie
    docs = r.docs_of(0)
    everything = calibration_tokens(docs, seqs=len(docs), tokens=10 ** 6)
    e_all = forward_error(r.trunk, everything, torch.bfloat16)["ratio"]["max"]
    r.near_tie = CEILING                 # every divergence arbitrated, none failed by a tight bound
    g = r.run_wave(0).gate
    u = UNIT_ROUNDOFF[torch.bfloat16]
    needed = sorted(x["fp32_margin"] / (2 * u * max(x["magnitude"], 1.0)) for x in g["arbitrations"])
    E = cal.measured
    out = {"model": a.model, "device": a.device, "calibration": cal.to_dict(), "calibration_E": E,
           "all_contexts_E": e_all, "all_contexts_tokens": int(everything.numel()),
           "gate": {k: g[k] for k in ("checked_sequences", "checked_tokens", "divergences", "passed")},
           "needed_E": needed, "ratio_all_contexts": e_all / E,
           "ratio_needed_max": (needed[-1] / E) if needed else None, "safety": SAFETY}
    print(f"{a.model} on {a.device}, bf16: calibration E {E:.3f} over {cal.calibration['tokens']} tokens; "
          f"all {len(docs)} contexts E {e_all:.3f} ({e_all / E:.2f}x); {len(needed)} divergences in "
          f"{g['checked_tokens']} checked tokens, the largest needs E {needed[-1] if needed else 0:.3f} "
          f"({(needed[-1] / E) if needed else 0:.2f}x); SAFETY {SAFETY:g}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
