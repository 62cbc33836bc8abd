"""Counter-based uniforms: one number per (seed, document, turn, position, depth, stream).

A sampled run must be reproducible, resumable at wave granularity and the same at any batch
width, so no random number may depend on what else was drawn before it (a generator's state
does: which wave a document falls in, how many sequences share a step). Each uniform is instead
a pure function of its key, hashed on the device: two 32-bit lanes, each a chain of an
integer mixer over the key's fields, give a 64-bit state; 53 of its bits make a float64 in
[0, 1). Every use of randomness in a run has its own key, so each uniform is used once.

The mixer is Chris Wellons' `lowbias32` (xorshift-multiply, public domain). Products are
taken in 16-bit halves so no int64 product overflows (torch's integer overflow is not defined
behaviour), which makes the hash exact on any device.

Streams: what a uniform decides (the key's last field).
  DRAFT        a sampled draft x_i ~ q_i (live)            ACCEPT  the coin of depth i's accept test
  TOKEN        a token drawn from the target (recovered, bonus, serial step, turn prefill)
  PIT          V of the randomized PIT u = F(y-) + V p(y) (the distributional gate)
  TRAJECTORY   the target-only sampled trajectory replay mode stores
  COUPLE       replay: does the coupled draft equal the trajectory's token?
  COUPLE_DRAW  replay: the draft drawn from max(0, q - p) when it does not
  TREE_ACCEPT  a tree arm's accept coin of a child of rank >= 1 (tree_sampling.py: its key layout;
               rank 0 takes the chain's ACCEPT key, so a linear tree draws the chain's coins)
"""
from __future__ import annotations

import torch

DRAFT, ACCEPT, TOKEN, PIT, TRAJECTORY, COUPLE, COUPLE_DRAW, TREE_ACCEPT = range(1, 9)

_M = 0xFFFFFFFF
_LANES = (0x243F6A88, 0x85A308D3)     # the two lanes' starting states (digits of pi)


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """x * c mod 2^32 for 0 <= x < 2^32, without an int64 product past 2^49."""
    lo = x * (c & 0xFFFF)
    hi = ((x * (c >> 16)) & 0xFFFF) << 16
    return (lo + hi) & _M


def mix32(x: torch.Tensor) -> torch.Tensor:
    """lowbias32: a bijection of [0, 2^32) with good avalanche (int64 tensors holding 32-bit values)."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def _fold(v, device) -> torch.Tensor:
    """A key field (int or int tensor, >= 0) as 32 bits: its low word xor its high word."""
    if not isinstance(v, torch.Tensor):          # a fill, not a host->device copy: safe inside a CUDA graph
        return torch.full((), (int(v) & _M) ^ ((int(v) >> 32) & _M), dtype=torch.int64, device=device)
    v = v.to(dtype=torch.int64, device=device)
    return (v & _M) ^ ((v >> 32) & _M)


def uniform(seed: int, doc, turn, position, depth, stream: int, device=None) -> torch.Tensor:
    """float64 uniforms in [0, 1), one per element of the broadcast key fields (ints or int64
    tensors); the result lives on `device` (default: the first tensor field's)."""
    if device is None:
        device = next((f.device for f in (doc, turn, position, depth) if isinstance(f, torch.Tensor)), "cpu")
    fields = [_fold(f, device) for f in (seed, doc, turn, position, depth, stream)]
    lanes = []
    for start in _LANES:
        h = torch.full((), start, dtype=torch.int64, device=device)
        for f in fields:
            h = mix32(h ^ f)
        lanes.append(h)
    a, b = torch.broadcast_tensors(*lanes)
    return ((a << 21) + (b >> 11)).double() * 2.0 ** -53
