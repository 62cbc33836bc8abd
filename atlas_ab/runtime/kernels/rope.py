"""RoPE on the fused qkv rows, and the new K/V rows written into the KVPool, in one pass.

Input is the qkv matmul's output [B, T, (H + 2 KVH) * D]. Per query row: q heads are rotated in
place (the attention kernel reads them from there), k heads are rotated and stored at the row's
flat pool index, v heads are copied there. Qwen3's per-head q_norm / k_norm run first when given.

Numerics follow the torch path in the activation dtype: cos/sin are read from a table that
model.rope_cos_sin computed once for positions 0..n-1 (so they are the torch path's values, bit
for bit); a position past the table computes them here (fp32, Triton's cos/sin, which may differ
from torch's in the last fp32 bit). Each product and the sum are rounded to the activation dtype
as torch's bf16 ops round them: x1*c - x2*s and x2*c + x1*s, with the rotate_half convention
(first half / second half).

Why a kernel: the torch path's RoPE is ~7 launches per tensor (chunk, neg, cat, 2 mul, add, for
q and for k) plus two index_copy_ for the KV write, and ~8 more per forward for the cos/sin
tables (which matters most in the one-layer MTP draft step).
"""
from __future__ import annotations

import functools
from typing import Optional

import torch

from atlas_ab.runtime.kernels import interpreting, on_its_device
from atlas_ab.runtime.kernels.norm import triton_next_pow2


@functools.cache
def _kernel(interpret: bool):
    import triton
    import triton.language as tl

    @triton.jit
    def rope_write(QKV, Pos, CosT, SinT, n_table, Inv, Kc, Vc, Slots, Base, Cap, QW, KW, qkv_stride, slot_stride, eps,
                   T, H, KVH, D: tl.constexpr, HALF: tl.constexpr, HALFP: tl.constexpr, HP: tl.constexpr,
                   KVHP: tl.constexpr, DP: tl.constexpr, QK_NORM: tl.constexpr):
        dt = QKV.dtype.element_ty
        row = tl.program_id(0).to(tl.int64)
        h = tl.arange(0, HP)[:, None]                       # q heads, then k heads
        i = tl.arange(0, HALFP)[None, :]
        live = (h < H + KVH) & (i < HALF)
        src = QKV + row * qkv_stride + h * D + i
        x1 = tl.load(src, mask=live, other=0.0).to(tl.float32)
        x2 = tl.load(src + HALF, mask=live, other=0.0).to(tl.float32)
        is_q = h < H
        if QK_NORM:                                         # per-head RMSNorm, as model.RMSNorm
            inv = tl.math.rsqrt((tl.sum(x1 * x1, axis=1) + tl.sum(x2 * x2, axis=1)) / D + eps)[:, None]
            w1 = tl.where(is_q, tl.load(QW + i, mask=i < HALF, other=0.0), tl.load(KW + i, mask=i < HALF, other=0.0))
            w2 = tl.where(is_q, tl.load(QW + HALF + i, mask=i < HALF, other=0.0),
                          tl.load(KW + HALF + i, mask=i < HALF, other=0.0))
            x1 = ((x1 * inv).to(dt).to(tl.float32) * w1.to(tl.float32)).to(dt).to(tl.float32)
            x2 = ((x2 * inv).to(dt).to(tl.float32) * w2.to(tl.float32)).to(dt).to(tl.float32)
        pos = tl.load(Pos + row)
        if pos < n_table:
            c = tl.load(CosT + pos * HALF + i, mask=i < HALF, other=0.0).to(tl.float32)
            s = tl.load(SinT + pos * HALF + i, mask=i < HALF, other=0.0).to(tl.float32)
        else:
            f = pos.to(tl.float32) * tl.load(Inv + i, mask=i < HALF, other=0.0)
            c = tl.cos(f).to(dt).to(tl.float32)
            s = tl.sin(f).to(dt).to(tl.float32)
        o1 = ((x1 * c).to(dt).to(tl.float32) - (x2 * s).to(dt).to(tl.float32)).to(dt)
        o2 = ((x2 * c).to(dt).to(tl.float32) + (x1 * s).to(dt).to(tl.float32)).to(dt)
        qm = is_q & live
        tl.store(src, o1, mask=qm)
        tl.store(src + HALF, o2, mask=qm)
        b = row // T                                        # the pool's rule (kv.py KVPool.flat): padding
        slot = tl.load(Slots + row)                         # and out-of-budget rows go to the dump slot
        cap = tl.load(Cap + b)
        flat = tl.load(Base + b) + tl.where((slot < 0) | (slot >= cap), cap, slot)
        km = (h >= H) & live
        dst = Kc + flat * slot_stride + (h - H) * D + i
        tl.store(dst, o1.to(Kc.dtype.element_ty), mask=km)
        tl.store(dst + HALF, o2.to(Kc.dtype.element_ty), mask=km)
        vh = tl.arange(0, KVHP)[:, None]
        d = tl.arange(0, DP)[None, :]
        vm = (vh < KVH) & (d < D)
        v = tl.load(QKV + row * qkv_stride + (H + KVH + vh) * D + d, mask=vm, other=0.0)
        tl.store(Vc + flat * slot_stride + vh * D + d, v.to(Vc.dtype.element_ty), mask=vm)

    return rope_write


@on_its_device
def rope_write_kv(qkv: torch.Tensor, positions: torch.Tensor, rope: tuple, k_pool: torch.Tensor,
                  v_pool: torch.Tensor, slots: torch.Tensor, base: torch.Tensor, capacity: torch.Tensor,
                  n_heads: int, n_kv_heads: int, q_norm: Optional[torch.Tensor] = None,
                  k_norm: Optional[torch.Tensor] = None, eps: float = 1e-6) -> None:
    """qkv [B, T, (H + 2 KVH) * D] contiguous (q rotated in place); positions [B, T] contiguous
    (RoPE positions); rope = (cos table [n, D/2], sin table [n, D/2], inv_freq [D/2] fp32), as
    model.rope_table builds them;
    k_pool/v_pool [total_slots, KVH, D] (one layer of the KVPool); slots [B, T] contiguous, the
    rows' slots; base/capacity [B], the pool's."""
    D = k_pool.shape[-1]
    rows = qkv.shape[0] * qkv.shape[1]
    if not rows:
        return
    assert qkv.is_contiguous() and k_pool.is_contiguous() and v_pool.is_contiguous()
    qk_norm = q_norm is not None
    cos_t, sin_t, inv = rope
    HALF = D // 2
    HP = triton_next_pow2(n_heads + n_kv_heads)
    DP = triton_next_pow2(D)
    _kernel(interpreting())[(rows,)](
        qkv, positions, cos_t, sin_t, cos_t.shape[0], inv, k_pool, v_pool, slots, base, capacity,
        q_norm if qk_norm else inv, k_norm if qk_norm else inv, qkv.stride(1), k_pool.stride(0), float(eps),
        qkv.shape[1], n_heads, n_kv_heads,
        D=D, HALF=HALF, HALFP=triton_next_pow2(HALF), HP=HP, KVHP=triton_next_pow2(n_kv_heads), DP=DP,
        QK_NORM=qk_norm, num_warps=1 if HP * HALF <= 1024 else 4)
