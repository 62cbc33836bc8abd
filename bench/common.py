"""What the bench scripts print and write alike (`python bench/X.py` puts this folder on sys.path)."""
from __future__ import annotations

import argparse
import json


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
