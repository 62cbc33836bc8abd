"""Every kernel of the captured run-ahead step, per step, beside the bare verify's and a bare draft's.

What the runner's step spends beyond its floor (bare verify + K drafts), kernel by kernel: the step
graph of a warm wave (the plain arm, random weights) is replayed N times from a mid-turn state under
torch.profiler, and so are bench_runner's bare verify and bare draft graphs. Per graph: kernels a
step, their busy time, the idle gaps between consecutive kernels (< 30 us: inside a graph), and every
kernel by name. Kernels whose names are not the forward's (`FORWARD`) are the step's glue.

    python bench/bench_step_kernels.py --model gpu --batch 64 --k 2 --json out.json

GPU only (the step is a CUDA graph there); bench/RESULTS.md, "The step's glue, kernel by kernel".
"""
from __future__ import annotations

import argparse
import collections
import json
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from atlas_ab.config.structured import ArmConfig
from atlas_ab.proposers.mtp_head import MTPProposer
from atlas_ab.speculative.run_ahead import RunAhead
from atlas_ab.speculative.targets import LiveTarget

from bench_runner import (  # this folder
    GRAPHS,
    bare_draft,
    bare_draft_ms,
    bare_forward,
    bare_forward_ms,
    docs_for,
    load_models,
    run_wave,
)
from common import graphed, replay_ms  # this folder

#: The forward's kernels (attention, GEMMs, norms, RoPE, SiLU, the head's top-1); the rest is glue.
FORWARD = ("attend", "combine", "nvjet", "sm90_", "cutlass", "gemm", "rmsnorm_rows", "add_rmsnorm", "skinny_mm",
           "rope_write", "silu_mul_rows", "top1_rows")
#: The glue inductor generated for the loop's compiled bookkeeping (runtime/fusion.py).
GENERATED = ("triton_poi_", "triton_per_", "triton_red_")


def kernels(prof) -> list:
    ev = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return sorted(ev, key=lambda e: e.time_range.start)


def summary(evs: list, per: int) -> dict:
    """Per step (`per` of them in evs): kernels, busy us, gaps under 30 us, and each kernel name's
    calls and us, the forward's and the glue's apart, and of the glue the generated kernels
    (`GENERATED`: the compiled bookkeeping)."""
    by = collections.defaultdict(lambda: [0, 0.0])
    for e in evs:
        by[e.name[:120]][0] += 1
        by[e.name[:120]][1] += e.time_range.elapsed_us()
    rows = sorted(([k, n / per, us / per] for k, (n, us) in by.items()), key=lambda r: -r[2])
    gaps = [b.time_range.start - a.time_range.end for a, b in zip(evs, evs[1:])]
    glue = [r for r in rows if not r[0].startswith(FORWARD)]
    generated = [r for r in glue if r[0].startswith(GENERATED)]
    return dict(kernels=len(evs) / per, busy_us=sum(r[2] for r in rows),
                gaps_us=sum(g for g in gaps if 0 <= g < 30) / per,
                glue_kernels=sum(r[1] for r in glue), glue_busy_us=sum(r[2] for r in glue),
                generated_kernels=sum(r[1] for r in generated), generated_busy_us=sum(r[2] for r in generated),
                rows=rows)


def profiled(fn, n: int) -> list:
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
    return kernels(p)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="gpu")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--replays", type=int, default=100)
    ap.add_argument("--json", default=None)
    ap.add_argument("--no-fuse", action="store_true",
                    help="the step's bookkeeping eager, as before runtime/fusion.py (for the comparison)")
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("bench_step_kernels: needs a GPU (the step it profiles is a CUDA graph)")
    dev = torch.device("cuda")
    ck = load_models(a.model, dev, torch.bfloat16)
    trunk, mtp = ck.trunk.eval(), ck.mtp.eval()
    docs, arm = docs_for(a.batch, 2, 64, 32), ArmConfig(name=f"k{a.k}", num_drafts=a.k)
    target, proposer = LiveTarget(trunk, GRAPHS, fuse=not a.no_fuse), MTPProposer(trunk, mtp, "compact", False)
    run_wave(trunk, proposer, arm, docs, 32, target=target)         # captures the step graphs
    # the device's book before the longest chunk of the next wave: a mid-turn state every replay restarts from
    books, launch = [], RunAhead.launch
    RunAhead.launch = lambda self, M, *a: books.append((M, self, self.book.clone())) or launch(self, M, *a)
    try:
        r, _ = run_wave(trunk, proposer, arm, docs, 32, target=target)
    finally:
        RunAhead.launch = launch
    _, ahead, book = max(books, key=lambda b: b[0])
    step = target.step_graphs._graphs[("ahead", None)]

    def replay():
        ahead.book.copy_(book)
        step.graph.replay()
    kv_len = int(r["mean_position"])
    out = dict(model=a.model, B=a.batch, K=a.k, fused=not a.no_fuse, device=torch.cuda.get_device_name(dev),
               torch=torch.__version__, kv_len=kv_len, wave_step_ms_median=r["step_ms_median"],
               step_graph_ms=replay_ms(replay, dev, a.replays),
               bare_verify_ms=bare_forward_ms(trunk, a.batch, a.k, kv_len, dev, 50),
               bare_draft_ms=bare_draft_ms(trunk, mtp, a.batch, kv_len, dev, 50))
    out["step"] = summary(profiled(replay, a.replays), a.replays)
    with torch.no_grad():
        for name, f in (("verify", bare_forward(trunk, a.batch, a.k, kv_len, dev)),
                        ("draft", bare_draft(trunk, mtp, a.batch, kv_len, dev))):
            out[name] = summary(profiled(graphed(f, dev), a.replays), a.replays)
    for k in ("step", "verify", "draft"):
        s = out[k]
        print(f"== {k}: {s['kernels']:.1f} kernels a step, busy {s['busy_us']:.1f} us, gaps {s['gaps_us']:.1f} us; "
              f"glue {s['glue_kernels']:.1f} kernels, {s['glue_busy_us']:.1f} us (generated by the compiled "
              f"bookkeeping: {s['generated_kernels']:.1f}, {s['generated_busy_us']:.1f} us)")
        for name, calls, us in s["rows"]:
            kind = "    " if name.startswith(FORWARD) else "gen " if name.startswith(GENERATED) else "glue"
            print(f"   {calls:6.2f} calls {us:8.2f} us  {kind}  {name[:100]}")
    print(f"step graph {out['step_graph_ms']:.4f} ms (with the book's copy), bare verify {out['bare_verify_ms']:.4f}, "
          f"bare draft {out['bare_draft_ms']:.4f}, the wave's step median {out['wave_step_ms_median']:.4f}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return out


if __name__ == "__main__":
    main()
