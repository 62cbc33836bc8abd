"""HEAD_FP8's cost side (issue 50): the drafter head and a whole propose, FP8 against bf16, in one run.

    python bench/bench_fp8_head.py [--json OUT] [--reps N] [--smoke]

One H200 (or any GPU with row-wise FP8 GEMMs, compute capability 9.0+), random bf16 weights, every
figure the mean of N replays of one CUDA graph (bench/common.py), the two sides of a ratio timed
alternately in this process:
  - head: the draft head on R rows (R = sequences x 1 depth): norm, lm_head, top-1 with its softmax
    probability (proposers/draft_head.py, `DraftHead.outputs`), bf16 (as loaded) against its FP8 copy
    (runtime/fp8.py: the activation quantised per row in the call, then `torch._scaled_mm`), at
    ours (the default model, H 256 / V 4096; the GPU preset, H 512 / V 4096) and at the 5.7B shape
    with a real vocabulary (H 4096 / V 151,936), R in 1, 16, 64, 256;
  - gemm: the lm_head matmul alone, bf16 `F.linear` against `_scaled_mm` on an activation already
    quantised (the issue's 184 vs 312 us at [64 x 4096] x [4096 x 151,936]);
  - propose: a whole K = 2 propose (MTPProposer.draft: two MTP forwards + two heads) at B sequences,
    a random MTP at the same shapes, its KV holding 64 context rows per sequence.
Prints one markdown table; ratio = FP8 / bf16 (below 1: FP8 is faster). Needs no hydra or statsmodels.
`--smoke`: one small shape, eager, on whatever device (the CPU runs the emulation): its times mean nothing.
"""
from __future__ import annotations

import argparse
import sys
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn.functional as F

from atlas_ab.proposers.base import RowFeed
from atlas_ab.proposers.draft_head import DraftHead
from atlas_ab.proposers.mtp_head import MTPProposer
from atlas_ab.runtime.fp8 import quantize_rows, real_fp8_matmul
from atlas_ab.runtime.presets import random_checkpoint

from common import dump_json, graphed_ms  # bench/common.py (this folder is on sys.path)

#: name -> (hidden, layers of the trunk kept, heads, kv heads, intermediate, vocab); one trunk layer is enough:
#: only its embedding and lm_head serve the drafter
SHAPES = {
    "default (H256, V4096)": (256, 1, 4, 2, 688, 4096),
    "preset (H512, V4096)": (512, 1, 8, 8, 1408, 4096),
    "5.7B (H4096, V151936)": (4096, 1, 32, 8, 11008, 151_936),
}
SMOKE = {"smoke (H64, V256)": (64, 1, 4, 2, 96, 256)}
ROWS = (1, 16, 64, 256)
CONTEXT = 64


def checkpoint_of(shape, dev, dtype):
    H, L, nh, kvh, inter, V = shape
    cfg = SimpleNamespace(hidden_size=H, num_hidden_layers=L, num_attention_heads=nh, num_key_value_heads=kvh,
                          intermediate_size=inter, vocab_size=V)
    return random_checkpoint(cfg, "", dev, dtype)


def head_rows(ck, R, dev, dtype, reps, real):
    """(bf16 ms, fp8 ms) of the draft head on R rows, and of the bare GEMM."""
    H = ck.args.hidden_size
    out = torch.randn(R, 1, H, device=dev, dtype=dtype)
    plain, fp8 = DraftHead(ck.mtp, ck.trunk.lm_head), DraftHead(ck.mtp, ck.trunk.lm_head, fp8=True)
    res = {"head_bf16": graphed_ms(lambda: plain.outputs(out, 0, False), dev, reps),
           "head_fp8": graphed_ms(lambda: fp8.outputs(out, 0, False), dev, reps)}
    x = out[:, 0]
    w = ck.trunk.lm_head.weight
    res["gemm_bf16"] = graphed_ms(lambda: F.linear(x, w), dev, reps)
    if real:
        x_q, x_s = quantize_rows(x)
        sa, sb = x_s[:, None].contiguous(), fp8.w_s[None, :].contiguous()
        res["gemm_fp8"] = graphed_ms(lambda: torch._scaled_mm(x_q, fp8.w_q.t(), scale_a=sa, scale_b=sb,
                                                              out_dtype=torch.bfloat16), dev, reps)
    return res


