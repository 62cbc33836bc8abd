"""The verify rule of a wave: greedy, speculative sampling (live), or coupled sampling (replay).

The device step (step.py) proposes, then hands the drafts to its verifier, which asks the target for what it
needs and returns a `Verified`: the hiddens the drafter's bookkeeping reads, the step's tokens per
depth and the accepted count, and, under sampling, the exact acceptance probabilities and the
PIT of each output token. Each verifier also picks the turn prefill's first token and says how
the drafter draws its drafts (`draws`: None for argmax drafts).

  Greedy   the target's argmax per depth; drafts accepted while they equal it (bit-for-bit the
           loop's rule before sampling existed)
  Sampled  (live) the rejection sampler of sampling.py on the verify's distributions (a tree
           arm: the multi-draft walk of tree_sampling.py, `sample_tree`)
  Coupled  (replay) drafts drawn by draws.CoupledDraws against the stored sampled trajectory;
           a draft is accepted exactly when it equals the trajectory's token

Shapes: B sequences, K drafts, V vocabulary, H hidden size.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from atlas_ab import AtlasError
from atlas_ab.runtime.fusion import fused
from atlas_ab.speculative import tree_sampling, uniforms
from atlas_ab.speculative.distribution import draw, pit, probs
from atlas_ab.speculative.draws import CoupledDraws, LiveDraws
from atlas_ab.speculative.sampling import (
    PLACEHOLDER,
    SamplingPlan,
    StepUniforms,
    alpha_1,
    coupled_accept_probabilities,
    greedy_accept,
    output_pit,
    pit_order,
    rejection_sample,
)
from atlas_ab.speculative.tree_sampling import TreeUniforms


@dataclass
class Verified:
    vh: torch.Tensor                      # [B, K+1, H] target hiddens at positions n .. n+K
    tokens: torch.Tensor                  # [B, K+1] long: the target's token per depth (greedy: its argmax;
                                          #   sampled: x_1..x_a, the recovered/bonus token, then PLACEHOLDER)
    accepted: torch.Tensor                # [B] long: accepted drafts (0 where gated)
    accept_prob: Optional[torch.Tensor] = None   # [B, K] float32 (sampled runs; NaN where unknown)
    alpha1: Optional[torch.Tensor] = None        # [B] float32 (sampled runs)
    pit: Optional[torch.Tensor] = None           # [B, K+1] float32 (sampled runs; NaN past the output)


def serial(target, vtok, pos, slots, length, logits: bool = False):
    """The one-token decode of a step whose drafts were all dropped (DRAFT_CONF), padded to the
    verify's K+1 depths (never verified: zero hiddens, and -1 argmaxes / depth 0's logits past
    depth 0; nothing reads past depth 0 there). `length`: the full verify's KV length."""
    fn = target.verify_logits if logits else target.verify
    K = vtok.shape[1] - 1
    vh1, t1 = fn(vtok[:, :1].contiguous(), pos[:, :1].contiguous(), slots[:, :1].contiguous(), length - K)
    vh = torch.cat([vh1, vh1.new_zeros(vh1.shape[0], K, vh1.shape[2])], dim=1)
    if logits:
        return vh, t1.expand(-1, K + 1, -1)
    return vh, torch.cat([t1, torch.full_like(t1[:, :1], -1).expand(-1, K)], dim=1)


