"""The target's verify forward at real shapes against its roofline, in one process (issue #13 B).

    python bench/bench_forward.py [--smoke] [--json OUT] [--shapes preset,0.77B,5.7B] [--reps N]

For each shape (the 33.6M GPU preset, 0.77B, 5.7B; vocab 4096) x B in {16, 64} x K in {1, 2, 3}
at a KV length of ~400, all graphed (one CUDA graph per shape), same random bf16 weights:
  - the bare verify forward (B x (K+1) rows, logits and argmax included, as bench_runner's
    "bare") on the torch path (old) and the Triton path (new);
  - its bounds: bytes (weights + live KV + activations) / the copy bandwidth measured in this
    run, FLOPs / the bf16 matmul rate measured in this run; ratio = new / max(bounds);
  - where the new path's time goes: the matmuls alone, attention alone, norms + RoPE/KV write +
    SiLU alone, embedding/RoPE tables/head alone (each graphed, each against its own bound), the
    launch floor (kernels in the forward x the cost of one tiny kernel in a graph), and, from the
    profiler, the forward's kernel time by kind and its idle time between kernels;
  - one graphed MTP draft step (B rows, block + head + softmax, as bench_runner) old vs new;
  - the bytes per KV slot and per sequence, and the widest batch that fits at 5.7B (checked by
    allocating the pools and running one forward at that width);
  - a correctness check on the GPU: old and new bf16 paths against an fp32 reference.
`--smoke`: tiny and eager on the CPU (through Triton's interpreter), for CI; its times mean nothing.
Imports torch, atlas_ab.runtime and (bench/goals.py) scipy: the GPU machine has neither hydra nor statsmodels.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from statistics import median

import torch
import torch.nn.functional as F

from atlas_ab.runtime import kernels
from atlas_ab.runtime.args import ModelArgs
from atlas_ab.runtime.kernels import matmul
from atlas_ab.runtime.kernels.attention import attention, plan
from atlas_ab.runtime.kernels.matmul import SKINNY_MAX_ROWS, skinny_linear, use_matmul
from atlas_ab.runtime.kernels.mlp import silu_mul
from atlas_ab.runtime.kernels.norm import add_rmsnorm, rmsnorm
from atlas_ab.runtime.kernels.rope import rope_write_kv
from atlas_ab.runtime.kernels.top1 import argmax, argmax_rows, top1
from atlas_ab.runtime.model import MTPModule, Transformer, fused, init_weights, rope_table

from common import graphed, graphed_ms, replay_ms, sync  # bench/common.py (this folder is on sys.path)
from goals import RATED_BYTES_PER_S, forward_goals, table as goals_table  # bench/goals.py

VOCAB = 4096
SHAPES = {  # hidden, layers, heads, kv heads, intermediate, vocab
    "preset": (512, 8, 8, 8, 1408, VOCAB),        # the GPU preset (33.6M with its MTP)
    "0.77B": (2048, 16, 16, 8, 5632, VOCAB),
    "5.7B": (4096, 32, 32, 8, 11008, VOCAB),
    "smoke": (64, 2, 4, 2, 96, 128),               # the interpreter runs every program in Python
}
KV_LEN = 400
MTP_SLACK = 10          # proposers/mtp_head.py: the drafter's pool is the budget + 10


_T0 = time.perf_counter()


def log(*parts) -> None:
    print(f"[{time.perf_counter() - _T0:6.1f}s]", *parts, file=sys.stderr, flush=True)


def alternated_ms(fs: dict, dev, reps: int, rounds: int) -> dict:
    """Each of fs captured once, then `rounds` rounds timing each in turn (reps replays a
    timing): {name: [ms per round]}. Drift (clocks, a neighbour) hits every f alike, and the
    goals take the median of the rounds (bench/goals.py)."""
    steps = {k: graphed(f, dev) for k, f in fs.items()}
    out = {k: [] for k in fs}
    for _ in range(rounds):
        for k, step in steps.items():
            out[k].append(replay_ms(step, dev, reps))
    return out


# ---- the machine -------------------------------------------------------------------------------
def machine_rates(dev, smoke: bool) -> dict:
    """Copy bandwidth (bytes read + written / s, a 2 GiB device-to-device copy), read bandwidth
    (bytes read / s, a sum over 8 GiB; printed beside the rated, which judges the goals) and the bf16
    matmul rate (FLOP/s, an 8192^3 matmul), both graphed, measured now. The matmul goes first and
    the copy is the best of three rounds: the H200 idles at a 345 MHz SM clock, and the run of
    2026-11-29, which timed the copy first, got 2.77 TB/s (against ~4.25 measured earlier,
    bench/RESULTS.md, and 4.05 TB/s that a matmul of the same run streamed)."""
    reps = 3 if smoke else 20
    m = 64 if smoke else 8192
    dt = torch.float32 if smoke else torch.bfloat16
    xy = [torch.randn(m, m, device=dev, dtype=dt) for _ in range(2)]
    ms = min(graphed_ms(lambda: xy[0] @ xy[1], dev, reps) for _ in range(2))
    mm_rate = 2 * m ** 3 / (ms / 1e3)
    xy.clear()
    # the best of several copies, at two sizes: one short copy read 2.76-4.25 TB/s between calls
    copies = []
    for n in ((1 << 20, 1 << 21) if smoke else (1 << 30, 2 << 30)):
        bufs = [torch.empty(n, dtype=torch.uint8, device=dev) for _ in range(2)]
        copies += [2 * n / (graphed_ms(lambda b=bufs: b[1].copy_(b[0]), dev, reps) / 1e3) for _ in range(5)]
        bufs.clear()
    copy_bw = max(copies)
    # read-only: a sum over 4 and 8 GiB of fp32 reads each byte once and writes 4 (a copy is no upper
    # bound: the 5.7B verify forward once read its bytes faster than the same call's copy moved them)
    reads = []
    for n in ((1 << 20,) if smoke else (1 << 30, 2 << 30)):
        x = torch.rand(n, device=dev)      # random, never zeros
        reads += [4 * n / (graphed_ms(lambda x=x: x.sum(), dev, reps) / 1e3) for _ in range(3)]
        del x
    # one tiny kernel inside a graph: the launch floor per kernel
    t = torch.zeros(1, device=dev)

    def adds():
        for _ in range(200):
            t.add_(1)
    per_kernel_us = graphed_ms(adds, dev, reps) * 1e3 / 200
    rated = RATED_BYTES_PER_S.get(torch.cuda.get_device_name(dev) if dev.type == "cuda" else "")
    return dict(copy_bytes_per_s=copy_bw, copy_bytes_per_s_all=copies, rated_bytes_per_s=rated,
                read_bytes_per_s=max(reads), read_bytes_per_s_all=reads,
                matmul_flop_per_s=mm_rate, graph_kernel_us=per_kernel_us)


# ---- models ------------------------------------------------------------------------------------
def model_args(shape: str) -> ModelArgs:
    H, L, nh, kvh, I, V = SHAPES[shape]
    return ModelArgs(vocab_size=V, hidden_size=H, intermediate_size=I, num_hidden_layers=L,
                     num_attention_heads=nh, num_key_value_heads=kvh, head_dim=H // nh, num_nextn_predict_layers=1)


def build(shape: str, dev, dtype, seed: int = 0):
    """Random weights at `shape` (as presets.random_checkpoint, built straight in `dtype`)."""
    a = model_args(shape)
    torch.manual_seed(seed)
    prev = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(dev):
            trunk, mtp = Transformer(a), MTPModule(a)
    finally:
        torch.set_default_dtype(prev)
    init_weights(trunk)
    init_weights(mtp)
    return trunk.eval(), mtp.eval().attach(trunk)


def linear_params(a: ModelArgs) -> dict:
    H, D, I = a.hidden_size, a.head_dim, a.intermediate_size
    qkv = H * (a.num_attention_heads + 2 * a.num_key_value_heads) * D
    o = a.num_attention_heads * D * H
    return dict(qkv=qkv, o=o, gate_up=2 * H * I, down=I * H)


def bounds(a: ModelArgs, B: int, T: int, kv_len: int, rates: dict, elt: int = 2) -> dict:
    """Bytes and FLOPs one verify forward must move / do, and the time they take at the
    measured rates. KV: each sequence reads its live kv_len + T slots in every layer."""
    L, H, D, I, V = a.num_hidden_layers, a.hidden_size, a.head_dim, a.intermediate_size, a.vocab_size
    M = B * T
    lp = linear_params(a)
    per_layer = sum(lp.values())
    w_bytes = elt * (L * per_layer + H * V + (2 * L + 1) * H)                   # + lm_head + norms
    kv_bytes = elt * L * B * (kv_len + T) * 2 * a.num_key_value_heads * D
    shapes = [(H, lp["qkv"] // H), (a.num_attention_heads * D, H), (H, 2 * I), (I, H)]
    act_bytes = elt * M * (L * sum(k + n for k, n in shapes) + H + V)
    mm_flops = 2 * M * (L * per_layer + H * V)
    attn_flops = 4 * L * B * T * a.num_attention_heads * D * (kv_len + T)
    bytes_total = w_bytes + kv_bytes + act_bytes
    mem_ms = bytes_total / rates["copy_bytes_per_s"] * 1e3
    flop_ms = (mm_flops + attn_flops) / rates["matmul_flop_per_s"] * 1e3
    return dict(weight_bytes=w_bytes, kv_bytes=kv_bytes, act_bytes=act_bytes, flops=mm_flops + attn_flops,
                weight_ms=w_bytes / rates["copy_bytes_per_s"] * 1e3, memory_ms=mem_ms, flop_ms=flop_ms,
                bound_ms=max(mem_ms, flop_ms),
                matmul_bound_ms=max((w_bytes + act_bytes) / rates["copy_bytes_per_s"],
                                    mm_flops / rates["matmul_flop_per_s"]) * 1e3,
                attention_bound_ms=kv_bytes / rates["copy_bytes_per_s"] * 1e3)


# ---- the forwards ------------------------------------------------------------------------------
def verify_inputs(a: ModelArgs, B: int, T: int, kv_len: int, dev, seed=1):
    g = torch.Generator().manual_seed(seed)
    tok = torch.randint(0, a.vocab_size, (B, T), generator=g).to(dev)
    pos = (kv_len + torch.arange(T)).expand(B, T).contiguous().to(dev)
    return tok, pos


def filled_kv(model, caps, dev, seed=2):
    kv = model.new_kv(caps)
    g = torch.Generator(device=dev).manual_seed(seed)
    kv.k.normal_(generator=g)
    kv.v.normal_(generator=g)
    return kv


def verify_fn(trunk, kv, tok, pos, backend: str, matmul: str = "auto"):
    length = int(pos.max()) + 1

    def f():
        with kernels.use(backend), use_matmul(matmul):
            return argmax(trunk.logits(trunk.forward(tok, pos, pos, kv, length=length), fp32=False))   # as the verify
    return f


def draft_fn(trunk, mtp, kv, B, kv_len, dev, backend: str, matmul: str = "auto"):
    """One MTP draft step over B rows (block + head + its top-1 and softmax prob, as a draft's
    `head_outputs`): bench_runner's bare_draft_ms."""
    tok = torch.randint(0, trunk.args.vocab_size, (B, 1), device=dev)
    hid = torch.randn(B, 1, trunk.args.hidden_size, device=dev, dtype=trunk.dtype)
    pos = torch.full((B, 1), kv_len, device=dev)

    def f():
        with kernels.use(backend), use_matmul(matmul):
            out = mtp.forward(tok, hid, pos, pos, kv, trunk.embed_tokens, length=kv_len + 1)
            return top1(mtp.logits(out, trunk.lm_head, fp32=False)[:, 0])
    return f


