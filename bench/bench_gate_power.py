"""The lossless gate's power: the probability that a default run's gate fails, per injected lossy bug.

    python bench/bench_gate_power.py [--device cpu|cuda] [--model default|llama8b] [--runs 20] [--json OUT]

Bugs (bench/lossy.py), each injected into greedy verification from the outside: a wrong draft
accepted at rate r (1%, 0.1% of rejected drafts), the draft committed instead of the target's token
once per sequence, the accepted count one too high at rate r; and none (the false-alarm rate).

A default run: `+arm=refeed_on` on the default workload's documents, cut to a small workload per
run (`--turns`, 2 by default: 2 x 64 context x 32 generated tokens per sequence), in the device's
default dtype (fp32 on the CPU, bf16 on a GPU) with the bound it measures at start, gating
`gate_sequences` sequences a wave (the device's default: 2 on the CPU, 8 on a GPU).
A run's gate sees only its gated sequences, so a run is simulated by those alone: its documents are
its own (run i: documents i*g .. i*g+g-1 of the workload), and one wave verifies every run's rows at
once, eagerly (CUDA graphs off: the bug is Python on the verify's output; the gate reads the committed
text only). Run i's bug draws from seed i. Per cell: P(gate fails) over the runs, with a 95% Wilson
interval, the hits that reached the committed text per run, and why a hit passed (a near-tie:
within the bound of the fp32 top-1).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from lossy import Lossy  # noqa: E402  (bench/lossy.py)

CELLS = (("none", 0.0), ("wrong_accept", 0.01), ("wrong_accept", 0.001), ("draft_for_bonus", None),
         ("off_by_one", 0.01), ("off_by_one", 0.001))


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of k successes in n."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    c = (p + z * z / (2 * n)) / (1 + z * z / n)
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, c - h), min(1.0, c + h))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--model", default="default")
    ap.add_argument("--runs", type=int, default=20, help="seeded runs per cell")
    ap.add_argument("--turns", type=int, default=2, help="turns per sequence (the default workload has 8)")
    ap.add_argument("--gate-sequences", type=int, default=None, help="gated sequences per run (default: the device's)")
    ap.add_argument("--cells", default=None, help="bug:rate,... (default: every cell; rate '-' for once per sequence)")
    ap.add_argument("--smoke", action="store_true", help="2 runs of 2 turns, two cells (CI)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    import torch

    from atlas_ab.config.structured import GATE_SEQUENCES
    from atlas_ab.run.runner import Runner
    from atlas_ab.run.session import compose_configs
    from atlas_ab.speculative.lossless_gate import check
    if a.smoke:
        a.runs, a.turns, a.cells = 2, 2, a.cells or "none:0,wrong_accept:0.01"
    cells = CELLS if not a.cells else [(b, None if r == "-" else float(r))
                                       for b, r in (c.split(":") for c in a.cells.split(","))]
    dev_type = torch.device(a.device).type
    g = a.gate_sequences if a.gate_sequences is not None else GATE_SEQUENCES[dev_type]
    n = a.runs * g
    c = compose_configs([f"model={a.model}", "+arm=refeed_on", f"runner.device={a.device}",
                         f"workload.n_docs={n}", f"workload.turns={a.turns}", f"runner.batch_width={n}",
                         "runner.cuda_graphs=false", "runner.progress=false"])
    t0 = time.perf_counter()
    r = Runner(c.arm, c.model, c.workload, c.runner)
    docs, G = r.docs_of(0), r.workload.gen_tokens
    out = {"device": a.device, "device_name": r.info.device, "model": a.model, "dtype": r.info.dtype,
           "runs": a.runs, "gate_sequences": g, "turns": a.turns, "gen_tokens": G,
           "near_tie_bound": r.near_tie.to_dict(), "setup_s": time.perf_counter() - t0, "cells": []}
    print(f"{a.model} on {r.info.device} ({r.info.dtype}), {a.runs} runs x {g} gated sequences x {a.turns} turns "
          f"x {G} tokens; bound {r.near_tie.source} E={r.near_tie.forward_error:.3g} u*m")
    for bug, rate in cells:
        t = time.perf_counter()
        # draft_for_bonus: each sequence's hit at its first rejection from a seeded step within the
        # first quarter of its steps (a turn's G tokens take G / tokens-per-step steps, ~2 per step)
        lossy = Lossy(bug if bug != "none" else "wrong_accept", 0.0 if bug == "none" else (rate or 0.0),
                      docs, G, g, first_steps=max(1, a.turns * G // 8))
        with lossy.installed():
            trace = r._wave(r._live_target(), docs)
        t_wave = time.perf_counter() - t
        res = check(r.trunk, docs, trace.generated, G, list(range(n)), r._arbiter, r.near_tie)
        landed = lossy.landed(docs, trace.generated)
        bad = {x["doc_id"] for x in res.arbitrations if x["verdict"] == "clear margin"}
        fails = [any(d.doc_id in bad for d in docs[i * g:(i + 1) * g]) for i in range(a.runs)]
        hits = [sum(landed[i * g:(i + 1) * g]) for i in range(a.runs)]
        k = sum(fails)
        lo, hi = wilson(k, a.runs)
        cell = {"bug": bug, "rate": rate, "runs": a.runs, "failed": k, "p_fail": k / a.runs, "ci95": [lo, hi],
                "hits_per_run_mean": sum(hits) / a.runs, "runs_hit": sum(h > 0 for h in hits),
                "failed_of_runs_hit": sum(f for f, h in zip(fails, hits) if h > 0),
                "hits_recorded": len(lossy.hits), "hits_landed": sum(landed),
                "divergences": res.divergences, "near_ties": res.near_ties,
                "checked_tokens": res.checked_tokens, "wave_s": t_wave, "gate_s": time.perf_counter() - t - t_wave}
        out["cells"].append(cell)
        what = bug if rate is None else f"{bug} @ {rate:g}"
        print(f"  {what:<24} P(gate fails) {k}/{a.runs} = {k / a.runs:.2f} [{lo:.2f}, {hi:.2f}]; runs hit "
              f"{cell['runs_hit']}, of them failed {cell['failed_of_runs_hit']}; "
              f"hits/run {cell['hits_per_run_mean']:.2f}; {res.divergences} divergences, {res.near_ties} near-ties; "
              f"wave {t_wave:.1f} s, gate {cell['gate_s']:.1f} s")
    out["total_s"] = time.perf_counter() - t0
    out["smoke"] = a.smoke
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
