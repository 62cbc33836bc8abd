"""Hidden-row fingerprints: FNV-1a 64 over the little-endian BF16 bytes of a row.

The definition (docs/telemetry.md) is `fnv1a64` below, in plain Python. A row
that is not BF16 is rounded to BF16 first with torch's own `.to(torch.bfloat16)`,
so a CPU fp32 run and a GPU bf16 run of the same hidden hash alike.

`fingerprint_rows` hashes every row of a step in one call on the tensor's own
device and returns a device tensor: no host sync and no per-row copy, so the
FINGERPRINTS lever is cheap enough to leave on (the reference engine paid a D2H
copy and a stream sync per row and had to stay out of timed legs). On CUDA it
is a Triton kernel; elsewhere a torch loop over byte columns, vectorised over
rows. Both return int64 holding the same 64 bits as the unsigned hash.

FNV-1a is a strict byte-by-byte chain, so no implementation can parallelise
within a row; the parallelism is across rows.
"""
from __future__ import annotations

import contextlib
import functools
import math

import torch

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
_MASK64 = (1 << 64) - 1


def fnv1a64(data: bytes) -> int:
    """FNV-1a 64 of `data`, as an unsigned int: the reference definition."""
    h = FNV_OFFSET
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & _MASK64
    return h


def to_signed(v: int) -> int:
    """The int64 with the same 64 bits as unsigned `v` (how the events store it)."""
    v &= _MASK64
    return v - (1 << 64) if v >= 1 << 63 else v


def to_unsigned(v: int) -> int:
    return int(v) & _MASK64


def to_hex(v: int) -> str:
    """16 hex digits of the unsigned value (accepts the int64 or the unsigned form)."""
    return f"{to_unsigned(v):016x}"


def _as_bf16_rows(x: torch.Tensor) -> torch.Tensor:
    if x.dim() < 1:
        raise ValueError("fingerprint_rows needs a [..., H] tensor, got a scalar")
    x = x if x.dtype == torch.bfloat16 else x.to(torch.bfloat16)
    return x.reshape(math.prod(x.shape[:-1]), x.shape[-1])  # not -1: H may be 0


def row_bytes(row: torch.Tensor) -> bytes:
    """The little-endian BF16 bytes of one row: what the fingerprint hashes."""
    bits = _as_bf16_rows(row.detach().cpu()).view(torch.int16).numpy()
    return bits.astype("<i2").tobytes()


def fingerprint_reference(x: torch.Tensor) -> list[int]:
    """Unsigned fingerprints of the rows of `x`, one Python call per row (slow; tests)."""
    rows = _as_bf16_rows(x.detach().cpu())
    return [fnv1a64(row_bytes(r)) for r in rows]


def fingerprint_rows(x: torch.Tensor, backend: str = "auto") -> torch.Tensor:
    """int64 fingerprints of the rows of `x` [..., H] -> [...], on x's device.

    backend: "auto" (Triton on CUDA, torch elsewhere), "torch", or "triton"
    (the latter also on CPU tensors under TRITON_INTERPRET=1, for tests).
    """
    rows = _as_bf16_rows(x.detach())
    lead = x.shape[:-1]
    if backend == "auto":
        backend = "triton" if rows.is_cuda and _triton_available() else "torch"
    if backend == "triton":
        out = _fingerprint_triton(rows)
    elif backend == "torch":
        out = _fingerprint_torch(rows)
    else:
        raise ValueError(f"unknown fingerprint backend {backend!r}")
    return out.reshape(lead)


def _byte_columns(rows: torch.Tensor) -> torch.Tensor:
    """[2H, N] int64 byte values of the rows, in hashing order (low byte first)."""
    bits = rows.view(torch.int16).to(torch.int64) & 0xFFFF  # undo the sign extension
    lo, hi = bits & 0xFF, bits >> 8
    # interleave lo/hi per element, then put the byte index first so each step of
    # the loop below reads one contiguous [N] column
    return torch.stack([lo, hi], dim=-1).reshape(rows.shape[0], -1).t().contiguous()


def _fingerprint_torch(rows: torch.Tensor) -> torch.Tensor:
    """Vectorised over rows, sequential over bytes. torch int64 XOR is bitwise and
    int64 multiply wraps modulo 2^64 (two's complement), which is exactly the
    uint64 arithmetic FNV needs on the same 64 bits; the tests check it against
    `fnv1a64` including hashes above 2^63."""
    h = torch.full((rows.shape[0],), to_signed(FNV_OFFSET), dtype=torch.int64, device=rows.device)
    if rows.shape[0] == 0:
        return h
    for col in _byte_columns(rows):
        h.bitwise_xor_(col)
        h.mul_(FNV_PRIME)
    return h


def _triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