def propose_ms(ck, B, dev, dtype, reps, head_fp8: bool) -> float:
    """A K = 2 propose at B sequences, graphed at static shapes (the pool's full length), as a step runs it."""
    lay = ck.layout
    p = MTPProposer(ck.trunk, ck.mtp, "compact", False, handoff_norm=lay.handoff_norm,
                    recycle_norm=lay.recycle_norm, head_fp8=head_fp8)
    H, V = ck.args.hidden_size, ck.args.vocab_size
    p.alloc(np.full(B, CONTEXT + 8))
    g = torch.Generator(device="cpu").manual_seed(0)
    seq, key = np.repeat(np.arange(B), CONTEXT), np.tile(np.arange(CONTEXT), B)
    hid = torch.randn(B * CONTEXT, H, generator=g).to(dev, dtype)
    with torch.no_grad():
        p.prefill_drafter(RowFeed(seq=seq, key=key, token=np.random.default_rng(0).integers(0, V, len(seq)),
                                  label=np.full(len(seq), -1), hiddens=hid))
    plan, _ = p.plan_propose(None, np.full(B, CONTEXT + 1), 2, np.ones(B, dtype=bool))
    plan = {k: torch.as_tensor(v, device=dev) for k, v in plan.items()}
    last = torch.randint(0, V, (B,), generator=g).to(dev)
    target = torch.randn(B, H, generator=g).to(dev, dtype)
    lengths = p.full_lengths()
    ms = graphed_ms(lambda: p.draft(plan, last, target, 2, 0, None, lengths), dev, reps)
    p.after_verify(np.zeros(B, dtype=np.int64), np.ones(B, dtype=bool))
    return ms


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--json")
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args(argv)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    real = real_fp8_matmul(dev)
    if not real and not a.smoke:
        print(f"bench_fp8_head: error: {dev} has no row-wise FP8 GEMM (needs CUDA compute capability 9.0+); "
              "--smoke runs the emulation", file=sys.stderr)
        return 2
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    reps = 3 if a.smoke else a.reps
    shapes, rows = (SMOKE, (1, 16)) if a.smoke else (SHAPES, ROWS)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    print(f"# HEAD_FP8 cost: {name}, torch {torch.__version__}, {'real _scaled_mm' if real else 'EMULATED'}, "
          f"mean of {reps} graph replays\n")
    print("| shape | R | head bf16 ms | head FP8 ms | ratio | gemm bf16 ms | gemm FP8 ms | ratio | "
          "propose K=2 bf16 ms | propose FP8 ms | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    res = {"device": name, "torch": torch.__version__, "real": real, "reps": reps, "rows": []}
    for label, shape in shapes.items():
        ck = checkpoint_of(shape, dev, dtype)
        for R in rows:
            h = head_rows(ck, R, dev, dtype, reps, real)
            pb, pf = propose_ms(ck, R, dev, dtype, reps, False), propose_ms(ck, R, dev, dtype, reps, True)
            row = {"shape": label, "R": R, **h, "propose_bf16": pb, "propose_fp8": pf}
            res["rows"].append(row)
            gf = h.get("gemm_fp8")
            gemm = "- | -" if gf is None else f"{gf:.4f} | {gf / h['gemm_bf16']:.2f}"
            print(f"| {label} | {R} | {h['head_bf16']:.4f} | {h['head_fp8']:.4f} | "
                  f"{h['head_fp8'] / h['head_bf16']:.2f} | {h['gemm_bf16']:.4f} | {gemm} | "
                  f"{pb:.4f} | {pf:.4f} | {pf / pb:.2f} |")
        del ck
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    dump_json(a.json, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
