"""Attention of a few (or many) new query rows per sequence, straight from the KVPool.

The rule is the pool's (kv.py): the query row written at slot s sees its sequence's slots
[0, min(s, capacity - 1)] (and only s - window < j with a sliding window); a padding row
(slot -1) sees slot 0. No mask tensor is built and K/V are never gathered or repeated:

  - one program per (sequence, KV head, block of query rows, KV split). The G query heads that
    share a KV head are folded into the program's rows (row r = t * G + g), so each K/V tile is
    loaded once for all of them (GQA without repeat_interleave);
  - each program walks only the KV slots its rows can see, read from `slots` on the device, so a
    CUDA graph captured once stays valid as sequences grow, and a pool sized for the whole turn
    costs only the live length in bandwidth;
  - few programs (small batch x KV heads, the decode shape) split the KV range over several
    programs (flash-decoding), each writing a partial result and its log-sum-exp, combined by a
    second small kernel.

A tree verify (config/tree.py: N+1 nodes at slots start .. start+N, node ids in (depth, path)
order, so a node's ancestors sit at lower slots) adds one rule: a row inside the tree sees the
committed slots before its sequence's `start` and, inside the block, only the nodes set in its
row's ancestor bitmask (bit u: slot start + u); kv.py's `tree_mask` is the same rule as a tensor.
The bound of what a row can see stays its own slot, so the KV walk and the splits are unchanged.

Numerics: fp32 scores and softmax (exp2 with log2(e) folded into the scale), P cast to the
activation dtype for P @ V as flash attention does, fp32 accumulation. fp32 activations use
IEEE fp32 dots (no TF32), so the CPU interpreter and fp32 GPU runs agree with the torch path to
fp32 rounding. Under the interpreter bf16 dots run as fp32 dots of the same (exactly representable)
values: Triton 3.9's interpreter multiplies bf16 tiles wrongly.
"""
from __future__ import annotations

import functools
import math
from typing import Optional

import torch

from atlas_ab.runtime.kernels import interpreting, on_its_device, sm_count
from atlas_ab.runtime.kernels.norm import triton_next_pow2

LOG2E = 1.4426950408889634


