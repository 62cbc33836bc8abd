"""Replay vs live for a sweep, in one process (issue #12): what the target's share of the cost is.

    python bench/bench_replay.py [--arms a,b,...] [--smoke] [--json OUT]

The same workload (the default one: 16 held-out documents x 8 turns), N arms (default: the
refeed study's catchup_on and refeed_on, plus drafter_prefill_on, ring_prefill_on and k3),
each run live and replayed, through the real runner (`runner.Runner`, device auto):

  live    per wave: the speculative loop (+ fingerprint hashing) and the lossless gate's
          target-only replay of `gate_sequences` sequences, as a live run pays them;
  replay  the trajectory's build (once, in the first replayed arm: a cache in a temp dir),
          then per wave: loading it, the drafter's loop over it and the commit check.

Replay here checks no wave live (`replay_check_waves=0`: a check wave IS a live run of
that wave). Model load and workload build are excluded from both sides. Prints and writes
one JSON object: per-arm seconds, the sweep's totals and replay/live (with and without the
live gate), and how many replayed step rows differ from the live ones (drafts or
accept_len, paired on (doc_id, turn, position); 0 on CPU fp32). `--smoke`: the tiny
workload and two arms, for CI.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time

import torch

from atlas_ab.config.levers import compose_arm
from atlas_ab.config.structured import ModelConfig, RunnerConfig, WorkloadConfig
from atlas_ab.run.runner import Runner
from atlas_ab.speculative.replay_check import compare_live, replay_gate
from atlas_ab.speculative.targets import LiveTarget, ReplayTarget

from common import dump_json  # bench/common.py (this folder is on sys.path)

ARMS = ["catchup_on", "refeed_on", "drafter_prefill_on", "ring_prefill_on", "k3"]


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(f, *args):
    sync()
    t0 = time.perf_counter()
    out = f(*args)
    sync()
    return out, time.perf_counter() - t0


def live_arm(arm, model, wl, rc):
    r = Runner(arm, model, wl, rc)
    wave_s = gate_s = 0.0
    steps = []
    for i in range(len(r.waves)):
        docs = r.docs_of(i)
        trace, dt = timed(r._wave, LiveTarget(r.trunk, r.graphs), docs)
        steps.append((trace.steps.table(), trace.generated))
        wave_s += dt
        gate, dt = timed(r._live_gate, docs, trace)
        assert gate["passed"], gate["first_divergence"]
        gate_s += dt
    return {"wave_s": wave_s, "gate_s": gate_s, "rows": sum(s.num_rows for s, _ in steps)}, steps


def replay_arm(arm, model, wl, rc, live_steps):
    r, init_s = timed(Runner, arm, model, wl, rc)
    info = r.info.replay
    load_s = wave_s = check_s = 0.0
    rows = differ = left = 0
    for i in range(len(r.waves)):
        docs = r.docs_of(i)
        traj, dt = timed(r.trajectories.load, i)
        load_s += dt
        trace, dt = timed(r._wave, ReplayTarget(traj, r.device, graphs=r.graphs), docs)   # as the runner replays
        wave_s += dt
        gate, dt = timed(replay_gate, traj, trace.generated)
        assert gate["passed"], gate["first_divergence"]
        check_s += dt
        c = compare_live(traj, trace.steps.table(), *live_steps[i])
        rows, differ, left = rows + c["rows_matched"], differ + c["rows_differ"], left + c["trajectories_left"]
    return {"build_s": info["build_s"] or 0.0, "built": info["built"], "init_s": init_s, "load_s": load_s,
            "wave_s": wave_s, "check_s": check_s, "rows_matched": rows, "rows_differ": differ,
            "trajectories_left": left, "bytes": info["bytes"], "bytes_per_position": info["bytes_per_position"]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arms", default=",".join(ARMS), help="arms (conf/arm names), comma-separated")
    p.add_argument("--smoke", action="store_true", help="tiny workload, two arms (CI)")
    p.add_argument("--json", help="also write the result here")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    arms = ["catchup_on", "refeed_on"] if a.smoke else a.arms.split(",")
    wl = WorkloadConfig(n_docs=4, turns=2, chunk_tokens=16, gen_tokens=8) if a.smoke else WorkloadConfig()
    model = ModelConfig()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    with tempfile.TemporaryDirectory(prefix="bench_replay_") as cache:
        rc_live = RunnerConfig(device=dev, progress=False)
        rc_replay = RunnerConfig(device=dev, progress=False, mode="replay", trajectories=cache,
                                 replay_check_waves=0)
        if dev == "cuda":             # CUDA context, kernels' first launches: not any arm's cost
            live_arm(compose_arm([f"+arm={arms[0]}"]), model, WorkloadConfig(n_docs=2, turns=1), rc_live)
        per_arm = {}
        for name in arms:
            arm = compose_arm([f"+arm={name}"])
            live, steps = live_arm(arm, model, wl, rc_live)
            rep = replay_arm(arm, model, wl, rc_replay, steps)
            per_arm[name] = {"live": live, "replay": rep}
            print(f"{name:22s} live {live['wave_s']:7.2f}s + gate {live['gate_s']:6.2f}s   replay "
                  f"{rep['wave_s']:7.2f}s (+ build {rep['build_s']:.2f}s, load {rep['load_s']:.2f}s)   "
                  f"rows differ {rep['rows_differ']}/{rep['rows_matched']}", flush=True)
    live_s = sum(v["live"]["wave_s"] + v["live"]["gate_s"] for v in per_arm.values())
    live_loop_s = sum(v["live"]["wave_s"] for v in per_arm.values())
    build_s = sum(v["replay"]["build_s"] for v in per_arm.values())
    replay_s = build_s + sum(v["replay"]["load_s"] + v["replay"]["wave_s"] + v["replay"]["check_s"]
                             for v in per_arm.values())
    res = {"smoke": a.smoke, "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
           "torch": torch.__version__, "threads": torch.get_num_threads(), "arms": arms,
           "workload": {"n_docs": wl.n_docs, "turns": wl.turns, "chunk_tokens": wl.chunk_tokens,
                        "gen_tokens": wl.gen_tokens},
           "per_arm": per_arm, "live_s": live_s, "live_loop_s": live_loop_s, "build_s": build_s,
           "replay_s": replay_s, "ratio": replay_s / live_s, "ratio_vs_loop_only": replay_s / live_loop_s,
           "rows_differ": sum(v["replay"]["rows_differ"] for v in per_arm.values()),
           "rows_matched": sum(v["replay"]["rows_matched"] for v in per_arm.values())}
    print(f"sweep of {len(arms)} arms: live {live_s:.2f}s (loop {live_loop_s:.2f}s + gate), replay {replay_s:.2f}s "
          f"(build {build_s:.2f}s once)  replay/live {res['ratio']:.3f} ({res['ratio_vs_loop_only']:.3f} against the "
          f"live loop alone)")
    dump_json(a.json, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
