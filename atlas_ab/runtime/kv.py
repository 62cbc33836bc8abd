"""KVPool: a flat, ragged KV slot pool.

Sequence i owns `capacities[i]` slots (its own budget) followed by one dump slot, laid out
contiguously: sequence i's slot s lives at flat index base[i] + s, its dump slot at
base[i] + capacity[i]. A padding row (slot < 0) writes to its sequence's dump slot, so padding
never touches live KV (and never another sequence's).

Attention rule (target and drafter alike): a query row written at slot s attends to its
sequence's slots [0, s]. The model writes the new rows first, then reads slots 0..L-1 of every
sequence (`read`) and masks per row (`mask`), so causality inside the new rows falls out.

Host syncs: nothing here calls .item(). `read(layer, L)` needs L on the host; the caller knows
its max slot (it built `slots`) and passes L = max slot + 1 to the model's forward.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch

from atlas_ab import AtlasError


class KVPool:
    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int, capacities: Sequence[int],
                 device=None, dtype=torch.float32):
        caps = [int(c) for c in capacities]
        if not caps or min(caps) < 1:
            raise AtlasError(f"KVPool capacities must be a non-empty list of positive ints, got {list(capacities)}")
        self.n_layers, self.n_kv_heads, self.head_dim = n_layers, n_kv_heads, head_dim
        self.capacities = caps                       # host copy
        self.max_capacity = max(caps)
        starts, acc = [], 0
        for c in caps:
            starts.append(acc)
            acc += c + 1
        self.total_slots = acc
        self.uniform = len(set(caps)) == 1          # then sequence i's slots are a plain view
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.dtype = dtype
        self.base = torch.tensor(starts, dtype=torch.long, device=self.device)      # [B]
        self.capacity = torch.tensor(caps, dtype=torch.long, device=self.device)    # [B]
        shape = (n_layers, self.total_slots, n_kv_heads, head_dim)
        self.k = torch.zeros(shape, device=self.device, dtype=dtype)
        self.v = torch.zeros(shape, device=self.device, dtype=dtype)
        self._read_idx: dict[int, torch.Tensor] = {}

    @property
    def batch_size(self) -> int:
        return len(self.capacities)

    # ---- indexing -------------------------------------------------------------------------
    def flat(self, slots: torch.Tensor) -> torch.Tensor:
        """slots [B, T] (per-sequence slot, < 0 = padding) -> flat pool indices [B, T].
        Padding rows, and (defensively) rows past the sequence's budget, map to its dump slot."""
        base, cap = self.base[:, None], self.capacity[:, None]
        bad = (slots < 0) | (slots >= cap)
        return base + torch.where(bad, cap, slots)

    def read_index(self, length: int) -> torch.Tensor:
        """[B, length] flat indices of slots 0..length-1 (slots past a sequence's budget -> its dump slot)."""
        idx = self._read_idx.get(length)
        if idx is None:
            j = torch.arange(length, device=self.device)[None, :]
            idx = self.base[:, None] + torch.minimum(j, self.capacity[:, None])
            if len(self._read_idx) > 64:
                self._read_idx.clear()
            self._read_idx[length] = idx
        return idx

    def mask(self, slots: torch.Tensor, length: int, window: Optional[int] = None) -> torch.Tensor:
        """Boolean attention mask [B, 1, T, length]: row at slot s sees slots j with j <= s and
        j < capacity (and s - j < window if given). A padding row (s < 0) sees slot 0 only, so its
        (ignored) output stays finite."""
        j = torch.arange(length, device=slots.device)
        s = slots.clamp(min=0)[..., None]                              # [B, T, 1]
        m = (j <= s) & (j < self.capacity.to(slots.device)[:, None, None])
        if window is not None:
            m &= j > s - window
        return m[:, None]

    def tree_mask(self, slots: torch.Tensor, length: int, start: torch.Tensor, block: torch.Tensor) -> torch.Tensor:
        """`mask` for a tree's rows [B, 1, T, length]: row t sees its sequence's slots before
        start [B] (the committed context) and slot start + u of the tree's block exactly when
        block[t, u] (block [T, W] bool, W the block's width: ancestors and itself). A padding row
        keeps `mask`'s rule."""
        j = torch.arange(length, device=slots.device)[None, None, :]       # [1, 1, L]
        st = start.to(slots.device)[:, None, None]                          # [B, 1, 1]
        u = j - st                                                          # [B, 1, L] offset in the block
        W = block.shape[1]
        inside = (u >= 0) & (u < W)
        blk = block.to(slots.device)[None].expand(slots.shape[0], -1, -1)   # [B, T, W]
        seen = blk.gather(2, u.clamp(0, W - 1).expand(-1, slots.shape[1], -1))  # [B, T, L]
        m = ((j < st) | (inside & seen)) & (j < self.capacity.to(slots.device)[:, None, None])
        return torch.where((slots < 0)[..., None], self.mask(slots, length)[:, 0], m)[:, None]

    def check(self, slots: torch.Tensor) -> None:
        """Host-side validation (syncs; for tests / debugging, not the hot path)."""
        s = slots.detach().cpu()
        if s.dim() != 2 or s.shape[0] != self.batch_size:
            raise AtlasError(f"slots must be [B={self.batch_size}, T], got {tuple(s.shape)}")
        cap = torch.tensor(self.capacities)[:, None]
        over = (s >= cap).nonzero()
        if len(over):
            b, t = over[0].tolist()
            raise AtlasError(f"slot {int(s[b, t])} of sequence {b} is past its capacity {self.capacities[b]}")

    # ---- storage --------------------------------------------------------------------------
    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              flat: Optional[torch.Tensor] = None) -> None:
        """Store k, v [B, T, KVH, D] at `slots` [B, T] of `layer` (pass `flat` if already computed)."""
        idx = (self.flat(slots) if flat is None else flat).reshape(-1)
        self.k[layer].index_copy_(0, idx, k.reshape(-1, self.n_kv_heads, self.head_dim).to(self.dtype))
        self.v[layer].index_copy_(0, idx, v.reshape(-1, self.n_kv_heads, self.head_dim).to(self.dtype))

    def read(self, layer: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """k, v [B, length, KVH, D]: slots 0..length-1 of every sequence. With uniform capacities
        (and length <= capacity + 1) this is a zero-copy view; otherwise a gather."""
        B = self.batch_size
        if self.uniform and length <= self.max_capacity + 1:
            per = self.max_capacity + 1
            k = self.k[layer].view(B, per, self.n_kv_heads, self.head_dim)[:, :length]
            v = self.v[layer].view(B, per, self.n_kv_heads, self.head_dim)[:, :length]
            return k, v
        idx = self.read_index(length)
        return self.k[layer][idx], self.v[layer][idx]

    def move_slots(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Copy every layer's k/v from slot src[b, i] to dst[b, i] of sequence b (src, dst [B, T];
        -1 in either: no move). All sources are read before any destination is written, so the
        moves may overlap (a tree's accepted path compacting onto its linear slots)."""
        live = (src >= 0) & (dst >= 0)
        s = self.flat(torch.where(live, src, -1)).reshape(-1)
        d = self.flat(torch.where(live, dst, -1)).reshape(-1)    # dead pairs: dump slot onto dump slot
        k, v = self.k[:, s].clone(), self.v[:, s].clone()
        self.k[:, d] = k
        self.v[:, d] = v

    # ---- one-slot save / restore (e.g. a drafter overwriting a slot it must give back) -----
    def snapshot(self, slots: torch.Tensor):
        """Save every layer's k/v at one slot per sequence (slots [B]); returns an opaque snapshot."""
        idx = self.flat(slots.reshape(-1, 1)).reshape(-1)
        return idx, self.k[:, idx].clone(), self.v[:, idx].clone()

    def restore(self, snap) -> None:
        idx, k, v = snap
        self.k[:, idx] = k
        self.v[:, idx] = v

    def __repr__(self) -> str:
        return (f"KVPool(layers={self.n_layers}, kv_heads={self.n_kv_heads}, head_dim={self.head_dim}, "
                f"capacities={self.capacities}, dtype={self.dtype}, device={self.device})")
