"""FNV-1a 64 fingerprints: the reference, the torch fallback, the Triton kernel.

The Triton kernel is checked here through Triton's interpreter (CPU), and on a
real GPU by the `gpu`-marked test, both bit-exact against `fnv1a64`.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from atlas_ab.runtime import kernels
from atlas_ab.telemetry.fingerprint import (
    FNV_OFFSET,
    fingerprint_reference,
    fingerprint_rows,
    fnv1a64,
    row_bytes,
    to_hex,
    to_signed,
    to_unsigned,
)

ROOT = Path(__file__).resolve().parents[2]

# bf16 bit patterns that are "just bytes" to the hash but easy to mishandle as
# floats: +-0, +-inf, quiet and signalling NaNs with payloads, a subnormal, max.
SPECIAL_BITS = [0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0x7FC1, 0xFFC5, 0x7F81, 0xFF81,
                0x0001, 0x8001, 0x7F7F, 0xFF7F, 0x3F80, 0x00FF, 0xFF00]


def special_rows(h: int) -> torch.Tensor:
    """Rows made of the special patterns, cycled with different phases per row."""
    bits = torch.tensor(SPECIAL_BITS, dtype=torch.int32)
    idx = (torch.arange(len(SPECIAL_BITS))[:, None] + torch.arange(h)[None, :]) % len(SPECIAL_BITS)
    u16 = bits[idx]
    return torch.where(u16 >= 0x8000, u16 - 0x10000, u16).to(torch.int16).view(torch.bfloat16)


def random_rows(n: int, h: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, h, generator=g) * 3).to(torch.bfloat16)


def reference_int64(x: torch.Tensor) -> list[int]:
    return [to_signed(v) for v in fingerprint_reference(x)]


def test_known_fnv1a64_vectors():
    assert fnv1a64(b"") == 0xCBF29CE484222325 == FNV_OFFSET
    assert fnv1a64(b"a") == 0xAF63DC4C8601EC8C
    assert fnv1a64(b"foobar") == 0x85944171F73967E8


def test_signed_unsigned_hex_round_trip():
    for v in (0, 1, FNV_OFFSET, 0x85944171F73967E8, (1 << 63) - 1, 1 << 63, (1 << 64) - 1):
        s = to_signed(v)
        assert -(1 << 63) <= s < (1 << 63)
        assert to_unsigned(s) == v
        assert to_hex(s) == to_hex(v) == f"{v:016x}"
    assert to_hex(to_signed(FNV_OFFSET)) == "cbf29ce484222325"


def test_row_bytes_are_little_endian_bf16():
    # 1.0 in bf16 is 0x3F80: little-endian bytes 80 3F. -0.0 is 0x8000: 00 80.
    row = torch.tensor([1.0, -0.0], dtype=torch.bfloat16)
    assert row_bytes(row) == bytes([0x80, 0x3F, 0x00, 0x80])
    # an fp32 row is rounded to bf16 first (1 + 2^-9 rounds to 1.0 under round-to-nearest-even)
    assert row_bytes(torch.tensor([1.0 + 2**-9, -0.0])) == row_bytes(row)


def test_torch_fallback_matches_reference():
    x = torch.cat([random_rows(40, 37, seed=1), special_rows(37)])
    got = fingerprint_rows(x, backend="torch")
    assert got.dtype == torch.int64 and got.shape == (x.shape[0],)
    want = reference_int64(x)
    assert got.tolist() == want
    # the int64 wrap is only exercised if hashes land on both sides of 2^63
    assert min(want) < 0 < max(want)
    assert len(set(want)) == len(want)


def test_fallback_shapes_dtypes_and_strides():
    x32 = torch.randn(2, 3, 24, generator=torch.Generator().manual_seed(2))
    got = fingerprint_rows(x32)  # CPU: auto picks the torch path
    assert got.shape == (2, 3)
    # fp32 rows hash as their torch-rounded bf16 rows
    assert got.flatten().tolist() == reference_int64(x32.to(torch.bfloat16).reshape(6, 24))
    # a row-strided view (rows of a wider buffer) hashes its own H elements only
    wide = random_rows(5, 50, seed=3)
    assert fingerprint_rows(wide[:, 10:30]).tolist() == reference_int64(wide[:, 10:30].contiguous())
    # no rows -> no hashes; empty rows -> the offset basis
    assert fingerprint_rows(torch.zeros(0, 8)).shape == (0,)
    assert fingerprint_rows(torch.zeros(3, 0)).tolist() == [to_signed(FNV_OFFSET)] * 3


def check_triton_in_interpreter():
    """The Triton kernel, run by Triton's interpreter on CPU tensors, equals the reference."""
    # 40 + 16 rows: two programs of 32, the second one masked; H odd
    x = torch.cat([random_rows(40, 19, seed=4), special_rows(19)])
    got = fingerprint_rows(x, backend="triton").tolist()
    want = [to_signed(v) for v in fingerprint_reference(x)]
    assert got == want, (got[:3], want[:3])
    wide = random_rows(3, 30, seed=5)[:, 5:17]   # row stride != H
    got = fingerprint_rows(wide, backend="triton").tolist()
    assert got == [to_signed(v) for v in fingerprint_reference(wide.contiguous())]
    # every load path: 8-byte words with and without a partial last block (H = 48, 64), 2-byte
    # elements in whole blocks (H = 32 at a row stride of 34: rows not 8-byte aligned)
    for rows in (torch.cat([random_rows(5, 48, seed=6), special_rows(48)]),
                 torch.cat([random_rows(5, 64, seed=7), special_rows(64)]),
                 random_rows(3, 34, seed=8)[:, 1:33]):
        want = [to_signed(v) for v in fingerprint_reference(rows.contiguous())]
        assert fingerprint_rows(rows, backend="triton").tolist() == want, rows.shape
    return len(x)


