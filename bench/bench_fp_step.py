"""FINGERPRINTS in the step: where its cost goes (issue: speed), in one process.

    python bench/bench_fp_step.py [--json OUT]

The fingerprint kernel alone at a step's row counts (replayed from a CUDA graph), and a
profiled refeed wave with FINGERPRINTS on and off: the device's kernel time per step and
the step's median, so the on/off gap splits into device (hashing) and host (events) time.
On the GPU also the captured run-ahead step's own time (its graph replayed, CUDA events):
FINGERPRINTS off, on (hashed on a branch beside the step's path, runtime/side_stream.py) and
on with the hashing in line, alternated: the device's whole in-step cost, free of host noise.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from atlas_ab.config.structured import ArmConfig  # noqa: E402
from atlas_ab.proposers.mtp_head import MTPProposer  # noqa: E402
from atlas_ab.runtime.side_stream import SideStream  # noqa: E402
from atlas_ab.speculative.loop import Wave  # noqa: E402
from atlas_ab.speculative.targets import LiveTarget  # noqa: E402
from atlas_ab.telemetry.fingerprint import fingerprint_rows  # noqa: E402

from bench_runner import docs_for, load_models, profile_wave  # noqa: E402
from common import graphed_ms  # noqa: E402


def step_graph_ms(trunk, mtp, docs, reps: int = 7, replays: int = 200) -> dict:
    """The run-ahead step graph's replay time (ms, median of `reps` alternations of `replays`
    replays each) for FINGERPRINTS off / on (beside the path) / on in line (the side branch
    replaced by a stream-less one: the hashing on the step's path, as before the branch)."""
    kept, graphs = [], {}
    for name in ("off", "on", "on_inline"):
        target, proposer = LiveTarget(trunk, True), MTPProposer(trunk, mtp, "compact", True)
        fp = name != "off"
        wave = Wave(target, proposer, ArmConfig(catchup=True, refeed=True, fingerprints=fp), docs, 32,
                    fingerprint_rows=fingerprint_rows if fp else None)
        if name == "on_inline":
            wave.probe.side = SideStream(torch.device("cpu"))
        wave.run()
        kept.append((target, proposer, wave))       # the graphs replay into their memory
        (graphs[name],) = [s.graph for k, s in target.step_graphs._graphs.items() if k[0] == "ahead"]
    ms = {name: [] for name in graphs}
    for _ in range(reps):
        for name, g in graphs.items():
            for _ in range(10):
                g.replay()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(replays):
                g.replay()
            b.record()
            torch.cuda.synchronize()
            ms[name].append(a.elapsed_time(b) / replays)
    # the host's side: one replay's launch on an idle device, and a chunk of 8 launched back to back
    # (as `RunAhead.launch` does; a launch that finds the device's queue full waits in it)
    launch_us = {name: [] for name in graphs}
    chunk_us = {name: [] for name in graphs}
    for _ in range(reps):
        for name, g in graphs.items():
            for store, n in ((launch_us, 1), (chunk_us, 8)):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(n):
                    g.replay()
                store[name].append((time.perf_counter() - t0) * 1e6)
                torch.cuda.synchronize()
    med = {name: statistics.median(v) for name, v in ms.items()}
    return {"replay_ms_median": med, "replay_ms": ms, "on_minus_off_ms": med["on"] - med["off"],
            "on_inline_minus_off_ms": med["on_inline"] - med["off"],
            "launch_us_median": {k: statistics.median(v) for k, v in launch_us.items()},
            "chunk_of_8_launch_us_median": {k: statistics.median(v) for k, v in chunk_us.items()}}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--model", default="default")
    ap.add_argument("--batch", type=int, default=256)
    a = ap.parse_args(argv)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    ck = load_models(a.model, dev, torch.bfloat16 if dev.type == "cuda" else torch.float32)
    trunk, mtp = ck.trunk.eval(), ck.mtp.eval()
    H = trunk.args.hidden_size
    out = {"model": a.model, "hidden": H, "kernel_us": {}, "waves": {}}
    for n in (a.batch * 12, a.batch * 48):          # a step's rows (2 + W + 2(K+1) per sequence)
        x = torch.randn(n, H, device=dev, dtype=torch.bfloat16)
        out["kernel_us"][n] = graphed_ms(lambda x=x: fingerprint_rows(x), dev, 200) * 1e3
    docs = docs_for(a.batch, 2, 64, 32)
    for name, fp in (("off", False), ("on", True)):
        arm = ArmConfig(name=f"refeed_fp_{name}", catchup=True, refeed=True, fingerprints=fp)
        out["waves"][name] = w = profile_wave(trunk, mtp, arm, docs, 32, top=8)
        print(f"{name}: step {w['unprofiled_step_ms_median']:.3f} ms, device {w['device_ms_per_step']:.3f} ms/step, "
              f"events table {w['events_table_ms']:.1f} ms/wave; host by stage: "
              + ", ".join(f"{k} {v:.3f}" for k, v in w["host_split_ms_per_step"].items()), file=sys.stderr)
    if dev.type == "cuda":
        out["step_graph"] = {}
        for B in sorted({a.batch, 64}):
            out["step_graph"][B] = g = step_graph_ms(trunk, mtp, docs_for(B, 2, 64, 32))
            print(f"B={B}: step graph {g['replay_ms_median']['off']:.4f} ms off; FINGERPRINTS "
                  f"{g['on_minus_off_ms']:+.4f} ms beside the path, {g['on_inline_minus_off_ms']:+.4f} in line; "
                  f"launch us {g['launch_us_median']}, a chunk of 8 {g['chunk_of_8_launch_us_median']}",
                  file=sys.stderr)
    print(json.dumps(out, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
