"""A drafter's head as drafting uses it (the MTP module's or EAGLE-3's: `draft_head()`): its final norm,
the lm_head (as loaded, or its FP8 E4M3
copy: HEAD_FP8), the top-1 (over the whole vocabulary, or over HEAD_SHARDS slices and one reduce).

Drafting only: the target verifies every draft with its own head, so whatever this head computes
moves acceptance and never a committed token (the lossless gate checks it on every run). With both
levers off this is exactly the code the drafter ran before them (`mtp.logits` + `head_outputs`).

The FP8 copy is made once, at build (runtime/fp8.py: per-row weight scales, a per-row activation
scale): a real FP8 GEMM where the device has one (`real_fp8_matmul`), else its exact emulation in
fp32, and `numerics()` says which (the manifest's model.drafter_numerics, the run's summary line).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from atlas_ab import AtlasError
from atlas_ab.proposers.base import head_outputs
from atlas_ab.runtime import kernels
from atlas_ab.runtime.fp8 import emulated_linear, quantize_rows, real_fp8_matmul, scaled_mm_linear
from atlas_ab.runtime.kernels.matmul import linear
from atlas_ab.runtime.vocab_shards import shard_bounds, sharded_top1


class DraftHead:
    def __init__(self, mtp, lm_head, fp8: bool = False, shards: int = 1):
        self.mtp, self.lm_head = mtp, lm_head
        self.norm, head = mtp.draft_head(lm_head)     # the module's final norm and the head it drafts with
        self.weight = head.weight
        V = self.weight.shape[0]
        if V % shards:
            raise AtlasError(f"head_shards={shards} does not divide the vocabulary ({V}): the engine shards "
                             "only a vocabulary its ranks divide")
        self.bounds = shard_bounds(V, shards)
        self.fp8, self.shards = fp8, shards
        self.plain = not fp8 and shards == 1
        if fp8:
            self.w_q, self.w_s = quantize_rows(self.weight)
            self.real = real_fp8_matmul(self.weight.device)

    def numerics(self) -> dict | None:
        """What the manifest records of this head (None with both levers off: nothing moves)."""
        if self.plain:
            return None
        out = {"head_shards": self.shards}
        if self.fp8:
            dev = self.weight.device
            out["head_fp8"] = "scaled_mm" if self.real else \
                f"emulated ({'cpu' if dev.type == 'cpu' else torch.cuda.get_device_name(dev)}: no row-wise FP8 GEMM)"
        return out

    # -- logits -----------------------------------------------------------------------------------
    def _normed(self, out: torch.Tensor) -> torch.Tensor:
        return self.norm.fast(out) if kernels.enabled(out.device) else self.norm(out)

    def _slice(self, h: torch.Tensor, v0: int, v1: int) -> torch.Tensor:
        """Logits of vocabulary rows [v0, v1) for the normed hidden h [R, H]: each row over the full H."""
        if self.fp8:
            mm = scaled_mm_linear if self.real else emulated_linear
            return mm(h, self.w_q[v0:v1], self.w_s[v0:v1])
        w = self.weight[v0:v1]
        return linear(h, w) if kernels.enabled(h.device) else F.linear(h, w)

    def _logits(self, h: torch.Tensor) -> torch.Tensor:
        return torch.cat([self._slice(h, v0, v1) for v0, v1 in self.bounds], dim=-1)

    # -- what drafting reads ----------------------------------------------------------------------
    def outputs(self, out: torch.Tensor, topk: int, fp32: bool):
        """out [B, 1, H] (the MTP layer's output, pre its final norm) -> (conf, draft, topk ids, topk
        probs, logits [B, V] or None): `head_outputs`' four, and the logits when `fp32` (a sampled draft's q)."""
        if self.plain:
            z = self.mtp.logits(out, self.lm_head, fp32=fp32)[:, 0]
            return (*head_outputs(z, topk), z if fp32 else None)
        h = self._normed(out)[:, 0]
        if self.shards == 1:
            z = self._logits(h)
            conf, draft, ids, p = head_outputs(z.float() if fp32 else z, topk)
            return conf, draft, ids, p, z.float() if fp32 else None
        conf, draft = sharded_top1(lambda v0, v1: self._slice(h, v0, v1), self.bounds)
        z = self._logits(h).float() if topk or fp32 else None
        p, ids = z.softmax(dim=-1).topk(topk, dim=-1) if topk else (conf, draft)
        return conf, draft, ids, p, z if fp32 else None

    def argmax(self, out: torch.Tensor) -> torch.Tensor:
        """The greedy draft of out [B, 1, H] (ORACLE_P2's draft 2: the same head as the drafts)."""
        if self.plain:
            return self.mtp.logits(out, self.lm_head)[:, 0].argmax(dim=-1)
        return self.outputs(out, 0, False)[1]
