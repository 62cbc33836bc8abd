"""Fp8KVPool: a KVPool whose rows are stored as FP8 E4M3 (the GLM head's `KvCacheDtype::Fp8`), KV_FP8.

The pool keeps each k/v element as the byte of its E4M3 value (uint8 tensors: every copy the
base pool makes, move_slots / snapshot / restore, is a plain byte copy on any device and torch
version); `write` rounds through E4M3 (scale 1, saturating at +-448: runtime/fp8.py), `read`
decodes to the compute dtype. The storage is real FP8 on every device: the rounding a row takes
is the cast's, bit for bit the same on the CPU and a GPU; only the attention that reads it runs in
the compute dtype. `dtype` is uint8, so a forward takes the torch attention path (the Triton one
reads the pool in the compute dtype).
"""
from __future__ import annotations

from typing import Optional

import torch

from atlas_ab.runtime.fp8 import E4M3, to_e4m3
from atlas_ab.runtime.kv import KVPool


class Fp8KVPool(KVPool):
    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int, capacities, device=None,
                 dtype=torch.float32):
        super().__init__(n_layers, n_kv_heads, head_dim, capacities, device=device, dtype=torch.uint8)
        self.compute_dtype = dtype          # what `read` returns; byte 0 is E4M3 +0.0, so the pool starts at 0

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              flat: Optional[torch.Tensor] = None) -> None:
        idx = (self.flat(slots) if flat is None else flat).reshape(-1)
        shape = (-1, self.n_kv_heads, self.head_dim)
        self.k[layer].index_copy_(0, idx, to_e4m3(k.reshape(shape)).view(torch.uint8))
        self.v[layer].index_copy_(0, idx, to_e4m3(v.reshape(shape)).view(torch.uint8))

    def read(self, layer: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        k, v = super().read(layer, length)
        return k.view(E4M3).to(self.compute_dtype), v.view(E4M3).to(self.compute_dtype)

    def __repr__(self) -> str:
        return super().__repr__().replace("dtype=torch.uint8", f"dtype=float8_e4m3fn->{self.compute_dtype}")