# ---- the new path's parts, each alone ----------------------------------------------------------
def parts(trunk, kv, tok, pos, mm=F.linear):
    """The new forward's pieces over the same shapes and weights, as separate callables."""
    a = trunk.args
    B, T = tok.shape
    H, D = a.hidden_size, a.head_dim
    dev, dt = trunk.device, trunk.dtype
    layers = trunk.model.layers
    W = [(fused(l.self_attn, "_qkv_w",
                (l.self_attn.q_proj.weight, l.self_attn.k_proj.weight, l.self_attn.v_proj.weight)),
          l.self_attn.o_proj.weight, fused(l.mlp, "_gate_up_w", (l.mlp.gate_proj.weight, l.mlp.up_proj.weight)),
          l.mlp.down_proj.weight) for l in layers]
    h = torch.randn(B, T, H, device=dev, dtype=dt)
    o_in = torch.randn(B, T, a.num_attention_heads * D, device=dev, dtype=dt)
    act = torch.randn(B, T, a.intermediate_size, device=dev, dtype=dt)
    gu = torch.randn(B, T, 2 * a.intermediate_size, device=dev, dtype=dt)
    qkv = torch.randn(B, T, W[0][0].shape[0], device=dev, dtype=dt)
    rope = rope_table(D, a.rope_theta, dt, dev)
    slots = pos.contiguous()
    nw = layers[0].input_layernorm.weight

    def matmuls():
        for wq, wo, wgu, wd in W:
            mm(h, wq)
            mm(o_in, wo)
            mm(h, wgu)
            mm(act, wd)
        mm(h, trunk.lm_head.weight)

    def attn():
        for i in range(len(layers)):
            attention(qkv, kv.k[i], kv.v[i], slots, kv.base, kv.capacity, a.num_attention_heads, D ** -0.5,
                      max_len=kv.max_capacity + 1)

    def elementwise():
        x = rmsnorm(h, nw, 1e-6)
        for i in range(len(layers)):
            rope_write_kv(qkv, slots, rope, kv.k[i], kv.v[i], slots, kv.base, kv.capacity,
                          a.num_attention_heads, a.num_key_value_heads)
            x, _ = add_rmsnorm(h, x, nw, 1e-6)
            silu_mul(gu)
            x, _ = add_rmsnorm(h, x, nw, 1e-6)

    logits = torch.randn(B, T, a.vocab_size, device=dev, dtype=dt)

    def misc():          # embedding, the last residual add, final norm, argmax (of bf16 logits, as the verify)
        x = trunk.embed_tokens(tok)
        rmsnorm(x + h, nw, 1e-6)
        return argmax_rows(logits)

    return dict(matmuls=matmuls, attention=attn, norms_rope_silu=elementwise, misc=misc)