def _masked(x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    return torch.where(keep, x, float("nan"))


@fused
def greedy_accepted(drafts: torch.Tensor, target: torch.Tensor, gated: torch.Tensor) -> torch.Tensor:
    """[B] `greedy_accept`, 0 where DRAFT_CONF dropped the drafts (gated [B] bool)."""
    return torch.where(gated, 0, greedy_accept(drafts, target))   # a scalar: no fill kernel in the graph


class GreedyVerify:
    sampled = False

    def __init__(self, fuse: bool = False):
        self.fuse = fuse       # the acceptance compiled (runtime/fusion.py)

    def draws(self, target, turn: int, n_t: torch.Tensor):
        return None

    def first(self, target, turn, history, start, count):
        hid, first = target.prefill(turn, history, start, count)
        return hid, first, None

    def verify(self, target, prop, vtok, pos, slots, length, gated, all_gated, turn) -> Verified:
        if all_gated:
            vh, tgt = serial(target, vtok, pos, slots, length)
        else:
            vh, tgt = target.verify(vtok, pos, slots, length)
        return Verified(vh=vh, tokens=tgt, accepted=greedy_accepted(prop.drafts, tgt, gated, fuse=self.fuse))


class SampledVerify:
    """Live speculative sampling. doc [B]: the wave's doc ids on the device (keys of the uniforms)."""
    sampled = True

    def __init__(self, plan: SamplingPlan, doc: torch.Tensor, K: int):
        self.plan, self.doc, self.K = plan, doc, K

    def draws(self, target, turn: int, n_t: torch.Tensor):
        if not self.plan.sampled_drafts:
            return None
        return LiveDraws(self.plan.draft, self.plan.seed, self.doc, turn, n_t, self.K)

    def _key(self, turn, n, stream):
        return uniforms.uniform(self.plan.seed, self.doc, turn, n, 1, stream)

    def first(self, target, turn, history, start, count):
        """The turn's first token drawn from p at the context's end, keyed (n = the last context
        position, depth 1), which no step uses (a step's n is past the context)."""
        hid, logits = target.prefill_logits(turn, history, start, count)      # [B, T, H], [B, V]
        p = probs(logits, self.plan.target)                                     # [B, V]
        n = torch.as_tensor(start + count - 1, device=p.device)
        y = draw(p, self._key(turn, n, uniforms.TOKEN))
        return hid, y, pit(p, y, self._key(turn, n, uniforms.PIT)).float()

    def verify(self, target, prop, vtok, pos, slots, length, gated, all_gated, turn) -> Verified:
        if all_gated:
            vh, logits = serial(target, vtok, pos, slots, length, logits=True)
        else:
            vh, logits = target.verify_logits(vtok, pos, slots, length)       # [B, K+1, H], [B, K+1, V]
        p = probs(logits, self.plan.target)                                     # [B, K+1, V]
        v = rejection_sample(prop.drafts, prop.q, p, StepUniforms.of(self.plan.seed, self.doc, turn, pos[:, 0],
                                                                     self.K), gated)
        return Verified(vh=vh, tokens=v.tokens, accepted=v.accepted,
                        accept_prob=_masked(v.accept_prob, ~gated[:, None]), alpha1=_masked(v.alpha1, ~gated),
                        pit=v.pit)


    def sample_tree(self, nodes, logits, tables, n, turn: int):
        """A tree arm's live sampled verify: the multi-draft rejection walk (tree_sampling.py) of the
        drafted nodes [B, N+1] over the verify's logits [B, N+1, V], its uniforms keyed at the
        step's position n [B]. Returns a tree_sampling.TreeVerdict."""
        p = probs(logits, self.plan.target)                                     # [B, N+1, V]
        return tree_sampling.sample(nodes, p, tables, TreeUniforms.of(self.plan.seed, self.doc, turn, n, tables))


class CoupledVerify(SampledVerify):
    """Replay under sampling: the target is a `targets.ReplayTarget` over a sampled trajectory."""

    def draws(self, target, turn: int, n_t: torch.Tensor):
        K = self.K
        pos = n_t[:, None] + torch.arange(K + 1, device=n_t.device)[None, :]    # [B, K+1]
        self.y = target.path(pos)                                               # [B, K+1]
        self.p = probs(target.path_logits(pos), self.plan.target)               # [B, K+1, V]
        if not self.plan.sampled_drafts:
            return None
        return CoupledDraws(self.plan.draft, self.plan.seed, self.doc, turn, n_t, K, self.y[:, :K], self.p[:, :K])

    def first(self, target, turn, history, start, count):
        hid, y = target.prefill(turn, history, start, count)
        n = torch.as_tensor(start + count - 1, device=y.device)
        p = probs(target.path_logits(n[:, None])[:, 0], self.plan.target)      # [B, V]
        return hid, y, pit(p, y, self._key(turn, n, uniforms.PIT)).float()

    def sample_tree(self, nodes, logits, tables, n, turn: int):
        raise AtlasError("a sampled tree arm runs live only (coupled tree replay is not built)")

    def verify(self, target, prop, vtok, pos, slots, length, gated, all_gated, turn) -> Verified:
        if all_gated:
            vh, tgt = serial(target, vtok, pos, slots, length)
        else:
            vh, tgt = target.verify(vtok, pos, slots, length)                  # tgt: y while the drafts match
        acc = greedy_accepted(prop.drafts, tgt, gated)
        K = self.K
        depth = torch.arange(K + 1, device=acc.device)[None, :]                 # [1, K+1]
        tokens = torch.where(depth <= acc[:, None], self.y, PLACEHOLDER)
        py = self.p[:, :K].gather(-1, self.y[:, :K, None]).squeeze(-1)     # [B, K] p_i(y_i), valid on the path
        on_path = (depth[:, :K] <= acc[:, None]) & ~gated[:, None]             # depths 1..a+1
        u = uniforms.uniform(self.plan.seed, self.doc[:, None], turn, pos[:, :1], depth + 1, uniforms.PIT)
        return Verified(vh=vh, tokens=tokens, accepted=acc,
                        accept_prob=_masked(coupled_accept_probabilities(prop.q, prop.drafts, self.y[:, :K], py),
                                            on_path),
                        alpha1=_masked(alpha_1(self.p[:, 0], None if prop.q is None else prop.q[:, 0],
                                               prop.drafts[:, 0]), ~gated),
                        pit=output_pit(self.p, tokens, acc, u, pit_order(self.p, prop.q, prop.drafts, gated)))


def verifier(sampling: SamplingPlan | None, target, doc: torch.Tensor, K: int, fuse: bool = False):
    """Greedy verification, live speculative sampling, or its coupled replay; sampling: how a
    sampled run verifies (None: greedy); fuse: greedy's acceptance runs compiled (runtime/fusion.py)."""
    if sampling is None:
        return GreedyVerify(fuse)
    return SampledVerify(sampling, doc, K) if target.live else CoupledVerify(sampling, doc, K)
