"""The fast path's matmuls: cuBLAS (F.linear), or a Triton kernel for skinny ones (few rows).

A verify forward multiplies B x (K+1) rows (32..256) by every weight matrix once, so for the
small batches its matmuls are weight streaming: the time is the bytes of W over the memory
bandwidth. `skinny_linear` is written for that case: each program owns a BLOCK_N-row slab of W
and all (<= 64) rows of x, walks K in BLOCK_K steps with several loads in flight, and never
splits K (so no second pass, no atomics: results are deterministic, as cuBLAS's are).

Which one runs is a fixed table, never a timing taken at run time: a run must compute the same
numbers every time it is resumed. "auto" (the default) takes the skinny kernel, with the tile
listed there, exactly for the (N, K, row bucket) entries of this GPU's `SKINNY_TABLES` entry: the
weight shapes where bench/bench_forward.py found it faster than cuBLAS (a table per GPU, as
engines keep tuned kernel configs per GPU; a GPU without one uses cuBLAS).
ATLAS_AB_MATMUL=cublas|triton or `use_matmul(...)` forces one side (triton: the skinny kernel for
every matmul of <= 64 rows, tiles by `skinny_plan`).
"""
from __future__ import annotations

import functools
from typing import Optional

import torch
import torch.nn.functional as F

from atlas_ab.runtime.kernels import Choice, interpreting, on_its_device, sm_count

SKINNY_MAX_ROWS = 64
# GPU name -> {(N, K, row bucket): (BLOCK_N, BLOCK_K, num_stages)}: where the skinny kernel's best tile beat
# cuBLAS by > 3% (summed over the bucket's row counts, each matmul over every layer's weight); elsewhere
# cuBLAS. From bench/bench_forward.py: bench/RESULTS.md, "The skinny matmul table".
SKINNY_TABLES: dict = {"NVIDIA H200": {
    (512, 512, 16): (32, 128, 4), (512, 512, 32): (16, 256, 3), (512, 512, 64): (16, 128, 4),
    (512, 1024, 16): (16, 128, 4), (512, 1024, 64): (16, 128, 4), (512, 1408, 64): (16, 128, 4),
    (1536, 512, 16): (32, 128, 4), (1536, 512, 32): (32, 128, 4), (1536, 512, 64): (16, 128, 4),
    (2816, 512, 16): (32, 128, 4), (2816, 512, 32): (32, 128, 4), (2816, 512, 64): (32, 128, 4),
    (4096, 512, 16): (32, 128, 4), (4096, 512, 64): (32, 128, 4),
    (6144, 4096, 16): (32, 128, 4), (22016, 4096, 16): (64, 128, 3),
}}
MATMUL = Choice("ATLAS_AB_MATMUL", ("auto", "cublas", "triton"))
matmul_choice, use_matmul = MATMUL.get, MATMUL.use