def part_bounds(a: ModelArgs, B, T, kv_len, rates, elt=2) -> dict:
    b = bounds(a, B, T, kv_len, rates, elt)
    M, L, H, I = B * T, a.num_hidden_layers, a.hidden_size, a.intermediate_size
    lp = linear_params(a)
    qkv_n = lp["qkv"] // H
    # elementwise traffic: norms read 1-2 and write 1-2 [M, H]; rope reads/writes qkv rows and
    # writes K/V; silu reads [M, 2I] and writes [M, I]
    ew = elt * M * L * (2 * 4 * H + 2 * qkv_n + 3 * I)
    return dict(matmuls=b["matmul_bound_ms"], attention=b["attention_bound_ms"],
                norms_rope_silu=ew / rates["copy_bytes_per_s"] * 1e3, misc=0.0)


KINDS = (("attention", ("attend", "combine")), ("rope_kv_write", ("rope_write",)), ("norm", ("rmsnorm",)),
         ("silu_mul", ("silu_mul",)),
         ("matmul", ("skinny_mm", "gemm", "gemv", "cutlass", "sm90", "nvjet", "xmma", "splitk")))


def kernel_profile(f, dev, reps=3) -> dict:
    """Kernel time by kind inside one graph replay (torch.profiler / CUPTI), the number of
    kernels, and the replay's wall time minus its kernel time (the idle gaps between kernels)."""
    if dev.type != "cuda":
        return {}
    from torch.profiler import ProfilerActivity, profile
    replay = graphed(f, dev)
    replay()
    sync(dev)
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(reps):
                replay()
            sync(dev)
    except Exception as e:            # no CUPTI on the machine: say so, keep the other numbers
        return dict(error=f"{type(e).__name__}: {e}"[:200])
    mode = "graph"
    if not _kernel_events(prof):      # CUPTI may not see kernels inside a graph: the same kernels, eagerly
        mode = "eager"
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            with torch.no_grad():
                for _ in range(reps):
                    f()
            sync(dev)
    by_kind, count = {}, 0
    for e in _kernel_events(prof):
        name, us = e.key.lower(), _device_us(e)
        kind = next((k for k, keys in KINDS if any(s in name for s in keys)), "other")
        by_kind[kind] = by_kind.get(kind, 0.0) + us / reps / 1e3
        count += e.count
    t0 = time.perf_counter()
    for _ in range(20):
        replay()
    sync(dev)
    wall = (time.perf_counter() - t0) / 20 * 1e3
    busy = sum(by_kind.values())
    return dict(mode=mode, kernels_per_forward=count / reps, kernel_ms=by_kind, busy_ms=busy, wall_ms=wall,
                idle_ms=wall - busy)


def _device_us(e) -> float:
    us = getattr(e, "device_time_total", None)
    return us if us is not None else getattr(e, "cuda_time_total", 0)


