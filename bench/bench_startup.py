"""Start-up of a run before its first step, by phase (issue: speed), in one process.

    python bench/bench_startup.py [--model llama8b] [--json OUT] [--profile]

Phases: the interpreter's own start (from the kernel's record of the process); importing the
runner; composing the config (Hydra); building the Runner (weights on the device); the first wave
(its first steps capture the step graphs, and on a cold cache Triton compiles its kernels); the
same wave again (the run's graphs kept: no capture). Each wave's lossless gate is timed on its
own. Run it twice on one machine to see a cold and a warm Triton cache. --profile prints where
the Runner's build spends its time (cProfile, cumulative).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from atlas_ab.run.startup import since_process_start  # torch-free: the process's age, before torch loads

from goals import startup_goals, table as goals_table  # bench/goals.py (this folder is on sys.path)

T0 = time.perf_counter()
BEFORE_T0 = since_process_start()


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama8b")
    ap.add_argument("--docs", type=int, default=16)
    ap.add_argument("--turns", type=int, default=8, help="turns per document (8: the default workload's)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="the CI smoke: the default model, 2 documents")
    a = ap.parse_args(argv)
    if a.smoke:
        a.model, a.docs, a.turns = "default", 2, 2
    out = {"interpreter_s": BEFORE_T0, "smoke": a.smoke}
    t = time.perf_counter()
    import torch  # noqa: F401

    from atlas_ab.run.runner import Runner
    out["import_s"] = time.perf_counter() - t
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    t = time.perf_counter()
    from atlas_ab.run.session import compose_configs
    c = compose_configs([f"model={a.model}", "+arm=refeed_on", f"workload.n_docs={a.docs}",
                         f"workload.turns={a.turns}", f"runner.batch_width={a.docs}"])
    arm, model, workload, runner = c.arm, c.model, c.workload, c.runner
    out["compose_s"] = time.perf_counter() - t
    prof = None
    if a.profile:
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
    t = time.perf_counter()
    r = Runner(arm, model, workload, runner)
    sync()
    out["runner_init_s"] = time.perf_counter() - t
    if prof is not None:
        import pstats
        prof.disable()
        pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(30)
    out["before_first_step_s"] = (BEFORE_T0 or 0.0) + time.perf_counter() - T0
    out["sympy_imported_by_then"] = "sympy" in sys.modules      # (it costs ~2 s to import there)
    import atlas_ab.run.runner as runner_module
    import atlas_ab.speculative.lossless_gate as gate_module
    spent: dict[str, float] = {}
    keys: list[str] = []

    def timed(module, fn: str, key: str):
        """Time every call of module.fn (synchronised) into spent[key]."""
        inner = getattr(module, fn)
        keys.append(key)

        def wrapper(*args, **kw):
            sync()
            t0 = time.perf_counter()
            res = inner(*args, **kw)
            sync()
            spent[key] = spent.get(key, 0.0) + time.perf_counter() - t0
            return res
        setattr(module, fn, wrapper)
    timed(runner_module, "check", "gate_s")                     # the whole gate ...
    timed(gate_module, "teacher_forced", "gate_forward_s")      # ... its one forward per sequence group
    timed(gate_module, "trunk_in", "gate_fp32_copy_s")          # ... and the arbitration's fp32 copy
    timed(gate_module, "fp32_logits", "gate_fp32_forward_s")    # ... and its fp32 forwards
    for name in ("first_wave", "same_wave_again"):
        t = time.perf_counter()
        spent.clear()
        res = r.run_wave(0)
        sync()
        steps = res.steps.to_pandas()
        per_step = steps.groupby(["turn", "step"]).agg(step_ms=("step_ms", "first"), warmup_ms=("warmup_ms", "first"))
        out[name] = dict(wall_s=time.perf_counter() - t, steps=len(per_step),
                         step_ms_sum=float(per_step.step_ms.sum()), warmup_ms_sum=float(per_step.warmup_ms.sum()),
                         **{k: spent.get(k, 0.0) for k in keys},
                         gate_checked_tokens=res.gate.get("checked_tokens"), gate_arbitrated=res.gate.get("arbitrated"),
                         gate_passed=bool(res.gate.get("passed")))
        out[name]["gate_over_steps"] = out[name]["gate_s"] / (out[name]["step_ms_sum"] / 1e3)
    out["sympy_imported_by_the_end"] = "sympy" in sys.modules
    out["process_to_first_wave_end_s"] = (BEFORE_T0 or 0.0) + time.perf_counter() - T0
    goals = startup_goals(out)
    out["goals"] = [g.as_dict() for g in goals]
    print(json.dumps(out, indent=1))
    print(goals_table(goals), file=sys.stderr)
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    sys.exit(main())