def test_triton_kernel_in_interpreter_matches_reference():
    pytest.importorskip("triton")
    if kernels.interpreting():
        # conftest set TRITON_INTERPRET=1 before anything imported triton (no GPU): this process interprets
        assert check_triton_in_interpreter() == 56
        return
    # TRITON_INTERPRET is read when the kernel is decorated, so it must be set
    # before anything imports the kernel: hence a fresh interpreter.
    env = dict(os.environ, TRITON_INTERPRET="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    script = "from tests.telemetry.test_fingerprint import check_triton_in_interpreter as c; print('OK', c())"
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["OK", "56"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_triton_kernel_on_gpu_matches_cpu_reference():
    pytest.importorskip("triton")
    # 70 rows: three programs, the last partly masked; H like a real hidden size
    x = torch.cat([random_rows(54, 2048, seed=6), special_rows(2048)])
    xg = x.cuda()
    got = fingerprint_rows(xg)  # auto: the Triton kernel on CUDA
    assert got.device.type == "cuda" and got.dtype == torch.int64
    want = reference_int64(x)
    assert got.cpu().tolist() == want
    # the torch fallback on the GPU agrees too (int64 wrap on CUDA)
    assert fingerprint_rows(xg, backend="torch").cpu().tolist() == want
    # row-strided view, straight from a wider device buffer
    wide = random_rows(9, 300, seed=7)
    assert fingerprint_rows(wide.cuda()[:, 20:276]).cpu().tolist() == reference_int64(wide[:, 20:276].contiguous())
    # rows that are not whole 8-byte words (an odd width, an odd start): the kernel's 2-byte loads
    assert fingerprint_rows(wide.cuda()[:, 21:278]).cpu().tolist() == reference_int64(wide[:, 21:278].contiguous())
    # an fp32 hidden rounded to bf16 on the GPU hashes like the CPU-rounded one:
    # a CPU fp32 run and a GPU run of the same hidden share fingerprints
    x32 = torch.randn(33, 1024, generator=torch.Generator().manual_seed(8))
    assert fingerprint_rows(x32.cuda()).cpu().tolist() == reference_int64(x32.to(torch.bfloat16))
