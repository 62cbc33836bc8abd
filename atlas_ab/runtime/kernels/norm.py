"""RMSNorm, optionally with the residual add before it, in one pass over each row.

Numerics are transformers' (and the torch path's): the residual stream is summed in the
activation dtype (x + r rounded once), normalised in fp32, cast back to the activation dtype,
then scaled by the weight (the product rounded once). Only the order of the sum of squares
differs from F.rms_norm, a few fp32 ulps before the cast.

Why a kernel: the torch path spends 4 launches per norm (cast, rms_norm, cast, mul) plus one for
the residual add; at 32 layers x 2 norms that is ~320 launches a forward, ~2-3 us each even
inside a CUDA graph (bench/RESULTS.md, "Launch-bound").
"""
from __future__ import annotations

import functools
from typing import Optional

import torch

from atlas_ab.runtime.kernels import interpreting, on_its_device


@functools.cache
def _kernel(interpret: bool):
    import triton
    import triton.language as tl

    @triton.jit
    def rmsnorm_rows(X, R, W, Y, XO, x_stride, r_stride, y_stride, xo_stride, N, eps,
                     BLOCK: tl.constexpr, HAS_RES: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK)
        live = cols < N
        x = tl.load(X + row * x_stride + cols, mask=live, other=0.0)
        if HAS_RES:
            x = (x.to(tl.float32) + tl.load(R + row * r_stride + cols, mask=live, other=0.0).to(tl.float32))
            x = x.to(XO.dtype.element_ty)                        # the residual stream, rounded once
            tl.store(XO + row * xo_stride + cols, x, mask=live)
        xf = x.to(tl.float32)
        inv = tl.math.rsqrt(tl.sum(xf * xf, axis=0) / N + eps)
        y = (xf * inv).to(Y.dtype.element_ty).to(tl.float32)   # HF: normalise in fp32, cast, then scale
        w = tl.load(W + cols, mask=live, other=0.0).to(tl.float32)
        tl.store(Y + row * y_stride + cols, (y * w).to(Y.dtype.element_ty), mask=live)

    return rmsnorm_rows


def _rows(x: torch.Tensor) -> torch.Tensor:
    x2 = x.reshape(-1, x.shape[-1])
    return x2 if x2.stride(-1) == 1 else x2.contiguous()


@on_its_device
def _launch(x, r, weight, eps, out):
    N = x.shape[-1]
    xr = _rows(x)
    M = xr.shape[0]
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device) if out is None else out
    yr = y.view(M, N)               # `out` may be strided (rows of a wider buffer), not copied
    xo = rr = None
    if r is not None:
        rr = _rows(r)
        xo = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if M:
        BLOCK = max(triton_next_pow2(N), 16)
        warps = 1 if BLOCK <= 512 else 4 if BLOCK <= 2048 else 8 if BLOCK <= 8192 else 16
        xov = xo.view(-1, N) if xo is not None else yr
        _kernel(interpreting())[(M,)](xr, rr if rr is not None else xr, weight, yr, xov,
                                      xr.stride(0), rr.stride(0) if rr is not None else 0, yr.stride(0),
                                      xov.stride(0), N, float(eps), BLOCK=BLOCK, HAS_RES=r is not None,
                                      num_warps=warps)
    return y, xo


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """weight * rms_norm(x) over the last dim. `out` may be a strided view (rows of a wider buffer)."""
    return _launch(x, None, weight, eps, out)[0]


def add_rmsnorm(x: torch.Tensor, r: torch.Tensor, weight: torch.Tensor, eps: float):
    """(x + r, weight * rms_norm(x + r)): the residual add and the next norm in one pass."""
    y, xo = _launch(x, r, weight, eps, None)
    return xo, y


def triton_next_pow2(n: int) -> int:
    return 1 << (int(n) - 1).bit_length()