@functools.cache
def _kernels(interpret: bool):
    import triton
    import triton.language as tl

    @triton.jit
    def attend(Q, K, V, O, MidO, MidL, Slots, Base, Cap, TreeStart, TreeBits,
               T, n_rows, n_heads, q_stride, o_stride, slot_stride, window, scale_log2e,
               G: tl.constexpr, D: tl.constexpr, DP: tl.constexpr, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr, SPLITS: tl.constexpr, HAS_WINDOW: tl.constexpr, IEEE: tl.constexpr,
               EVEN_D: tl.constexpr, TREE: tl.constexpr):
        b = tl.program_id(0).to(tl.int64)
        n_mb = tl.cdiv(n_rows, BLOCK_M)
        kvh = tl.program_id(1) // n_mb
        mb = tl.program_id(1) % n_mb
        split = tl.program_id(2)

        r = mb * BLOCK_M + tl.arange(0, BLOCK_M)
        live = r < n_rows
        t = r // G
        head = kvh * G + r % G
        row = b * T + t                                    # the flat query row (b, t)
        d = tl.arange(0, DP)
        dm = d < D
        raw = tl.load(Slots + row, mask=live, other=0)
        slot = tl.maximum(raw, 0)
        cap = tl.load(Cap + b)
        if TREE:        # the block's first slot, and each row's ancestors in it (bit u: slot st + u)
            st = tl.load(TreeStart + b).to(tl.int32)
            bits = tl.load(TreeBits + t, mask=live, other=0)
            pad = raw < 0                # a padding row keeps the causal rule (it sees slot 0)
        hi_r = tl.where(live, tl.minimum(slot, cap - 1) + 1, 0)       # row sees [lo_r, hi_r)
        if HAS_WINDOW:
            lo_r = tl.maximum(slot - window + 1, 0)
        else:
            lo_r = tl.zeros_like(slot)
        lo_r = tl.where(live, lo_r, 1 << 40)
        hi = tl.max(hi_r, axis=0).to(tl.int32)            # slots within a sequence fit in int32
        lo = tl.min(lo_r, axis=0).to(tl.int32)
        per = tl.cdiv(tl.cdiv(hi - lo, BLOCK_N), SPLITS) * BLOCK_N
        start = lo + split * per
        end = tl.minimum(start + per, hi)

        q = tl.load(Q + row[:, None] * q_stride + head[:, None] * D + d[None, :],
                    mask=live[:, None] & dm[None, :], other=0.0)
        kv_base = K + tl.load(Base + b) * slot_stride + kvh * D
        v_base = V + tl.load(Base + b) * slot_stride + kvh * D
        m_i = tl.full([BLOCK_M], -1.0e30, tl.float32)     # finite: rows with no key here stay 0
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, DP], tl.float32)
        for j0 in range(start, end, BLOCK_N):
            j = j0 + tl.arange(0, BLOCK_N)
            if EVEN_D:
                jm = (j < end)[:, None]
            else:
                jm = (j < end)[:, None] & dm[None, :]
            k = tl.load(kv_base + j[:, None] * slot_stride + d[None, :], mask=jm, other=0.0)
            if IEEE:
                sc = tl.dot(q.to(tl.float32), tl.trans(k.to(tl.float32)), input_precision="ieee")
            else:
                sc = tl.dot(q, tl.trans(k))
            see = (j[None, :] < hi_r[:, None]) & (j[None, :] >= lo_r[:, None])
            if TREE:
                u = j[None, :] - st                                       # [1, BLOCK_N] offset in the block
                inb = (u >= 0) & (u < 31)
                anc = ((bits[:, None] >> tl.where(inb, u, 0)) & 1) != 0    # [BLOCK_M, BLOCK_N]
                see = see & ((j[None, :] < st) | (inb & anc) | pad[:, None])
            sc = tl.where(see, sc * scale_log2e, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(sc, axis=1))
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(sc - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, axis=1)
            v = tl.load(v_base + j[:, None] * slot_stride + d[None, :], mask=jm, other=0.0)
            if IEEE:        # P rounded to the activation dtype as the tensor-core path rounds it
                pv = tl.dot(p.to(v.dtype).to(tl.float32), v.to(tl.float32), input_precision="ieee")
            else:
                pv = tl.dot(p.to(v.dtype), v)
            acc = acc * alpha[:, None] + pv
            m_i = m_new
        l_safe = tl.where(l_i > 0, l_i, 1.0)
        out = acc / l_safe[:, None]
        if SPLITS == 1:
            tl.store(O + row[:, None] * o_stride + head[:, None] * D + d[None, :], out.to(O.dtype.element_ty),
                     mask=live[:, None] & dm[None, :])
        else:
            part = (row * n_heads + head) * SPLITS + split           # MidO [rows*H, SPLITS, DP]
            tl.store(MidO + part[:, None] * DP + d[None, :], out, mask=live[:, None])
            lse = tl.where(l_i > 0, m_i + tl.log2(l_safe), float("-inf"))
            tl.store(MidL + part, lse, mask=live)

    @triton.jit
    def combine(O, MidO, MidL, n_heads, o_stride,
                D: tl.constexpr, DP: tl.constexpr, SPLITS: tl.constexpr, SP: tl.constexpr):
        i = tl.program_id(0).to(tl.int64)                 # (query row, head)
        row = i // n_heads
        head = i % n_heads
        s = tl.arange(0, SP)
        d = tl.arange(0, DP)
        lse = tl.load(MidL + i * SPLITS + s, mask=s < SPLITS, other=float("-inf"))
        w = tl.exp2(lse - tl.max(lse, axis=0))
        part = tl.load(MidO + (i * SPLITS + s)[:, None] * DP + d[None, :], mask=(s < SPLITS)[:, None], other=0.0)
        out = tl.sum(part * w[:, None], axis=0) / tl.sum(w, axis=0)
        tl.store(O + row * o_stride + head * D + d, out.to(O.dtype.element_ty), mask=d < D)

    return attend, combine


