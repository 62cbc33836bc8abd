"""Speculative sampling: the verifier's rejection rule, batched on the device.

Terms (per sequence of a step that proposed K drafts at position n):
  draft token x_i        the i-th drafted token (i = 1..K), at position n+i
  draft distribution q_i the drafter's distribution x_i was drawn from (`sampled` policy), or the
                         one-hot at x_i (`greedy` policy: the drafter returns no distribution, as
                         an n-gram or argmax drafter does)
  target distribution p_i the target's distribution at position n+i given the context and
                         x_1 .. x_{i-1} (distribution.probs of the verify's logits at depth i-1)
  accepted length a      how many drafts pass, in order: x_i passes with probability
                         min(1, p_i(x_i) / q_i(x_i)) (one-hot q: p_i(x_i)); a stops at the first
                         that does not. Only passed drafts count as accepted.
  recovered token        at the first rejection (depth a+1 <= K), a draw from the residual
                         max(0, p_{a+1} - q_{a+1}), normalised (one-hot q: p_{a+1} without
                         x_{a+1}, renormalised)
  bonus token            after K acceptances, a draw from p_{K+1}
The step outputs a+1 tokens: x_1 .. x_a, then the recovered or the bonus token; each is, given
everything before it, a draw from its target distribution (Leviathan et al. 2023, Chen et al.
2023), which the run's distributional gate checks (pit_gate.py).

Conventions match vLLM's v1/sample/rejection_sampler.py: the accept test is
`q(x) > 0 and p(x) >= u q(x)` with u uniform in [0, 1) (a draft of zero draft probability is
rejected), the recovered token is drawn at the rejected depth, the bonus from the target alone,
output = accepted + recovered + bonus, and a placeholder -1 fills the depths past the output.
Where this differs: vLLM draws the recovered token by an exponential race over the vocabulary
with one noise vector per request; here every draw is an inverse CDF with one uniform keyed by
(document, turn, position, depth) (uniforms.py), so a run is reproducible at any batch width;
and vLLM samples the bonus token outside the sampler, here it is drawn inside from p_{K+1}.

A DRAFT_CONF-gated sequence verifies no draft: a = 0 and its one token is drawn from p_1 itself.

Shapes: B sequences, K drafts, V vocabulary.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from atlas_ab.speculative import uniforms
from atlas_ab.speculative.distribution import Sampling, draw, pit

#: The placeholder of depths past a step's output (vLLM's PLACEHOLDER_TOKEN_ID).
PLACEHOLDER = -1
#: Draft policies: drafts drawn from q (verified by min(1, p/q)), or q's argmax (verified as one-hot q).
DRAFT_POLICIES = ("sampled", "greedy")


@dataclass(frozen=True)
class SamplingPlan:
    """How a sampled run verifies: the target's rule, the drafter's rule and policy, the seed."""
    target: Sampling
    draft: Sampling
    policy: str            # sampled | greedy
    seed: int

    @property
    def sampled_drafts(self) -> bool:
        return self.policy == "sampled"


def plan_of(arm, sampling) -> SamplingPlan | None:
    """The plan of an arm (config.ArmConfig) under a workload's sampling (config.SamplingConfig);
    None for greedy verification. The drafter's q shares the target's truncation, at the arm's
    draft_temperature (default the target's). The policy defaults to sampled; a tree arm's is
    greedy (its drafts are the drafter's top-k, one-hot proposals: tree_sampling.py)."""
    if sampling.temperature == 0:
        return None
    target = Sampling(sampling.temperature, sampling.top_k, sampling.top_p)
    draft = Sampling(arm.draft_temperature or sampling.temperature, sampling.top_k, sampling.top_p)
    policy = arm.draft_policy or ("greedy" if arm.tree is not None else "sampled")
    return SamplingPlan(target, draft, policy, sampling.seed)


@dataclass
class Verdict:
    """One step's verification, all on the device."""
    accepted: torch.Tensor      # [B] long: accepted drafts a, 0..K
    tokens: torch.Tensor        # [B, K+1] long: x_1..x_a, recovered/bonus at depth a+1, PLACEHOLDER after
    accept_prob: torch.Tensor   # [B, K] float32: P(the verifier accepts the draft it was given), per depth
    alpha1: torch.Tensor        # [B] float32: sum_x min(p_1(x), q_1(x)), the expected acceptance at depth 1
    pit: torch.Tensor           # [B, K+1] float32: randomized PIT of each output token, NaN past the output


def _accept(px: torch.Tensor, qx: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """[B, K] bool: the accept test (tests replace it to inject a lossy sampler)."""
    return (qx > 0) & (px >= u * qx)


def _residual(p: torch.Tensor, q: torch.Tensor | None, x: torch.Tensor) -> torch.Tensor:
    """[B, V] unnormalised residual max(0, p - q) at a rejected depth (one-hot q when q is None);
    p itself where the residual has no mass (p == q: a rejection there has probability 0)."""
    if q is None:
        r = p.scatter(-1, x[:, None], 0.0)
    else:
        r = (p - q).clamp(min=0)
    return torch.where(r.sum(-1, keepdim=True) > 0, r, p)


def draft_probs_at(q: torch.Tensor | None, drafts: torch.Tensor) -> torch.Tensor:
    """[B, K] q_i(x_i): the draft distribution at each draft (1 for one-hot q)."""
    if q is None:
        return torch.ones(drafts.shape, dtype=torch.float32, device=drafts.device)
    return q.gather(-1, drafts[..., None]).squeeze(-1)


def coupled_accept_probabilities(q: torch.Tensor | None, drafts: torch.Tensor, y: torch.Tensor,
                                 py: torch.Tensor) -> torch.Tensor:
    """[B, K] replay's exact acceptance probability: P(x_i = y_i | y_i) = min(p_i(y_i), q_i(y_i)) / p_i(y_i)
    under the maximal coupling (draws.CoupledDraws), one-hot q: [x_i == y_i]. It conditions on the
    shared trajectory token y_i instead of on the drawn draft (live's min(1, p/q)); both have
    expectation P(accept), but only this one is a function of what two replayed arms share, so their
    paired difference keeps the common random numbers. py = p_i(y_i) > 0 (y was drawn from p)."""
    if q is None:
        return (drafts == y).float()
    qy = q.gather(-1, y[..., None]).squeeze(-1)
    return (torch.minimum(py, qy) / py.clamp(min=1e-30)).float()


def accept_probabilities(px: torch.Tensor, qx: torch.Tensor) -> torch.Tensor:
    """[B, K] min(1, p/q) (0 where q = 0, which the accept test rejects)."""
    return torch.where(qx > 0, (px / qx.clamp(min=1e-30)).clamp(max=1.0), 0.0)


def alpha_1(p1: torch.Tensor, q1: torch.Tensor | None, x1: torch.Tensor) -> torch.Tensor:
    """[B] sum_x min(p_1(x), q_1(x)); one-hot q: p_1(x_1)."""
    if q1 is None:
        return p1.gather(-1, x1[:, None]).squeeze(-1)
    return torch.minimum(p1, q1).sum(-1)


@dataclass
class StepUniforms:
    """The uniforms of one step, keyed (seed, doc, turn, n, depth, stream)."""
    accept: torch.Tensor    # [B, K] float64, depths 1..K
    token: torch.Tensor     # [B, K+1] float64, depths 1..K+1
    pit: torch.Tensor       # [B, K+1] float64, depths 1..K+1

    @staticmethod
    def of(seed: int, doc: torch.Tensor, turn: int, n: torch.Tensor, K: int) -> "StepUniforms":
        """doc [B], n [B] (the step's position) long tensors on the run's device; the three streams
        in one hash call (a GPU step is launch-bound)."""
        depth = torch.arange(1, K + 2, device=doc.device)[None, None, :]         # [1, 1, K+1]
        # fills, not a host->device copy: this runs inside the step's CUDA graph
        stream = torch.stack([torch.full((), s, dtype=torch.long, device=doc.device)
                              for s in (uniforms.ACCEPT, uniforms.TOKEN, uniforms.PIT)])[None, :, None]
        u = uniforms.uniform(seed, doc[:, None, None], turn, n[:, None, None], depth, stream)  # [B, 3, K+1]
        return StepUniforms(accept=u[:, 0, :K], token=u[:, 1], pit=u[:, 2])


def pit_order(p: torch.Tensor, q: torch.Tensor | None, drafts: torch.Tensor,
              gated: torch.Tensor | None = None) -> torch.Tensor:
    """[B, K+1, V] the order of each output depth's PIT (descending): at a drafted depth the
    draft-to-target ratio q_i / p_i (one-hot q: the draft first), elsewhere (the bonus depth, a
    gated step) the vocabulary's own order. q_i is fixed before the output of depth i is drawn,
    so u stays Uniform(0, 1) for a lossless sampler; a lossy one errs as a function of q/p
    (too much mass where q > p, or too little), which this order turns into a shift of u that
    the gate's KS test sees. In the vocabulary's order such errors cancel: measured on the tiny
    test model, KS over 1,024 fixed-order PITs had p = 0.23-0.90 under both injected bugs."""
    B, K = drafts.shape
    if q is None:
        r = torch.zeros(B, K, p.shape[-1], device=p.device).scatter(-1, drafts[..., None], 1.0)
    else:
        r = torch.where(p[:, :K] > 0, q / p[:, :K].clamp(min=1e-30), -1.0)
    if gated is not None:
        r = torch.where(gated[:, None, None], 0.0, r)
    return torch.cat([r, torch.zeros_like(r[:, :1])], dim=1)


def output_pit(p: torch.Tensor, tokens: torch.Tensor, accepted: torch.Tensor, v: torch.Tensor,
               key: torch.Tensor) -> torch.Tensor:
    """[B, K+1] float32 PIT of the output tokens (depths 1..a+1) under p [B, K+1, V] in the order
    of key [B, K+1, V] (pit_order); NaN after."""
    A = tokens.shape[1]
    out = pit(p, tokens, v, key).float()                                         # [B, K+1]
    live = torch.arange(A, device=tokens.device)[None, :] <= accepted[:, None]
    return torch.where(live, out, float("nan"))


def rejection_sample(drafts: torch.Tensor, q: torch.Tensor | None, p: torch.Tensor, u: StepUniforms,
                     gated: torch.Tensor | None = None) -> Verdict:
    """Verify drafts [B, K] drawn from q [B, K, V] (None: greedy drafts, one-hot q) against the
    target's p [B, K+1, V] (depths 1..K+1). gated [B] bool: DRAFT_CONF dropped the drafts."""
    B, K = drafts.shape
    ar = torch.arange(B, device=drafts.device)
    px = p[:, :K].gather(-1, drafts[..., None]).squeeze(-1)                      # [B, K]
    qx = draft_probs_at(q, drafts)                                               # [B, K]
    ok = _accept(px, qx, u.accept)                                               # [B, K]
    if gated is not None:
        ok = ok & ~gated[:, None]
    accepted = ok.long().cumprod(dim=1).sum(dim=1)                               # [B]
    j = accepted                                                                 # depth a+1, 0-based
    rejected = accepted < K                                                      # [B]
    if gated is not None:
        rejected = rejected & ~gated                                             # gated: a plain draw from p_1
    pj = p[ar, j]                                                                # [B, V]
    jd = j.clamp(max=K - 1)
    xj = drafts[ar, jd]                                                          # [B]
    res = _residual(pj, None if q is None else q[ar, jd], xj)                    # [B, V]
    dist = torch.where(rejected[:, None], res, pj)                               # [B, V]
    z = draw(dist, u.token[ar, j])                                               # [B]
    depth = torch.arange(K + 1, device=drafts.device)[None, :]                   # [1, K+1]
    padded = torch.cat([drafts, drafts.new_full((B, 1), PLACEHOLDER)], dim=1)    # [B, K+1]
    tokens = torch.where(depth < j[:, None], padded,
                         torch.where(depth == j[:, None], z[:, None], PLACEHOLDER))
    return Verdict(accepted=accepted, tokens=tokens, accept_prob=accept_probabilities(px, qx).float(),
                   alpha1=alpha_1(p[:, 0], None if q is None else q[:, 0], drafts[:, 0]).float(),
                   pit=output_pit(p, tokens, accepted, u.pit, pit_order(p, q, drafts, gated)))


def greedy_accept(drafts: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """[B] accepted drafts under greedy verification: the leading drafts [B, K] equal to the
    target's argmaxes target [B, K+1] (the output is target[:, :a+1]: the accepted drafts, then
    the target's own token at the first mismatch, or the bonus)."""
    K = drafts.shape[1]
    return (drafts == target[:, :K]).long().cumprod(dim=1).sum(dim=1)
