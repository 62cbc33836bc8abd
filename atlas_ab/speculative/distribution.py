"""The sampling distribution of a position: temperature, top-k, top-p, renormalised; draws and PITs.

`probs` turns logits into the distribution a sampler draws from, in the order engines apply
it (vLLM's v1/sample/rejection_sampler.py `compute_probs`: logits / temperature, then top-k,
then top-p, then softmax over what is left):
  top_k  keep the k largest logits (0 = all); ties at the k-th value are all kept
  top_p  keep the smallest set of the most probable tokens whose mass reaches top_p (1 = all);
         the most probable token is always kept
Every draw is an inverse CDF over the fixed vocabulary order: token = the first t with
F(t) > u * F(V-1), F the running sum in float64, so a token of zero mass is never drawn and
one uniform decides one token. The randomized PIT u = F(y-) + V p(y) of a token y is
Uniform(0, 1) exactly when y ~ p (the distributional gate's statistic), for F in the
vocabulary's order or in any order fixed before y is drawn.

Shapes: any leading batch dims `...`, vocabulary last (`V`).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Sampling:
    """A sampling rule. temperature 0 is greedy (argmax), which never builds a distribution."""
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def probs(logits: torch.Tensor, rule: Sampling) -> torch.Tensor:
    """[..., V] float32 probabilities of `rule` applied to logits [..., V]."""
    z = logits.float() / rule.temperature                                  # [..., V]
    if rule.top_k and rule.top_k < z.shape[-1]:
        kth = z.topk(rule.top_k, dim=-1).values[..., -1:]                  # [..., 1]
        z = z.masked_fill(z < kth, float("-inf"))
    if rule.top_p < 1.0:
        p = torch.softmax(z, dim=-1)
        sp, order = p.sort(dim=-1, descending=True)                        # [..., V]
        before = sp.cumsum(-1) - sp                                        # mass strictly before each
        drop_sorted = before >= rule.top_p                                 # (index 0 has before = 0: kept)
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        z = z.masked_fill(drop, float("-inf"))
    return torch.softmax(z, dim=-1)


def cdf(p: torch.Tensor) -> torch.Tensor:
    """[..., V] float64 running sums of p [..., V] in vocabulary order."""
    return p.double().cumsum(-1)


def draw(p: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """[...] long: inverse-CDF draws from p [..., V] (unnormalised is fine) with uniforms u [...]."""
    F = cdf(p)                                                             # [..., V]
    x = (u.double() * F[..., -1]).unsqueeze(-1)                            # [..., 1]
    t = torch.searchsorted(F.contiguous(), x.contiguous(), right=True).squeeze(-1)
    # u * F(V-1) may round up to F(V-1) itself: then the last token of positive mass
    last = torch.where(p > 0, torch.arange(p.shape[-1], device=p.device), 0).amax(-1)
    return torch.minimum(t, last)


def pit(p: torch.Tensor, y: torch.Tensor, v: torch.Tensor, key: torch.Tensor | None = None) -> torch.Tensor:
    """[...] float64: the randomized PIT F(y-) + v p(y) of tokens y [...] under p [..., V]
    (normalised here), with uniforms v [...]. F runs over the vocabulary in its own order, or
    (key [..., V]) by descending key, ties in vocabulary order: any order fixed before y is
    drawn keeps u Uniform(0, 1) under p, and one that sorts where a wrong sampler errs makes
    the error show (sampling.output_pit)."""
    yi = y.clamp(min=0).unsqueeze(-1)
    py = p.double().gather(-1, yi).squeeze(-1)                             # [...]
    if key is None:
        F = cdf(p)                                                         # [..., V]
        below = F.gather(-1, yi).squeeze(-1) - py                          # F(y-)
    else:
        order = key.sort(dim=-1, descending=True, stable=True).indices     # [..., V]
        F = cdf(p.gather(-1, order))                                       # in that order
        rank = torch.empty_like(order).scatter_(-1, order, torch.arange(p.shape[-1], device=p.device)
                                                .expand_as(order).contiguous())
        below = F.gather(-1, rank.gather(-1, yi)).squeeze(-1) - py
    return (below + v.double() * py) / F[..., -1]