def _kernel_events(prof) -> list:
    return [e for e in prof.key_averages() if _device_us(e) and not e.key.startswith(("cudaGraph", "Memcpy", "Memset"))]


# ---- correctness -------------------------------------------------------------------------------
def correctness(shape: str, dev, B=4, T=3, prefix=48) -> dict:
    """Prefill `prefix` tokens then verify T rows, on the old and new bf16 paths, each against an
    fp32 torch-path reference over the same weights: relative hidden error and argmax agreement."""
    trunk, _ = build(shape, dev, torch.bfloat16 if dev.type == "cuda" else torch.float32, seed=3)
    ref = build(shape, dev, torch.float32, seed=3)[0] if dev.type == "cuda" else trunk
    if dev.type == "cuda":
        ref.load_state_dict(trunk.state_dict())
    g = torch.Generator().manual_seed(7)
    toks = torch.randint(0, trunk.args.vocab_size, (B, prefix + T), generator=g).to(dev)
    out = {}
    with torch.no_grad():
        for name, model, backend in (("fp32", ref, "torch"), ("old", trunk, "torch"), ("new", trunk, "triton")):
            with kernels.use(backend):
                kv = model.new_kv([prefix + T + 4] * B)
                p = torch.arange(prefix, device=dev).expand(B, prefix)
                model.forward(toks[:, :prefix], p, p, kv, length=prefix)
                p = (prefix + torch.arange(T, device=dev)).expand(B, T)
                h = model.forward(toks[:, prefix:], p, p, kv, length=prefix + T)
                out[name] = (h.float(), model.logits(h).float())
    h32, l32 = out["fp32"]
    top2 = l32.topk(2, -1).values
    margin = (top2[..., 0] - top2[..., 1])
    res = {}
    for name in ("old", "new"):
        h, lg = out[name]
        agree = lg.argmax(-1) == l32.argmax(-1)
        res[name] = dict(hidden_rel_err=float((h - h32).norm() / h32.norm()),
                         logit_max_abs_err=float((lg - l32).abs().max()),
                         argmax_agree=float(agree.float().mean()),
                         min_margin_of_disagreement=float(margin[~agree].min()) if (~agree).any() else None)
    h_old, h_new = out["old"][0], out["new"][0]
    res["new_vs_old_hidden_rel"] = float((h_new - h_old).norm() / h_old.norm())
    del trunk, ref
    return res


