"""Start-up of a run before its first step, by phase (issue: speed), in one process.

    python bench/bench_startup.py [--model llama8b] [--json OUT]

Phases: importing the runner; composing the config (Hydra); building the Runner (weights on the
device); the first wave (its first steps capture the step graphs, and on a cold cache Triton
compiles its kernels); the same wave again (the run's graphs kept: no capture). Run it twice on
one machine to see a cold and a warm Triton cache.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

T0 = time.perf_counter()


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama8b")
    ap.add_argument("--docs", type=int, default=16)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    out = {}
    t = time.perf_counter()
    import torch  # noqa: F401

    from atlas_ab.run.runner import Runner
    out["import_s"] = time.perf_counter() - t
    t = time.perf_counter()
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from atlas_ab.config.store import CONF_DIR
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"model={a.model}", "+arm=refeed_on",
                                                       f"workload.n_docs={a.docs}", "workload.turns=2",
                                                       f"runner.batch_width={a.docs}"])
    arm, model, workload, runner = (OmegaConf.to_object(cfg[k]) for k in ("arm", "model", "workload", "runner"))
    out["compose_s"] = time.perf_counter() - t
    t = time.perf_counter()
    r = Runner(arm, model, workload, runner)
    torch.cuda.synchronize()
    out["runner_init_s"] = time.perf_counter() - t
    for name in ("first_wave", "same_wave_again"):
        t = time.perf_counter()
        res = r.run_wave(0)
        torch.cuda.synchronize()
        steps = res.steps.to_pandas()
        per_step = steps.groupby(["turn", "step"]).agg(step_ms=("step_ms", "first"), warmup_ms=("warmup_ms", "first"))
        out[name] = dict(wall_s=time.perf_counter() - t, steps=len(per_step),
                         step_ms_sum=float(per_step.step_ms.sum()), warmup_ms_sum=float(per_step.warmup_ms.sum()),
                         gate_passed=bool(res.gate.get("passed")))
    out["process_to_first_wave_end_s"] = time.perf_counter() - T0
    print(json.dumps(out, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    sys.exit(main())
