"""End to end: what a user waits for, each job a fresh `python -m atlas_ab` process (issue 41).

    python bench/bench_e2e.py [--jobs main,main,main_cpu,claims,llama8b] [--workdir DIR] [--json OUT] [--smoke]

Jobs (run in the order given, each in its own process from --workdir, so a repeated job finds the
caches the earlier one left: the first `main` is cold on a fresh machine, the second warm):
  - main: `python -m atlas_ab +arm=refeed_on` (the default model and workload);
  - main_cpu: the same with runner.device=cpu (the goal: the GPU never slower than the CPU);
  - main_eager: the same with runner.cuda_graphs=false (no capture, nothing compiled: every step
    launched from Python);
  - main_fuse: the same with its bookkeeping compiled (runner.fuse_bookkeeping=true; by default a run
    this short does not compile it);
  - main_pool: main_fuse with inductor's own default, a pool of compile workers (compile_cache sets
    TORCHINDUCTOR_COMPILE_THREADS=1: the pool, used even to load cached kernels, held the exit);
  - main_cold_1t, main_cold_pool: main_fuse cold again (caches of their own), inductor compiling in
    the process / through its pool;
  - main_prof, llama8b_prof, claims_prof: main / llama8b / claims under cProfile (TAG.pstats in the workdir);
  - claims: `-m +study=claims` (13 arms, replayed);
  - tree: `-m +study=tree` (3 arms, live: the tree's steps captured on the Triton path);
  - llama8b: `model=llama8b workload.n_docs=64 runner.batch_width=64` (the 5.7B shape, 64 x 8).
Each job's wall time is the process's, start to exit; its manifest's `timings` (run/startup.py)
say where it went. The JSON is rewritten as each job ends (a job past --job-timeout is killed and
recorded as such, never as a figure). The goals (bench/goals.py `e2e_goals`) are one run each.
--smoke: tiny workloads and two claims arms (the CPU check of the mechanics; not timed).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from goals import e2e_goals, table as goals_table  # bench/goals.py (this folder is on sys.path)

ROOT = Path(__file__).resolve().parents[1]
JOBS = {
    "main": ["+arm=refeed_on"],
    "main_cpu": ["+arm=refeed_on", "runner.device=cpu"],
    "main_eager": ["+arm=refeed_on", "runner.cuda_graphs=false"],
    # the bookkeeping compiled (the main job is too short for runner.fuse_bookkeeping=null to compile it)
    "main_fuse": ["+arm=refeed_on", "runner.fuse_bookkeeping=true"],
    "main_pool": ["+arm=refeed_on", "runner.fuse_bookkeeping=true"],
    # cold again (caches of their own), inductor compiling in the process / through its worker pool
    "main_cold_1t": ["+arm=refeed_on", "runner.fuse_bookkeeping=true", "runner.compile_cache={workdir}/cache_1t"],
    "main_cold_pool": ["+arm=refeed_on", "runner.fuse_bookkeeping=true",
                       "runner.compile_cache={workdir}/cache_pool"],
    "main_prof": ["+arm=refeed_on"],
    "claims": ["-m", "+study=claims"],
    "claims_prof": ["-m", "+study=claims"],
    "tree": ["-m", "+study=tree"],
    "llama8b": ["model=llama8b", "workload.n_docs=64", "runner.batch_width=64"],
    "llama8b_prof": ["model=llama8b", "workload.n_docs=64", "runner.batch_width=64"],
}
#: inductor's own default: a pool of compile workers, one per core (compile_cache sets 1 otherwise)
POOL = {"TORCHINDUCTOR_COMPILE_THREADS": str(min(32, os.cpu_count() or 1))}
JOB_ENV = {"main_cold_1t": {"TORCHINDUCTOR_COMPILE_THREADS": "1"}, "main_pool": POOL, "main_cold_pool": POOL}
#: jobs run under cProfile (the interpreter's options before `-m atlas_ab`): TAG.pstats in the workdir
PROFILED = ("main_prof", "llama8b_prof", "claims_prof")
SMOKE = {
    **{j: ["workload=tiny"] for j in JOBS if j.startswith("main")},
    "claims": ["workload.n_docs=4", "workload.turns=1", "runner.batch_width=4", "+arm=baseline,refeed_on"],
    "claims_prof": ["workload.n_docs=4", "workload.turns=1", "runner.batch_width=4", "+arm=baseline,refeed_on"],
    "tree": ["workload.n_docs=4", "workload.turns=1", "runner.batch_width=4", "+arm=baseline,tree_top2"],
    "llama8b": ["model=default", "workload=tiny"],
    "llama8b_prof": ["model=default", "workload=tiny"],
}


def manifests(run: Path) -> list[dict]:
    """The run's manifest, or a sweep's jobs' manifests in job order."""
    if (run / "manifest.json").is_file():
        return [json.loads((run / "manifest.json").read_text())]
    found = sorted(run.glob("*/manifest.json"), key=lambda p: int(p.parent.name.split("_", 1)[0])
                   if p.parent.name.split("_", 1)[0].isdigit() else 1 << 30)
    return [json.loads(p.read_text()) for p in found]


