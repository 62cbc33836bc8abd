"""What the bench scripts print, write and time alike (`python bench/X.py` puts this folder on sys.path)."""
from __future__ import annotations

import argparse
import json
import time

import torch

from atlas_ab.runtime.graphs import StaticStep


def acceptance_line(s: dict) -> str:
    """The acceptance summary `python -m atlas_ab` prints (run/session.py `acceptance_summary`), in a line."""
    return (f"p1 {s['p1']:.4f}  p2_uncond {s['p2_uncond']:.4f}  p2_cond {s['p2_cond']:.4f}  "
            f"tokens/step {s['tokens_per_step']:.3f}  n {s['n_steps']}")


def dump_json(path: str | None, res: dict) -> None:
    """The results to `path` (--json), if one was given."""
    if path:
        with open(path, "w") as f:
            json.dump(res, f, indent=2)


def arm_study_args(doc: str, arms: list[str], argv=None, smoke_help: str = "a tiny workload (CI)"):
    """The options of the scripts that run arms through the real runner on the default model
    (--arms, --smoke, --json, --threads); returns them and the workload (tiny under --smoke)."""
    import torch

    from atlas_ab.config.structured import WorkloadConfig
    p = argparse.ArgumentParser(description=doc.split("\n")[0])
    p.add_argument("--arms", default=",".join(arms))
    p.add_argument("--smoke", action="store_true", help=smoke_help)
    p.add_argument("--json")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    wl = WorkloadConfig(n_docs=4, turns=2, chunk_tokens=16, gen_tokens=8) if a.smoke else WorkloadConfig()
    return a, wl


# ---- timing: a function captured in one CUDA graph and replayed, as the runner runs its steps ------
def sync(dev) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def graphed(f, dev):
    """f warmed up and captured in one CUDA graph (runtime/graphs.py: calling it replays); f itself
    on the CPU, after one call (the interpreter's first call builds the kernels)."""
    with torch.no_grad():
        if dev.type != "cuda":
            f()
            return f
        return StaticStep(f, [])


def replay_ms(step, dev, reps: int) -> float:
    """Mean ms of `reps` calls of a captured step, after three of warm-up (none on the CPU)."""
    with torch.no_grad():
        for _ in range(3 if dev.type == "cuda" else 0):
            step()
        sync(dev)
        t0 = time.perf_counter()
        for _ in range(reps):
            step()
        sync(dev)
    return (time.perf_counter() - t0) / reps * 1e3


def graphed_ms(f, dev, reps: int) -> float:
    """Mean ms of f() replayed from one CUDA graph (eager on the CPU), after warm-up."""
    return replay_ms(graphed(f, dev), dev, reps)
