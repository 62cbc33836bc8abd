"""A row's top-1 over the vocabulary in one pass: the verify's argmax and a drafter head's greedy
draft with its softmax probability.

Terms: logits z [R, V] (bf16 as the head makes them, or fp32; read in fp32; rows R = sequences x
depths); top-1 index i = the first j with z[j] = max(z) (torch.argmax's rule on ties); its softmax
probability p = 1 / sum_j exp(z[j] - max z) (softmax's value at the max, exp(0) / sum, without
writing the other V - 1 probabilities).

Why a kernel: torch's reductions (one softmax pass, then a max over the probabilities it wrote; or
the argmax) were the largest glue of a small model's step (bench/RESULTS.md, "The step's glue,
kernel by kernel"). One program per row reads it once (twice where V is wider than a block).

Numerics: the index is z.argmax(-1)'s exactly (a discrete outcome: same max, same tie rule). A
drafter head took the index of softmax(z)'s max before: the same index, except where exp rounds
a logit less than 2^-24 below the max to the max's probability (bf16 logits, which the fast path
makes, are that close only at magnitudes below ~1e-5); the first index of the max logit is also
what an independent implementation's greedy draft is. p differs from softmax(z).max() in the
sum's order and exp's rounding only (within 1e-6 of float64's in the tests, on the CPU's
interpreter and the H200; torch's own fp32 softmax is up to 3e-6 off on an 8k row). NaN logits are
not handled (torch would return the NaN's index): nothing upstream makes them.

`argmax` and `top1` take this kernel where the fast path is on (`kernels.enabled`), torch's ops
elsewhere (the CPU's numbers do not move).
"""
from __future__ import annotations

import functools

import torch

from atlas_ab.runtime.kernels import enabled, interpreting, on_its_device

_BLOCK = 4096        # a whole row of the shipped tokenizer's vocabulary (4,096) in one load


@functools.cache
def _kernel(interpret: bool):
    import triton
    import triton.language as tl

    @triton.jit
    def top1_rows(Z, IDX, P, z_stride, V, BLOCK: tl.constexpr, WANT_P: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        base = Z + row * z_stride
        cols = tl.arange(0, BLOCK)
        # pass 1: the max and its first index, block by block (a later block wins only if larger)
        best = tl.full((), float("-inf"), tl.float32)
        at = tl.full((), 0, tl.int64)
        for start in range(0, V, BLOCK):
            z = tl.load(base + start + cols, mask=start + cols < V, other=float("-inf")).to(tl.float32)
            m = tl.max(z, axis=0)
            j = tl.min(tl.where(z == m, start + cols, V), axis=0).to(tl.int64)   # first index of m
            take = m > best
            at = tl.where(take, j, at)
            best = tl.where(take, m, best)
        tl.store(IDX + row, at)
        if WANT_P:
            total = tl.full((), 0.0, tl.float32)
            for start in range(0, V, BLOCK):
                z = tl.load(base + start + cols, mask=start + cols < V, other=float("-inf")).to(tl.float32)
                total += tl.sum(tl.exp(z - best), axis=0)
            tl.store(P + row, 1.0 / total)

    return top1_rows


def _launch(z: torch.Tensor, want_p: bool):
    V = z.shape[-1]
    rows = z.reshape(-1, V)
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    R = rows.shape[0]
    idx = torch.empty(R, dtype=torch.int64, device=z.device)
    p = torch.empty(R if want_p else 1, dtype=torch.float32, device=z.device)
    if R:
        block = min(_BLOCK, max(16, 1 << (V - 1).bit_length()))
        _kernel(interpreting())[(R,)](rows, idx, p, rows.stride(0), V, BLOCK=block, WANT_P=want_p,
                                      num_warps=8 if block >= 2048 else 4)
    return idx.view(z.shape[:-1]), p[:R].view(z.shape[:-1]) if want_p else None


@on_its_device
def argmax_rows(z: torch.Tensor) -> torch.Tensor:
    """z [..., V] -> the first index of each row's max [...] int64 (= z.argmax(-1))."""
    return _launch(z, False)[0]


@on_its_device
def top1_softmax(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """z [..., V] -> (p [...] fp32, index [...] int64) = torch.softmax(z.float(), -1).max(-1)."""
    idx, p = _launch(z, True)
    return p, idx


def argmax(z: torch.Tensor) -> torch.Tensor:
    """z.argmax(-1): the kernel on the fast path, torch's op elsewhere."""
    return argmax_rows(z) if enabled(z.device) else z.argmax(-1)


def top1(z: torch.Tensor, probs: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(p, index) of each row's top-1 (module doc): the kernel on the fast path, else
    probs.max(-1), probs = torch.softmax(z.float(), -1) (given: a caller that has them already)."""
    if enabled(z.device):
        return top1_softmax(z)
    return (torch.softmax(z.float(), dim=-1) if probs is None else probs).max(dim=-1)