def run_job(name: str, tag: str, workdir: Path, timeout: float, smoke: bool, extra: list[str]) -> dict:
    args = [x.format(workdir=workdir) for x in JOBS[name]] + (SMOKE[name] if smoke else []) + extra
    sweep = "-m" in args
    out_dir = workdir / tag
    where = [f"hydra.sweep.dir={out_dir}"] if sweep else [f"hydra.run.dir={out_dir}"]
    prof = ["-m", "cProfile", "-o", str(workdir / f"{tag}.pstats")] if name in PROFILED else []
    cmd = [sys.executable, *prof, "-m", "atlas_ab", *args, "runner.progress=false",
           f"runner.trajectories={workdir / 'trajectories'}", *where]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.update(JOB_ENV.get(name, {}))
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout)
        rc, stdout, stderr = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc = "timeout"
        stdout, stderr = (x.decode() if isinstance(x, bytes) else (x or "") for x in (e.stdout, e.stderr))
    wall = time.perf_counter() - t0
    (workdir / f"{tag}.log").write_text(" ".join(cmd) + "\n" + stdout + stderr)
    ms = manifests(out_dir) if out_dir.is_dir() else []
    done = rc == 0 and ms and all(m.get("status") == "complete" for m in ms)
    res = dict(job=name, tag=tag, cmd=cmd, rc=rc, complete=bool(done), wall_s=wall if done else None,
               elapsed_s=wall, jobs=len(ms), device=ms[0].get("device") if ms else None,
               timings=[m.get("timings") for m in ms],
               # the process's wall time past its (last) job's summary: teardown, for one, at exit
               after_summary_s=wall - ms[-1]["timings"]["total"] if done and ms[-1].get("timings")
               and len(ms) == 1 else None,
               summaries=[{"arm": m.get("arm"), **(m.get("summary") or {})} for m in ms],
               time_lines=[ln for ln in stdout.splitlines() if ln.startswith("time: ")],
               stderr_tail=stderr[-1500:] if not done else "")
    print(f"{tag}: {'complete' if done else f'NOT complete (rc {rc})'} in {wall:.1f} s"
          + (f"  {res['time_lines'][0]}" if res["time_lines"] else ""), file=sys.stderr)
    return res


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", default="main,main,main_cpu,claims,llama8b")
    ap.add_argument("--workdir", default=None, help="where the runs go (default: a new directory under /tmp)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--job-timeout", type=float, default=240.0)
    ap.add_argument("--smoke", action="store_true", help="tiny workloads (the CPU check; not timed)")
    ap.add_argument("--extra", default="", help="overrides added to every job (space-separated)")
    a = ap.parse_args(argv)
    for j in a.jobs.split(","):
        if j not in JOBS:
            print(f"bench_e2e: error: --jobs: unknown job {j!r} (known: {', '.join(JOBS)})", file=sys.stderr)
            return 2
    workdir = Path(a.workdir or f"/tmp/bench_e2e_{os.getpid()}").resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    out = {"date": time.strftime("%Y-%m-%d"), "smoke": a.smoke, "workdir": str(workdir), "runs": []}
    seen: dict[str, int] = {}
    for j in a.jobs.split(","):
        seen[j] = seen.get(j, 0) + 1
        out["runs"].append(run_job(j, f"{j}_{seen[j]}", workdir, a.job_timeout, a.smoke, a.extra.split()))
        out["goals"] = [g.as_dict() for g in e2e_goals(out["runs"])]
        if a.json:
            Path(a.json).write_text(json.dumps(out, indent=1))
    goals = e2e_goals(out["runs"])
    print(json.dumps(out, indent=1))
    print(goals_table(goals), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
