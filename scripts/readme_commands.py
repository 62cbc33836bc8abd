"""Run every command of the README's "Run a study" block, as written, from a directory outside
the repository, on a tiny workload (tests/e2e/test_readme.py runs it; so can you).

    python scripts/readme_commands.py [--workdir DIR] [--keep] [--as-written]

The block is a tutorial read top to bottom; placeholders are filled from what the commands
before them wrote:
  RUN                          the run the last `python -m atlas_ab` command wrote
  RUN_A RUN_B                  the first two runs of the last sweep (`-m`)
  runs/multirun/<date>/<time>  the last sweep's directory
`python -m atlas_ab` commands get the tiny-workload overrides below appended (nothing else
is changed), unless --as-written: then they run on their real workloads (the claims study alone
is 13 arms x ~25,000 steps: many minutes on a CPU). Exit status: 0 when every command exited 0,
else 1 with the failing command.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TINY = ["workload=tiny", "runner.batch_width=4", "runner.progress=false"]
#: a study's own workload and runner settings would override workload=tiny: pin them too
STUDY_TINY = ["workload.n_docs=4", "workload.turns=2", "runner.batch_width=4"]


def readme_commands(readme: Path = ROOT / "README.md") -> list[str]:
    text = readme.read_text()
    m = re.search(r"^## Run a study\n.*?```bash\n(.*?)```", text, re.S | re.M)
    if not m:
        raise SystemExit("README.md: no ```bash block under '## Run a study'")
    lines = []
    for raw in m.group(1).splitlines():
        line = raw.split("  #")[0].strip()
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


def fill(cmd: str, state: dict, tiny: bool = True) -> str:
    if "runs/multirun/<date>/<time>" in cmd:
        cmd = cmd.replace("runs/multirun/<date>/<time>", str(state["sweep"]))
    for key in ("RUN_A", "RUN_B", "RUN"):
        if re.search(rf"\b{key}\b", cmd):
            cmd = re.sub(rf"\b{key}\b", str(state[key]), cmd)
    if tiny and re.search(r"python3? -m atlas_ab(\s|$)", cmd) and "--help" not in cmd:
        extra = TINY + (STUDY_TINY if "+study=" in cmd else [])
        # the overrides go to the atlas_ab command itself (before any pipe)
        head, sep, tail = cmd.partition(" | ")
        cmd = head + " " + " ".join(extra) + (sep + tail if sep else "")
    return cmd


def run_all(workdir: Path, verbose: bool = True, tiny: bool = True) -> int:
    env = dict(os.environ)
    env.pop("HYDRA_FULL_ERROR", None)
    state: dict = {}
    for raw in readme_commands():
        cmd = fill(raw, state, tiny)
        if verbose:
            print(f"$ {cmd}", flush=True)
        t0 = time.perf_counter()
        p = subprocess.run(["bash", "-c", cmd], cwd=workdir, env=env, capture_output=True, text=True)
        if verbose:
            tail = "\n".join("    " + s for s in p.stdout.strip().splitlines()[-3:])
            print(f"  ({time.perf_counter() - t0:.1f} s, exit {p.returncode})\n{tail}", flush=True)
        if p.returncode != 0:
            print(f"FAILED (exit {p.returncode}): {raw}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}", file=sys.stderr)
            return 1
        runs = re.findall(r"^run: (\S+)", p.stdout, re.M)
        if runs:
            state["RUN"] = Path(runs[-1])
        if re.search(r"python3? -m atlas_ab -m", cmd):
            sweeps = sorted((workdir / "runs" / "multirun").glob("*/*"))
            state["sweep"] = sweeps[-1]
            jobs = sorted(d for d in state["sweep"].iterdir() if (d / "manifest.json").exists())
            state["RUN_A"], state["RUN_B"] = jobs[0], jobs[1]
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", help="where to run them (default: a fresh temp dir outside the repo)")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    ap.add_argument("--as-written", action="store_true", help="no tiny-workload overrides: the real workloads")
    args = ap.parse_args()
    if args.workdir:
        workdir = Path(args.workdir)
        try:
            workdir.mkdir(parents=True, exist_ok=True)      # a new directory is the usual ask
        except OSError as e:
            ap.error(f"--workdir {workdir}: {e.strerror}")
        return run_all(workdir, tiny=not args.as_written)
    with tempfile.TemporaryDirectory(prefix="atlas_ab-readme-") as d:
        rc = run_all(Path(d), tiny=not args.as_written)
        if args.keep:
            keep = Path(tempfile.mkdtemp(prefix="atlas_ab-readme-kept-"))
            subprocess.run(["cp", "-r", f"{d}/.", str(keep)])
            print(f"kept: {keep}")
        return rc


if __name__ == "__main__":
    sys.exit(main())
