"""The drafter's cost split, head vs block (issue 50): one propose (K drafts, MTPProposer.draft, captured in
a CUDA graph on a GPU) with nothing skipped, with its head skipped (DRAFTER_SKIP=head: no norm, lm_head or
argmax) and with its block skipped (DRAFTER_SKIP=block: no attention, MLP or KV write), over a drafter KV of
KV_ROWS context rows, at three shapes; prints the table of ms and ratios. The engine measured 8.84 ms a
propose, 1.52 ms with its head skipped (its 154,880 x 4,096 head: "7.3 of its 8.84 ms").

    python bench/bench_drafter_split.py                       # one GPU: 7.3M, 33.6M, 5.7B (+ 5.7B at a 151,936 vocab)
    python bench/bench_drafter_split.py --device cpu          # the CPU, the default 7.3M model, fp32

Shapes: the shipped 7.3M checkpoint (atlas_ab/models/default); random weights at the 33.6M preset's shape
(model=gpu) and the 5.7B trunk's (model=llama8b, vocab 4,096: our tokenizer's), and the 5.7B shape at
Qwen's 151,936 vocabulary (the head a real vocabulary pays). Random weights: timing only. Only the drafter
is built (the MTP layer, the embedding and the head: a trunk of no layers). bf16 on a GPU, fp32 on the CPU.
"""
from __future__ import annotations

import argparse
import sys
import time
from statistics import median

import numpy as np
import torch

from atlas_ab.proposers.mtp_head import MTPProposer
from atlas_ab.runtime.args import ModelArgs
from atlas_ab.runtime.model import MTPModule, Transformer, init_weights

from common import graphed, replay_ms  # bench/common.py (this folder is on sys.path)

# hidden, heads, kv heads, intermediate, vocab
SHAPES = {"33.6M": (512, 8, 8, 1408, 4096), "5.7B": (4096, 32, 8, 11008, 4096),
          "5.7B-v151936": (4096, 32, 8, 11008, 151_936)}
KV_ROWS = 400
SKIPS = ("none", "head", "block")


def default_drafter(device, dtype):
    from atlas_ab.runtime import checkpoint
    ck = checkpoint.load("atlas_ab/models/default", device, dtype)
    return ck.trunk.eval(), ck.mtp.eval()


def random_drafter(shape: str, device, dtype):
    H, heads, kvh, inter, vocab = SHAPES[shape]
    a = ModelArgs(vocab_size=vocab, hidden_size=H, intermediate_size=inter, num_hidden_layers=0,
                  num_attention_heads=heads, num_key_value_heads=kvh, head_dim=H // heads, num_nextn_predict_layers=1)
    torch.manual_seed(0)
    with torch.device(device):
        trunk, mtp = Transformer(a), MTPModule(a)       # a trunk of no layers: its embedding and head only
    for m in (trunk, mtp):
        init_weights(m)
    return trunk.to(dtype).eval(), mtp.to(dtype).eval().attach(trunk)


def propose_step(trunk, mtp, skip: str, B: int, K: int, device):
    """One propose of K drafts over KV_ROWS context rows, ready to call (captured in a CUDA graph on a GPU)."""
    p = MTPProposer(trunk, mtp, "compact", False, drafter_skip=skip)
    p.alloc(np.full(B, KV_ROWS + 64))
    H = mtp.args.hidden_size
    g = torch.Generator().manual_seed(1)
    ctx = torch.arange(KV_ROWS, device=device).expand(B, KV_ROWS)
    with torch.no_grad():           # the context's rows (KV-only), so the drafts attend over KV_ROWS rows
        tok = torch.randint(0, mtp.args.vocab_size, (B, KV_ROWS), generator=g).to(device)
        mtp.write_kv_rows(tok, torch.randn(B, KV_ROWS, H, generator=g).to(device, mtp.dtype), ctx, ctx, p.kv,
                          trunk.embed_tokens)
    slots = KV_ROWS + torch.arange(K, device=device).expand(B, K)
    plan = {"d_rope": slots.contiguous(), "d_slot": slots.contiguous()}
    tok = torch.randint(0, mtp.args.vocab_size, (B,), generator=g).to(device)
    hid = torch.randn(B, H, generator=g).to(device, mtp.dtype)
    lengths = {"draft": p.kv.max_capacity}
    return graphed(lambda: p.draft(plan, tok, hid, K, lengths=lengths).drafts, device)


def split_ms(trunk, mtp, B: int, K: int, reps: int, rounds: int, device) -> dict:
    """skip -> the median over `rounds` of the mean ms of `reps` calls, the three skips interleaved round by
    round (so a machine whose load drifts drifts under all three alike)."""
    steps = {skip: propose_step(trunk, mtp, skip, B, K, device) for skip in SKIPS}
    times = {skip: [] for skip in SKIPS}
    for _ in range(rounds):
        for skip in SKIPS:
            times[skip].append(replay_ms(steps[skip], device, reps))
    return {skip: median(t) for skip, t in times.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--shapes", default=None, help="comma list of 7.3M," + ",".join(SHAPES)
                    + " (default: all on a GPU, 7.3M on the CPU)")
    ap.add_argument("--widths", default="1,16", help="batch widths B")
    ap.add_argument("--k", type=int, default=2, help="drafts a propose (K)")
    ap.add_argument("--reps", type=int, default=None, help="calls per timing (default 100 GPU, 10 CPU)")
    ap.add_argument("--rounds", type=int, default=7, help="timings per skip, interleaved; the median is printed")
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args(argv)
    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("bench_drafter_split: error: --device cuda but no GPU is visible (--device cpu for the CPU)",
              file=sys.stderr)
        return 2
    if a.threads:
        torch.set_num_threads(a.threads)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    reps = a.reps or (100 if device.type == "cuda" else 10)
    shapes = (a.shapes or ("7.3M," + ",".join(SHAPES) if device.type == "cuda" else "7.3M")).split(",")
    t0 = time.perf_counter()
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu, {torch.get_num_threads()} threads"
    print(f"{name}, {dtype}, torch {torch.__version__}; a propose of K={a.k} over {KV_ROWS} KV rows, "
          f"{'graphed' if device.type == 'cuda' else 'eager'}, median of {a.rounds} "
          f"interleaved means of {reps} calls")
    print("| shape | B | propose ms | head skipped ms | block skipped ms | head skipped / propose | "
          "block skipped / propose | head's share | block's share |")
    print("|---|---|---|---|---|---|---|---|---|")
    for s in shapes:
        trunk, mtp = default_drafter(device, dtype) if s == "7.3M" else random_drafter(s, device, dtype)
        for B in (int(w) for w in a.widths.split(",")):
            ms = split_ms(trunk, mtp, B, a.k, reps, a.rounds, device)
            full = ms["none"]
            print(f"| {s} | {B} | {full:.3f} | {ms['head']:.3f} | {ms['block']:.3f} | {ms['head'] / full:.3f} | "
                  f"{ms['block'] / full:.3f} | {1 - ms['head'] / full:.3f} | {1 - ms['block'] / full:.3f} |",
                  flush=True)
        del trunk, mtp
        if device.type == "cuda":
            torch.cuda.empty_cache()
    print(f"({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