# ---- memory ------------------------------------------------------------------------------------
def memory(shape: str, dev, dtype, budgets=(512, 772), K=2, check=True) -> dict:
    """Bytes per KV slot (trunk + MTP) and per sequence at a budget; the widest batch that fits
    next to the weights, checked by allocating the pools and running one verify forward there.
    Budget 772 = the default workload (8 turns x (64 + 32) tokens + K + 2)."""
    a = model_args(shape)
    elt = dtype.itemsize
    per_slot = a.num_hidden_layers * 2 * a.num_key_value_heads * a.head_dim * elt
    mtp_slot = 2 * a.num_key_value_heads * a.head_dim * elt
    out = dict(kv_bytes_per_slot_trunk=per_slot, kv_bytes_per_slot_mtp=mtp_slot, budgets={})
    if dev.type != "cuda":
        return out
    trunk, mtp = build(shape, dev, dtype)
    gc.collect()
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info(dev)
    out.update(gpu_total_bytes=total, weights_bytes=sum(p.numel() * p.element_size() for m in (trunk, mtp)
                                                        for p in m.parameters()))
    T = K + 1
    for budget in budgets:
        # a sequence: its trunk pool (budget + dump slot), the drafter's (budget + slack + dump),
        # and the verify's activations (~ T rows of the widest intermediates, fp32 logits)
        per_seq = (budget + 1) * per_slot + (budget + MTP_SLACK + 1) * mtp_slot
        act = T * (2 * a.intermediate_size * 3 + 6 * a.hidden_size + 3 * a.vocab_size) * elt * 2
        reserve = 2 << 30                    # cuBLAS workspace, allocator slack, the runner's buffers
        widest = int((free - reserve) // (per_seq + act))
        rec = dict(bytes_per_sequence=per_seq, activation_bytes_per_sequence=act, widest_batch=widest)
        if check:
            try:
                torch.cuda.reset_peak_memory_stats(dev)
                pools = [trunk.new_kv([budget] * widest), mtp.new_kv([budget + MTP_SLACK] * widest)]
                tok, pos = verify_inputs(a, widest, T, budget - T - 1, dev)
                with torch.no_grad():
                    verify_fn(trunk, pools[0], tok, pos, "triton")()
                sync(dev)
                peak = torch.cuda.max_memory_allocated(dev)
                rec.update(fits=True, peak_bytes=peak, headroom_bytes=total - peak)
                pools.clear()
            except torch.cuda.OutOfMemoryError as e:
                rec.update(fits=False, error=str(e).splitlines()[0][:200])
            gc.collect()
            torch.cuda.empty_cache()
        out["budgets"][str(budget)] = rec
    del trunk, mtp
    return out


# ---- the grid ----------------------------------------------------------------------------------
def tune_matmuls(trunk, mtp, shape, Ms, rates, dev, reps) -> tuple[list, dict]:
    """Each kind of weight times M rows, cuBLAS and the skinny Triton kernel at each tile of
    matmul.TILES: us per matmul and weight GB/s. A kind's matmuls run over every layer's weight
    in order, as in the forward (one weight over and over would sit in the 60 MB L2 and measure
    it); the head and the MTP's eh_proj, single matrices, repeat 16 times (L2-warm if they fit).
    Returns the rows and the table {(N, K, row bucket): tile} where the best tile beat cuBLAS
    summed over the Ms of that bucket (what matmul.SKINNY_TABLES holds for this GPU)."""
    layers = trunk.model.layers
    W = dict(qkv=[fused(l.self_attn, "_qkv_w", (l.self_attn.q_proj.weight, l.self_attn.k_proj.weight,
                                                 l.self_attn.v_proj.weight)) for l in layers],
             o=[l.self_attn.o_proj.weight for l in layers],
             gate_up=[fused(l.mlp, "_gate_up_w", (l.mlp.gate_proj.weight, l.mlp.up_proj.weight)) for l in layers],
             down=[l.mlp.down_proj.weight for l in layers],
             lm_head=[trunk.lm_head.weight] * 16, eh_proj=[mtp.eh_proj.weight] * 16)
    tiles = matmul.TILES if dev.type == "cuda" else matmul.TILES[:1]
    out, sums = [], {}
    for M in Ms:
        for name, ws in W.items():
            w0 = ws[0]
            if dev.type != "cuda":
                ws = ws[:1]
            x = torch.randn(M, w0.shape[1], device=dev, dtype=w0.dtype)
            wb = w0.numel() * w0.element_size()

            def per_call(fn, x=x, ws=ws):     # bound now: called within this iteration only
                return graphed_ms(lambda: [fn(x, w) for w in ws], dev, reps) * 1e3 / len(ws)
            rec = dict(shape=shape, M=M, weight=name, N=w0.shape[0], K=w0.shape[1], calls=len(ws),
                       bound_us=wb / rates["copy_bytes_per_s"] * 1e6, cublas_us=per_call(F.linear))
            if M <= SKINNY_MAX_ROWS:
                acc = sums.setdefault((w0.shape[0], w0.shape[1], matmul.rows_bucket(M)), {})
                acc["cublas"] = acc.get("cublas", 0.0) + rec["cublas_us"]
                times = {}
                for t in tiles:
                    try:
                        times[t] = per_call(lambda x_, w_, t=t: skinny_linear(x_, w_, None, t))
                    except Exception as e:      # e.g. a tile over the shared-memory limit: not a candidate
                        rec.setdefault("tile_errors", {})[str(t)] = f"{type(e).__name__}: {e}"[:200]
                        times[t] = float("inf")
                for t, us in times.items():
                    acc[t] = acc.get(t, 0.0) + us
                best = min(times, key=times.get)
                rec.update(skinny_us=times[best], skinny_tile=list(best), skinny_GBps=wb / times[best] / 1e3)
            rec["cublas_GBps"] = wb / rec["cublas_us"] / 1e3
            out.append(rec)
    table = {}
    for key, acc in sums.items():
        tile = min((t for t in acc if t != "cublas"), key=lambda t: acc[t])
        if acc[tile] < 0.97 * acc["cublas"]:          # a clear win only: the choice must not flip on noise
            table[key] = tile
    return out, table


def run_shape(shape, dev, dtype, rates, Bs, Ks, reps, kv_len, profile_it: bool, rounds: int = 5) -> dict:
    trunk, mtp = build(shape, dev, dtype)
    a = trunk.args
    Ms = [Bs[0] * (Ks[0] + 1)] if dev.type != "cuda" else sorted({B * (K + 1) for B in Bs for K in Ks} | set(Bs))
    mm_rows, table = tune_matmuls(trunk, mtp, shape, Ms, rates, dev, reps)
    matmul.skinny_table(dev).update(table)      # "auto" below = cuBLAS except where the skinny kernel won
    log(f"{shape}: skinny matmul table {table}")
    rows, drafts = [], []
    for B in Bs:
        for K in Ks:
            T = K + 1
            tok, pos = verify_inputs(a, B, T, kv_len, dev)
            kv = filled_kv(trunk, [kv_len + T + 1] * B, dev)       # bench_runner's bare: budget = live + 1
            # the old and new forwards alternated `rounds` times; each figure is the rounds' median
            runs = alternated_ms({"old": verify_fn(trunk, kv, tok, pos, "torch"),
                                  "new": verify_fn(trunk, kv, tok, pos, "triton")}, dev, reps, rounds)
            old, new = median(runs["old"]), median(runs["new"])
            extra = dict(old_ms_rounds=runs["old"], new_ms_rounds=runs["new"], rounds=rounds,
                         new_cublas_ms=graphed_ms(verify_fn(trunk, kv, tok, pos, "triton", "cublas"), dev, reps))
            if B * T <= SKINNY_MAX_ROWS:           # every matmul on the skinny kernel (its default tiles)
                extra["new_skinny_ms"] = graphed_ms(verify_fn(trunk, kv, tok, pos, "triton", "triton"), dev, reps)
            bd = bounds(a, B, T, kv_len, rates, dtype.itemsize)
            pb = part_bounds(a, B, T, kv_len, rates, dtype.itemsize)
            with kernels.use("triton"):
                comp = {k: graphed_ms(f, dev, reps) for k, f in parts(trunk, kv, tok, pos, matmul.linear).items()}
                extra["matmuls_cublas_ms"] = graphed_ms(parts(trunk, kv, tok, pos)["matmuls"], dev, reps)
            BM, BN, S = plan(B, T * a.num_attention_heads // a.num_key_value_heads, a.num_key_value_heads,
                             kv.max_capacity + 1, dev, a.head_dim)
            n_kernels = a.num_hidden_layers * (9 + (S > 1)) + 12           # by construction (model._layers_fast)
            row = dict(shape=shape, B=B, K=K, T=T, kv_len=kv_len, old_ms=old, new_ms=new, speedup=old / new,
                       **{k: bd[k] for k in ("weight_ms", "memory_ms", "flop_ms", "bound_ms", "weight_bytes",
                                              "kv_bytes", "act_bytes", "flops")},
                       ratio_new=new / bd["bound_ms"], ratio_old=old / bd["bound_ms"],
                       parts_ms=comp, parts_bound_ms=pb, attention_splits=S, parts_sum_ms=sum(comp.values()),
                       launch_floor_ms=n_kernels * rates["graph_kernel_us"] / 1e3, kernels_estimate=n_kernels,
                       **extra)
            if profile_it:
                row["profile"] = prof = kernel_profile(verify_fn(trunk, kv, tok, pos, "triton"), dev)
                if prof.get("kernels_per_forward"):
                    row["launch_floor_ms"] = prof["kernels_per_forward"] * rates["graph_kernel_us"] / 1e3
            if K == Ks[-1] and dev.type == "cuda":       # a pool 4x the live length costs the same (live reads)
                kv4 = filled_kv(trunk, [4 * (kv_len + T + 1)] * B, dev)
                row["new_ms_pool_4x"] = graphed_ms(verify_fn(trunk, kv4, tok, pos, "triton"), dev, reps)
                del kv4
            rows.append(row)
            log(fmt_row(row))
            del kv
        dkv = filled_kv(mtp, [kv_len + 4] * B, dev)
        d = dict(shape=shape, B=B, kv_len=kv_len,
                 draft_old_ms=graphed_ms(draft_fn(trunk, mtp, dkv, B, kv_len, dev, "torch"), dev, reps),
                 draft_new_ms=graphed_ms(draft_fn(trunk, mtp, dkv, B, kv_len, dev, "triton"), dev, reps),
                 draft_new_cublas_ms=graphed_ms(draft_fn(trunk, mtp, dkv, B, kv_len, dev, "triton", "cublas"),
                                                dev, reps))
        drafts.append(d)
        log(f"{shape:6s} B={B:3d} MTP draft step: old {d['draft_old_ms']:.3f} ms  new {d['draft_new_ms']:.3f} ms "
              f"(cuBLAS only {d['draft_new_cublas_ms']:.3f})")
        del dkv
    del trunk, mtp
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return dict(grid=rows, drafts=drafts, matmuls=mm_rows,
                skinny_table={f"{n}x{k}@{m}": list(t) for (n, k, m), t in table.items()})


def fmt_row(r) -> str:
    p = r["parts_ms"]
    return (f"{r['shape']:6s} B={r['B']:3d} K={r['K']} old {r['old_ms']:7.3f} new {r['new_ms']:7.3f} ms "
            f"(x{r['speedup']:4.2f}; cuBLAS only {r['new_cublas_ms']:.3f})  bound {r['bound_ms']:6.3f} "
            f"[w {r['weight_ms']:.3f} mem {r['memory_ms']:.3f} flop {r['flop_ms']:.3f}]  "
            f"new/bound {r['ratio_new']:4.2f}  parts: mm {p['matmuls']:.3f} attn {p['attention']:.3f} "
            f"ew {p['norms_rope_silu']:.3f} misc {p['misc']:.3f}")


def rebound(res) -> None:
    """(Re)compute every row's bounds, ratios and gap causes from its shape and res["rates"], so
    a saved run can be re-read at another bandwidth (--from-json). Gap causes, in ms: each part's
    time over its own bound (matmuls: weights + activations over the copy bandwidth or FLOPs over
    the matmul rate; attention: the live KV bytes; norms/RoPE/SiLU: their bytes), the embedding
    and head glue, and the whole forward minus the sum of its parts timed alone (what the parts
    do not account for: graph idle between kernels, interaction)."""
    elt = 4 if res.get("dtype") == "float32" else 2
    for r in res["grid"]:
        a = model_args(r["shape"])
        bd = bounds(a, r["B"], r["T"], r["kv_len"], res["rates"], elt)
        pb = part_bounds(a, r["B"], r["T"], r["kv_len"], res["rates"], elt)
        r.update({k: bd[k] for k in ("weight_ms", "memory_ms", "flop_ms", "bound_ms")}, parts_bound_ms=pb,
                 ratio_new=r["new_ms"] / bd["bound_ms"], ratio_old=r["old_ms"] / bd["bound_ms"])
        p = r["parts_ms"]
        r["gap_ms"] = dict(total=r["new_ms"] - bd["bound_ms"],
                           matmuls_over_bound=p["matmuls"] - pb["matmuls"],
                           attention_over_kv_bound=p["attention"] - pb["attention"],
                           norms_rope_silu_over_bound=p["norms_rope_silu"] - pb["norms_rope_silu"],
                           misc=p["misc"],
                           bounds_overlap=pb["matmuls"] + pb["attention"] + pb["norms_rope_silu"] - bd["bound_ms"],
                           whole_minus_parts=r["new_ms"] - sum(p.values()))


def table(res) -> str:
    rated = res["rates"].get("rated_bytes_per_s")
    read = res["rates"].get("read_bytes_per_s")
    lines = [f"rates: copy {res['rates']['copy_bytes_per_s'] / 1e12:.2f} TB/s"
             + (f", read-only {read / 1e12:.2f} TB/s" if read else "")
             + (f" (rated {rated / 1e12:.2f} TB/s)" if rated else "") + ", bf16 matmul "
             f"{res['rates']['matmul_flop_per_s'] / 1e12:.0f} TFLOP/s, one tiny kernel in a graph "
             f"{res['rates']['graph_kernel_us']:.2f} us" + (f" ({res['rates_note']})" if res.get("rates_note") else ""),
             "", "| shape | B | K | old ms | new ms | bound ms (mem / flop) | new/bound | old/bound | "
             "matmuls (bound) | "
             "attention (bound) | norms+rope+silu | misc | launch floor | idle (profiler) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["grid"]:
        p, pb = r["parts_ms"], r["parts_bound_ms"]
        idle = r.get("profile", {}).get("idle_ms")
        lines.append(f"| {r['shape']} | {r['B']} | {r['K']} | {r['old_ms']:.3f} | {r['new_ms']:.3f} | "
                     f"{r['bound_ms']:.3f} ({r['memory_ms']:.3f} / {r['flop_ms']:.3f}) | {r['ratio_new']:.2f} | "
                     f"{r['ratio_old']:.2f} | {p['matmuls']:.3f} ({pb['matmuls']:.3f}) | "
                     f"{p['attention']:.3f} ({pb['attention']:.3f}) | {p['norms_rope_silu']:.3f} | {p['misc']:.3f} | "
                     f"{r['launch_floor_ms']:.3f} | {'-' if idle is None else f'{idle:.3f}'} |")
    lines += ["", "Where new - bound goes (ms): each part alone over its own bound, the glue, and the whole "
              "forward minus its parts (bounds_overlap: the parts' bounds summed minus the forward's, "
              "nonzero where the forward is FLOP-bound)",
              "| shape | B | K | new - bound | matmuls | attention | norms+rope+silu | misc | bounds_overlap | "
              "whole - parts | kernels (profiler) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["grid"]:
        g = r["gap_ms"]
        k = r.get("profile", {}).get("kernels_per_forward")
        lines.append(f"| {r['shape']} | {r['B']} | {r['K']} | {g['total']:.3f} | {g['matmuls_over_bound']:.3f} | "
                     f"{g['attention_over_kv_bound']:.3f} | {g['norms_rope_silu_over_bound']:.3f} | {g['misc']:.3f} | "
                     f"{g['bounds_overlap']:.3f} | {g['whole_minus_parts']:.3f} | {'-' if k is None else f'{k:.0f}'} |")
    lines += ["", "Inside the new forward's graph (profiler): kernel ms by kind, and wall minus kernel time (idle)",
              "| shape | B | K | matmul | attention | norm | rope_kv_write | silu_mul | other | idle | kernels |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["grid"]:
        pr = r.get("profile") or {}
        km = pr.get("kernel_ms")
        if km:
            lines.append(f"| {r['shape']} | {r['B']} | {r['K']} | " + " | ".join(
                f"{km.get(k, 0.0):.3f}" for k in ("matmul", "attention", "norm", "rope_kv_write", "silu_mul", "other"))
                + f" | {pr['idle_ms']:.3f} | {pr['kernels_per_forward']:.0f} |")
    lines += ["", "| shape | B | K | new ms | cuBLAS only | skinny kernel everywhere "
              "| matmuls alone: table / cuBLAS | pool 4x |",
              "|---|---|---|---|---|---|---|---|"]
    for r in res["grid"]:
        sk, p4 = r.get("new_skinny_ms"), r.get("new_ms_pool_4x")
        lines.append(f"| {r['shape']} | {r['B']} | {r['K']} | {r['new_ms']:.3f} | {r['new_cublas_ms']:.3f} | "
                     f"{'-' if sk is None else f'{sk:.3f}'} | {r['parts_ms']['matmuls']:.3f} / "
                     f"{r['matmuls_cublas_ms']:.3f} | {'-' if p4 is None else f'{p4:.3f}'} |")
    lines += ["", "| shape | B | MTP draft step old ms | new ms | new, cuBLAS only |", "|---|---|---|---|---|"]
    for d in res["drafts"]:
        lines.append(f"| {d['shape']} | {d['B']} | {d['draft_old_ms']:.3f} | {d['draft_new_ms']:.3f} | "
                     f"{d['draft_new_cublas_ms']:.3f} |")
    lines += ["", "| shape | M | weight | N x K | bound us | cuBLAS us (GB/s) | best skinny us (GB/s) tile |",
              "|---|---|---|---|---|---|---|"]
    for m in res["matmuls"]:
        sk = f"{m['skinny_us']:.1f} ({m['skinny_GBps']:.0f}) {tuple(m['skinny_tile'])}" if "skinny_us" in m else "-"
        lines.append(f"| {m['shape']} | {m['M']} | {m['weight']} | {m['N']} x {m['K']} | {m['bound_us']:.1f} | "
                     f"{m['cublas_us']:.1f} ({m['cublas_GBps']:.0f}) | {sk} |")
    for name, c in res.get("correctness", {}).items():
        lines.append(f"correctness {name} (bf16 vs an fp32 reference, B=4, 48 + 3 tokens): "
                     + "; ".join(f"{k}: hidden rel err {c[k]['hidden_rel_err']:.4f}, "
                                 f"argmax agree {c[k]['argmax_agree']:.3f}" for k in ("old", "new"))
                     + f"; new vs old {c['new_vs_old_hidden_rel']:.4f}")
    mem = res.get("memory")
    if mem:
        lines.append(f"memory: KV bytes per slot: trunk {mem['kv_bytes_per_slot_trunk']}, "
                     f"MTP {mem['kv_bytes_per_slot_mtp']}")
        for budget, m in mem.get("budgets", {}).items():
            lines.append(f"memory: budget {budget} tokens: {m['bytes_per_sequence'] / 2**20:.1f} MiB per sequence, "
                         f"widest batch {m['widest_batch']}, fits {m.get('fits')}, "
                         f"peak {m.get('peak_bytes', 0) / 2**30:.1f} GiB")
    if res.get("skinny_table_py"):
        lines += ["", f"SKINNY_TABLES[{res['device']!r}] = " + repr(res["skinny_table_py"])]
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--smoke", action="store_true", help="tiny, eager, CPU (Triton interpreter): CI only")
    ap.add_argument("--json", default=None)
    ap.add_argument("--shapes", default="5.7B,0.77B,preset", help="in this order (the main target first)")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=5, help="alternations of the old and new forward per cell (>= 5 "
                    "for the goal: its figure is their median)")
    ap.add_argument("--budget-s", type=float, default=1e9, help="skip what would start after this many seconds")
    ap.add_argument("--no-check", action="store_true", help="skip the correctness check and the memory fit")
    ap.add_argument("--from-json", default=None, help="re-read a saved run (no measuring): bounds, ratios, table")
    ap.add_argument("--copy-bytes-per-s", type=float, default=None, help="with --from-json: this copy bandwidth")
    ap.add_argument("--rates-note", default=None, help="with --from-json: why the rates were replaced")
    a = ap.parse_args(argv)
    if a.from_json:
        with open(a.from_json) as f:
            res = json.load(f)
        if a.copy_bytes_per_s:
            res["rates"]["measured_copy_bytes_per_s"] = res["rates"]["copy_bytes_per_s"]
            res["rates"]["copy_bytes_per_s"] = a.copy_bytes_per_s
            res["rates_note"] = a.rates_note or "copy bandwidth replaced"
        rebound(res)
        res["goals"] = [g.as_dict() for g in goals_of(res)]
        print(table(res))
        print("\n" + goals_table(goals_of(res)))
        save(res, a.json)
        return 0
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if dev.type != "cuda":
        if not a.smoke:
            print("bench_forward: no CUDA device (use --smoke for the CPU check)", file=sys.stderr)
            return 2
        os.environ.setdefault("TRITON_INTERPRET", "1")        # before triton is first imported
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    shapes = ["smoke"] if a.smoke else a.shapes.split(",")
    Bs, Ks = ((2,), (1,)) if a.smoke else ((16, 64), (1, 2, 3))
    kv_len = 12 if a.smoke else KV_LEN
    reps = 1 if a.smoke else a.reps
    res = dict(device=torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu", torch=torch.__version__,
               date=time.strftime("%Y-%m-%d"), smoke=a.smoke, dtype=str(dtype).replace("torch.", ""),
               kv_len=kv_len, vocab=VOCAB)
    try:
        import triton
        res["triton"] = triton.__version__
    except ImportError:
        pass
    t0 = time.perf_counter()
    table0 = matmul.skinny_table(dev)
    res["shipped_skinny_table"] = {f"{n}x{k}@{m}": list(t) for (n, k, m), t in table0.items()}
    table0.clear()                         # "new" below: this run's own table, printed at the end
    res["rates"] = machine_rates(dev, a.smoke)
    r = res["rates"]
    rated = f" (rated {r['rated_bytes_per_s'] / 1e12:.2f})" if r.get("rated_bytes_per_s") else ""
    log(f"copy {r['copy_bytes_per_s'] / 1e12:.2f} TB/s best of {len(r['copy_bytes_per_s_all'])}, read-only "
        f"{r['read_bytes_per_s'] / 1e12:.2f} TB/s best of {len(r['read_bytes_per_s_all'])}{rated}  "
        f"matmul {r['matmul_flop_per_s'] / 1e12:.0f} TFLOP/s  "
        f"graphed tiny kernel {r['graph_kernel_us']:.2f} us")
    res.update(grid=[], drafts=[], matmuls=[], skinny_table={}, errors={}, skipped=[])
    if not a.no_check:
        res["correctness"] = {}
        for s in (["smoke"] if a.smoke else ["preset", "0.77B", "5.7B"]):
            try:
                res["correctness"][s] = correctness(s, dev, prefix=8 if a.smoke else 48)
            except Exception as e:
                res["errors"][f"correctness {s}"] = f"{type(e).__name__}: {e}"[:2000]
            log(f"correctness {s}:", json.dumps(res["correctness"].get(s) or res["errors"].get(f"correctness {s}")))
        save(res, a.json)
    for s in shapes:
        if time.perf_counter() - t0 > a.budget_s:
            res["skipped"].append(s)
            continue
        try:
            r = run_shape(s, dev, dtype, res["rates"], Bs, Ks, reps, kv_len, profile_it=True,
                          rounds=1 if a.smoke else a.rounds)
        except Exception as e:            # keep the other shapes' numbers; say what broke
            res["errors"][s] = f"{type(e).__name__}: {e}"[:2000]
            log(f"{s}: FAILED {res['errors'][s]}")
            continue
        for k in ("grid", "drafts", "matmuls"):
            res[k] += r[k]
        res["skinny_table"].update(r["skinny_table"])
        save(res, a.json)
    res["skinny_table_py"] = dict(sorted(matmul.skinny_table(dev).items()))
    if not a.no_check and time.perf_counter() - t0 <= a.budget_s:
        try:
            res["memory"] = memory("smoke" if a.smoke else "5.7B", dev, dtype)
        except Exception as e:
            res["errors"]["memory"] = f"{type(e).__name__}: {e}"[:2000]
        log("memory:", json.dumps(res.get("memory") or res["errors"].get("memory")))
    res["wall_s"] = time.perf_counter() - t0
    rebound(res)
    res["goals"] = [g.as_dict() for g in goals_of(res)]
    print(table(res))
    print("\n" + goals_table(goals_of(res)))
    res.pop("skinny_table_py")
    save(res, a.json)
    return 1 if res["errors"] else 0


def goals_of(res) -> list:
    """Issue 23's forward goal, judged at the device's rated bandwidth where it has one (bench/goals.py)."""
    rated = res["rates"].get("rated_bytes_per_s")
    if not rated:
        return forward_goals(res["grid"])
    at_rated = json.loads(json.dumps({k: v for k, v in res.items() if k != "skinny_table_py"}, default=float))
    at_rated["rates"]["copy_bytes_per_s"] = rated
    rebound(at_rated)
    return forward_goals(res["grid"], at_rated["grid"])


def save(res, path):
    if path:
        with open(path, "w") as f:
            json.dump({k: v for k, v in res.items() if k != "skinny_table_py"}, f, indent=1, default=float)


if __name__ == "__main__":
    sys.exit(main())