@functools.cache
def _triton_kernel():
    """Built on first use so importing this module never imports Triton (and so
    TRITON_INTERPRET, read when a kernel is decorated, can be set before that)."""
    import triton
    import triton.language as tl

    @triton.jit
    def fnv1a64_rows(x_ptr, out_ptr, n_rows, W, row_stride, BLOCK_ROWS: tl.constexpr, UNROLL: tl.constexpr,
                     BYTES: tl.constexpr, EVEN: tl.constexpr):
        # One lane per row: the hash is a strict chain over the row's bytes, so rows are the
        # only parallelism. x is the row data as W words of BYTES bytes (int16, or int64 where
        # rows allow: 4 bf16 elements a load). UNROLL words per iteration: their loads do not
        # wait on the chain, so they are all in flight at once (a step hashes few rows: load
        # latency, not bandwidth: 169 -> 98 us at H = 4096 with 8-byte loads,
        # bench/results/bench_fp_step_8b_h200_2026-12-01[ef].json).
        # The 64-bit state is two uint32 words: the FNV prime is 2^40 + 0x1B3, so
        # x * prime mod 2^64 = x * 0x1B3 + (x_lo << 40): one xor and 32-bit multiplies a byte.
        rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
        live = rows < n_rows
        base = x_ptr + rows.to(tl.int64) * row_stride
        h_lo = tl.full([BLOCK_ROWS], 0x84222325, tl.uint32)
        h_hi = tl.full([BLOCK_ROWS], 0xCBF29CE4, tl.uint32)
        c = tl.full([BLOCK_ROWS], 0x1B3, tl.uint32)
        for j0 in range(0, W, UNROLL):
            for u in tl.static_range(UNROLL):
                if EVEN:                  # W a multiple of UNROLL: no word past the row's end
                    raw = tl.load(base + j0 + u, mask=live, other=0)
                else:
                    inside = (tl.zeros([BLOCK_ROWS], tl.int32) + j0 + u) < W   # a [BLOCK_ROWS] mask
                    raw = tl.load(base + j0 + u, mask=live & inside, other=0)
                if BYTES == 2:            # int16 -> int32 sign-extends; the mask recovers the raw bits
                    lo32 = (raw.to(tl.int32) & 0xFFFF).to(tl.uint32)     # (no hi32: bytes 0-1 only)
                else:
                    w64 = raw.to(tl.uint64, bitcast=True)
                    lo32 = w64.to(tl.uint32)
                    hi32 = (w64 >> 32).to(tl.uint32)
                for byte in tl.static_range(BYTES):      # little-endian: memory order is low byte first
                    if byte < 4:
                        b = (lo32 >> (8 * byte)) & 0xFF
                    else:
                        b = (hi32 >> (8 * (byte - 4))) & 0xFF
                    x = h_lo ^ b
                    g_lo = x * c                                      # uint32 multiplies wrap mod 2^32
                    g_hi = h_hi * c + tl.umulhi(x, c) + (x << 8)
                    if EVEN:
                        h_lo, h_hi = g_lo, g_hi
                    else:                 # past the row's end: the hash stands
                        h_lo, h_hi = tl.where(inside, g_lo, h_lo), tl.where(inside, g_hi, h_hi)
        h = (h_hi.to(tl.uint64) << 32) | h_lo.to(tl.uint64)
        tl.store(out_ptr + rows, h.to(tl.int64, bitcast=True), mask=live)

    return fnv1a64_rows


# 32 rows = one warp, one lane per row; more rows get more programs (more SMs).
_BLOCK_ROWS = 32
# bf16 elements hashed per loop iteration (their loads issued together)
_UNROLL = 16


def _fingerprint_triton(rows: torch.Tensor) -> torch.Tensor:
    n, h = rows.shape
    out = torch.empty(n, dtype=torch.int64, device=rows.device)
    if n == 0:
        return out
    if rows.stride(-1) != 1:  # the kernel walks a row with unit stride
        rows = rows.contiguous()
    bits = rows.view(torch.int16)
    # 8-byte loads where every row starts 8-byte aligned and holds whole words (4 bf16 elements)
    if h % 4 == 0 and bits.stride(0) % 4 == 0 and bits.data_ptr() % 8 == 0:
        words, nbytes = bits.view(torch.int64), 8
    else:
        words, nbytes = bits, 2
    W = words.shape[1]
    grid = (triton_cdiv(n, _BLOCK_ROWS),)
    with torch.cuda.device(rows.device) if rows.is_cuda else contextlib.nullcontext():   # (kernels.on_its_device)
        _triton_kernel()[grid](words, out, n, W, words.stride(0), BLOCK_ROWS=_BLOCK_ROWS, UNROLL=_UNROLL,
                               BYTES=nbytes, EVEN=W % _UNROLL == 0, num_warps=1)
    return out


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)