def plan(batch: int, rows_per_seq: int, n_kv_heads: int, max_len: int, device: torch.device,
         head_dim: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, SPLITS) for a launch. Static per shape (so per CUDA graph): the split
    count depends on the batch and the pool's capacity, never on the live lengths.

    Split only when (sequences x KV heads x row blocks) leaves SMs idle: aim for ~2 programs per
    SM, and keep >= 2 KV blocks per split at the pool's full length."""
    BLOCK_M = 16 if rows_per_seq <= 16 else 32 if rows_per_seq <= 32 else 64
    BLOCK_N = 64 if head_dim <= 128 else 32
    programs = batch * n_kv_heads * math.ceil(rows_per_seq / BLOCK_M)
    sms = sm_count(device)
    splits = 1
    if programs < sms:
        splits = min(math.ceil(2 * sms / programs), max(1, max_len // (2 * BLOCK_N)), 16)
    return BLOCK_M, BLOCK_N, splits


def ancestor_bits(block: torch.Tensor) -> torch.Tensor:
    """block [T, W] bool (row t sees block slot u: kv.py's `tree_mask`) -> [T] int32 bitmasks,
    bit u set where block[t, u]; W at most 31 (config/tree.py's MAX_NODES keeps it at 9)."""
    W = block.shape[-1]
    if W > 31:
        raise ValueError(f"a tree block {W} nodes wide: the attention's bitmask holds 31")
    w = torch.bitwise_left_shift(torch.ones(W, dtype=torch.int32, device=block.device),
                                 torch.arange(W, dtype=torch.int32, device=block.device))
    return (block.to(torch.int32) * w).sum(-1, dtype=torch.int32)


@on_its_device
def attention(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, slots: torch.Tensor,
              base: torch.Tensor, capacity: torch.Tensor, n_heads: int, scale: float,
              window: Optional[int] = None, max_len: int = 1 << 20, splits: Optional[int] = None,
              tree: Optional[tuple] = None) -> torch.Tensor:
    """q [B, T, >= n_heads * D] with unit last stride and rows evenly strided (e.g. the q columns
    of the fused qkv output); k_pool/v_pool [total_slots, KVH, D] (one layer of the KVPool);
    slots [B, T]; base/capacity [B] (the pool's). Returns o [B, T, n_heads * D].
    max_len: the pool's longest capacity (bounds the split count); splits forces it (tests).
    tree: (start [B] the tree block's first slot, -1 inactive; bits [T] int32, row t's ancestors
    in the block as a bitmask: `ancestor_bits`), a tree verify's rows; None: causal."""
    B, T = slots.shape
    KVH, D = k_pool.shape[-2], k_pool.shape[-1]
    G = n_heads // KVH
    o = torch.empty(B, T, n_heads * D, dtype=q.dtype, device=q.device)
    if B * T == 0:
        return o
    assert q.stride(-1) == 1 and q.stride(0) == T * q.stride(1) and k_pool.is_contiguous() and v_pool.is_contiguous()
    n_rows = G * T
    BLOCK_M, BLOCK_N, S = plan(B, n_rows, KVH, max_len, q.device, D)
    if splits is not None:
        S = splits
    DP = max(16, triton_next_pow2(D))
    slots = slots.contiguous()
    attend, combine = _kernels(interpreting())
    if tree is not None:
        assert window is None, "a tree verify on a sliding-window model (model.py refuses it)"
        t_start, t_bits = tree[0].contiguous(), tree[1].contiguous()
        assert t_bits.dtype == torch.int32 and t_bits.shape == (T,)
    else:
        t_start = t_bits = slots        # not read (TREE is off)
    if S > 1:
        mid_o = torch.empty(B * T * n_heads * S, DP, dtype=torch.float32, device=q.device)
        mid_l = torch.empty(B * T * n_heads * S, dtype=torch.float32, device=q.device)
    else:
        mid_o = mid_l = o
    grid = (B, KVH * math.ceil(n_rows / BLOCK_M), S)
    attend[grid](q, k_pool, v_pool, o, mid_o, mid_l, slots, base, capacity, t_start, t_bits,
                 T, n_rows, n_heads, q.stride(1), o.stride(1), k_pool.stride(0), int(window or 0),
                 float(scale) * LOG2E, G=G, D=D, DP=DP, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, SPLITS=S,
                 HAS_WINDOW=window is not None, IEEE=q.dtype == torch.float32 or interpreting(),
                 EVEN_D=D == DP, TREE=tree is not None, num_warps=4, num_stages=2)
    if S > 1:
        combine[(B * T * n_heads,)](o, mid_o, mid_l, n_heads, o.stride(1), D=D, DP=DP, SPLITS=S,
                                    SP=max(2, triton_next_pow2(S)), num_warps=1)
    return o