@functools.cache
def skinny_table(device: torch.device) -> dict:
    """This GPU's table (empty for a GPU without one, and for the CPU): a dict the benchmark
    may fill in place while it measures."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return SKINNY_TABLES.setdefault(name, {})


def rows_bucket(rows: int) -> int:
    return max(16, 1 << (rows - 1).bit_length())


def linear(x: torch.Tensor, w: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """F.linear(x, w, bias) for the fast path: the skinny Triton kernel or cuBLAS, by the table."""
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    if 0 < rows <= SKINNY_MAX_ROWS:
        choice = matmul_choice()
        if choice == "triton":
            return skinny_linear(x, w, bias)
        if choice == "auto":
            tile = skinny_table(w.device).get((w.shape[0], w.shape[1], rows_bucket(rows)))
            if tile is not None:
                return skinny_linear(x, w, bias, tile)
    return F.linear(x, w, bias)


@functools.cache
def _kernel(interpret: bool):
    import triton
    import triton.language as tl

    @triton.jit
    def skinny_mm(X, W, Y, Bias, M, N, K, x_stride, y_stride,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  EVEN_N: tl.constexpr, EVEN_K: tl.constexpr, HAS_BIAS: tl.constexpr, IEEE: tl.constexpr):
        n0 = tl.program_id(0) * BLOCK_N
        rm = tl.arange(0, BLOCK_M)
        rn = n0 + tl.arange(0, BLOCK_N)
        rk = tl.arange(0, BLOCK_K)
        xp = X + rm[:, None] * x_stride + rk[None, :]
        wp = W + rn.to(tl.int64)[:, None] * K + rk[None, :]       # W [N, K] row-major: a slab of rows
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        for k0 in range(0, K, BLOCK_K):
            if EVEN_K:
                x = tl.load(xp, mask=(rm < M)[:, None], other=0.0)
                if EVEN_N:
                    w = tl.load(wp)
                else:
                    w = tl.load(wp, mask=(rn < N)[:, None], other=0.0)
            else:
                km = (k0 + rk) < K
                x = tl.load(xp, mask=(rm < M)[:, None] & km[None, :], other=0.0)
                w = tl.load(wp, mask=(rn < N)[:, None] & km[None, :], other=0.0)
            if IEEE:
                acc += tl.dot(x.to(tl.float32), tl.trans(w.to(tl.float32)), input_precision="ieee")
            else:
                acc += tl.dot(x, tl.trans(w))
            xp += BLOCK_K
            wp += BLOCK_K
        if HAS_BIAS:
            acc += tl.load(Bias + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
        tl.store(Y + rm[:, None] * y_stride + rn[None, :], acc.to(Y.dtype.element_ty),
                 mask=(rm < M)[:, None] & (rn < N)[None, :])

    return skinny_mm


# the tiles bench_forward.py tries: (BLOCK_N, BLOCK_K, num_stages)
TILES = ((16, 128, 4), (16, 256, 3), (32, 128, 4), (32, 256, 3), (64, 64, 4), (64, 128, 3))


def skinny_plan(N: int, device: torch.device) -> tuple[int, int, int]:
    """(BLOCK_N, BLOCK_K, num_stages) without a table entry: slabs of W narrow enough that every
    SM holds >= 2 programs (weight streaming wants bytes in flight on every SM)."""
    sms = sm_count(device)
    return (64, 128, 3) if N >= 64 * 3 * sms else (32, 128, 4) if N >= 32 * 2 * sms else (16, 256, 3)


@on_its_device
def skinny_linear(x: torch.Tensor, w: torch.Tensor, bias: Optional[torch.Tensor] = None,
                  tile: Optional[tuple] = None) -> torch.Tensor:
    """x [..., K] (<= 64 rows) @ w[N, K]^T (+ bias) -> [..., N], fp32 accumulation.
    tile: (BLOCK_N, BLOCK_K, num_stages), else `skinny_plan`'s."""
    K = x.shape[-1]
    N = w.shape[0]
    x2 = x.reshape(-1, K)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    M = x2.shape[0]
    if M > SKINNY_MAX_ROWS:
        raise ValueError(f"skinny_linear takes <= {SKINNY_MAX_ROWS} rows, got {M}")
    assert w.is_contiguous() and w.shape[1] == K
    y = torch.empty(*x.shape[:-1], N, dtype=x.dtype, device=x.device)
    if M == 0:
        return y
    BN, BK, stages = tile if tile is not None else skinny_plan(N, x.device)
    BM = rows_bucket(M)
    _kernel(interpreting())[(-(-N // BN),)](
        x2, w, y, bias if bias is not None else w, M, N, K, x2.stride(0), N,
        BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK, EVEN_N=N % BN == 0, EVEN_K=K % BK == 0, HAS_BIAS=bias is not None,
        IEEE=x.dtype == torch.float32 or interpreting(), num_warps=4, num_stages=stages)
    return y
