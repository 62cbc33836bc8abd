"""SwiGLU's middle: silu(gate) * up from the fused gate_up matmul's output, in one pass.

Numerics as torch's bf16 ops: silu computed in fp32 and rounded to the activation dtype, then
the product rounded once (the torch path's F.silu(g) * u: two launches and one extra
[M, intermediate] round trip through memory).
"""
from __future__ import annotations

import functools

import torch

from atlas_ab.runtime.kernels import interpreting, on_its_device

_BLOCK = 1024


@functools.cache
def _kernel(interpret: bool):
    import triton
    import triton.language as tl

    @triton.jit
    def silu_mul_rows(GU, Y, gu_stride, y_stride, N, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        live = cols < N
        g = tl.load(GU + row * gu_stride + cols, mask=live, other=0.0).to(tl.float32)
        u = tl.load(GU + row * gu_stride + N + cols, mask=live, other=0.0).to(tl.float32)
        s = (g / (1.0 + tl.exp(-g))).to(Y.dtype.element_ty).to(tl.float32)
        tl.store(Y + row * y_stride + cols, (s * u).to(Y.dtype.element_ty), mask=live)

    return silu_mul_rows


@on_its_device
def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """gate_up [..., 2 I] (gate columns first) -> silu(gate) * up [..., I]."""
    N = gate_up.shape[-1] // 2
    gu = gate_up.reshape(-1, 2 * N)
    if gu.stride(-1) != 1:
        gu = gu.contiguous()
    y = torch.empty(*gate_up.shape[:-1], N, dtype=gate_up.dtype, device=gate_up.device)
    M = gu.shape[0]
    if M:
        block = min(_BLOCK, max(16, 1 << (N - 1).bit_length()))
        _kernel(interpreting())[(M, -(-N // block))](gu, y.view(M, N), gu.stride(0), N, N, BLOCK=block,
                                                     num_warps=4 if block >= 512 else 1)
    return y
