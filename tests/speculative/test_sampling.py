"""The verifier's rules, model-free (in the style of vLLM's tests/v1/sample/test_rejection_sampler.py):
literal cases for greedy acceptance, the bonus token and the exactly-G cut; then, on a tiny
vocabulary, the output of many speculative draws at one context against p (chi-square), for both
draft policies, and injected bugs that the same test catches.

Statistical tests use fixed keys (so each outcome is fixed); over keys, a correct sampler fails
one of them with probability ALPHA = 1e-3, and each injected bug is caught at p < 1e-12 here."""
import numpy as np
import pytest
import torch
from scipy import stats

from atlas_ab.speculative import sampling, uniforms
from atlas_ab.speculative.distribution import Sampling, draw, pit, probs
from atlas_ab.speculative.sampling import PLACEHOLDER as P, StepUniforms, greedy_accept, rejection_sample
from atlas_ab.speculative.step import commit_counts

ALPHA = 1e-3
V = 100


def onehot(tokens, vocab=V):
    """[B, K+1, V] target distributions that put all mass on the given tokens."""
    t = torch.tensor(tokens)
    return torch.nn.functional.one_hot(t, vocab).float()


def greedy_output(drafts, target):
    d, t = torch.tensor(drafts), torch.tensor(target)
    a = greedy_accept(d, t)
    return [t[b, :int(a[b]) + 1].tolist() for b in range(len(a))]


def sampled_output(drafts, target, sampled_q):
    """The rejection sampler on a one-hot target: greedy drafts (q None) or drafts drawn from a
    one-hot q (sampled policy); both must behave as greedy verification does."""
    d = torch.tensor(drafts)
    q = onehot(drafts) if sampled_q else None
    B, K = d.shape
    u = StepUniforms.of(0, torch.arange(B), 0, torch.zeros(B, dtype=torch.long), K)
    v = rejection_sample(d, q, onehot(target), u)
    out = [v.tokens[b, :int(v.accepted[b]) + 1].tolist() for b in range(B)]
    assert (v.tokens[torch.arange(K + 1)[None, :] > v.accepted[:, None]] == P).all()
    return out


CASES = [
    ([[1, 2, 3]], [[1, 2, 3, 4]], [[1, 2, 3, 4]]),          # perfect match: the bonus 4 follows
    ([[1, 2, 3]], [[1, 5, 3, 4]], [[1, 5]]),                # mismatch at 1: the target's 5 ends the step
    ([[1]], [[2, 3]], [[2]]),                               # first mismatch: nothing accepted
    ([[1, 2], [3, 4]], [[1, 2, 5], [3, 6, 7]], [[1, 2, 5], [3, 6]]),   # two sequences, each its own length
    ([[1, 2, 3], [4, 5, 6]], [[1, 2, 7, 6], [4, 8, 6, 9]], [[1, 2, 7], [4, 8]]),
]


@pytest.mark.parametrize("drafts,target,expected", CASES)
def test_greedy_acceptance_literal(drafts, target, expected):
    assert greedy_output(drafts, target) == expected


@pytest.mark.parametrize("sampled_q", [False, True])
@pytest.mark.parametrize("drafts,target,expected", CASES)
def test_rejection_sampler_on_a_deterministic_target_is_greedy(drafts, target, expected, sampled_q):
    assert sampled_output(drafts, target, sampled_q) == expected


@pytest.mark.parametrize("accepted,left,expected", [
    ([3], [2], [2]),        # drafts [[1, 2, 3]] all accepted + bonus = 4 tokens, the turn needs 2
    ([1], [5], [2]),        # mismatch at 1: 1 accepted + the target's token
    ([3, 0], [9, 1], [4, 1]),
    ([2, 2], [1, 3], [1, 3]),
])
def test_exactly_G_cut(accepted, left, expected):
    c = commit_counts(torch.tensor(accepted), torch.tensor(left))
    assert c.tolist() == expected
    # an inactive sequence's plan says the turn needs nothing more: it commits nothing
    assert commit_counts(torch.tensor(accepted), torch.zeros(len(accepted), dtype=torch.long)).tolist() == \
        [0] * len(accepted)


# --------------------------------------------------------------- the distribution at one context
Vs = 6
P1 = torch.tensor([0.30, 0.05, 0.25, 0.10, 0.20, 0.10])
P2 = torch.tensor([0.05, 0.40, 0.05, 0.30, 0.10, 0.10])
P3 = torch.tensor([0.20, 0.20, 0.05, 0.05, 0.30, 0.20])
Q1 = torch.tensor([0.10, 0.30, 0.40, 0.05, 0.10, 0.05])
Q2 = torch.tensor([0.10, 0.30, 0.10, 0.25, 0.15, 0.10])
N = 40_000


def draws(policy, seed=7):
    """N independent speculative steps (K=2) at one context; the toy target does not depend on
    the drafts, so each depth's output, given it is reached, must follow P1, P2, P3."""
    doc = torch.arange(N)
    n = torch.zeros(N, dtype=torch.long)
    q = torch.stack([Q1, Q2])[None].expand(N, 2, Vs).contiguous()               # [N, 2, V]
    if policy == "sampled":
        ud = uniforms.uniform(seed, doc[:, None], 0, n[:, None], torch.arange(1, 3)[None, :], uniforms.DRAFT)
        drafts = draw(q, ud)                                                    # [N, 2]
    else:
        drafts, q = q.argmax(-1), None
    p = torch.stack([P1, P2, P3])[None].expand(N, 3, Vs).contiguous()           # [N, 3, V]
    return rejection_sample(drafts, q, p, StepUniforms.of(seed, doc, 0, n, 2)), drafts


def gof(tokens, p):
    obs = np.bincount(tokens.numpy(), minlength=Vs)
    e = p.double().numpy()
    return stats.chisquare(obs, e / e.sum() * obs.sum()).pvalue


def depth_pvalues(v):
    a, t = v.accepted, v.tokens
    return [gof(t[:, 0], P1), gof(t[a >= 1, 1], P2), gof(t[a == 2, 2], P3)]


@pytest.mark.parametrize("policy", ["sampled", "greedy"])
def test_output_follows_the_target_at_each_depth(policy):
    v, drafts = draws(policy)
    assert min(depth_pvalues(v)) > ALPHA
    # every depth is reached often enough for the test to mean something
    assert (v.accepted >= 1).sum() > 5_000 and (v.accepted == 2).sum() > 1_000
    # exact acceptance probabilities: min(1, p/q) per draft, alpha_1 = sum min(p1, q1)
    if policy == "sampled":
        expect = torch.minimum(P1[drafts[:, 0]] / Q1[drafts[:, 0]], torch.tensor(1.0))
        alpha1 = float(torch.minimum(P1, Q1).sum())
    else:
        expect = P1[drafts[:, 0]]
        alpha1 = float(P1[Q1.argmax()])
    torch.testing.assert_close(v.accept_prob[:, 0], expect, rtol=1e-6, atol=1e-7)
    assert torch.allclose(v.alpha1, torch.tensor(alpha1), atol=1e-6)
    # the realized acceptance at depth 1 agrees with its exact probability (binomial, 4.5 sd)
    rate = float((v.accepted >= 1).double().mean())
    assert abs(rate - alpha1) < 4.5 * (alpha1 * (1 - alpha1) / N) ** 0.5
    # and the PIT of every output token is uniform
    u = v.pit[~torch.isnan(v.pit)].double().numpy()
    assert len(u) == int((v.accepted + 1).sum()) and stats.kstest(u, "uniform").pvalue > ALPHA


def ignores_q(px, qx, u):
    return px >= u             # the one-hot rule on a sampled draft: accept with p(x), q forgotten


def resamples_p(p, q, x):
    return p                   # at a rejection, resample from p instead of the residual


@pytest.mark.parametrize("policy,bug", [("sampled", "ignores_q"), ("sampled", "resamples_p"),
                                        ("greedy", "resamples_p")])
def test_injected_bugs_are_caught(monkeypatch, policy, bug):
    """An accept rule without q and a recovery from p instead of the residual both move the
    output off p. (Accepting with p/q without the min is no bug a uniform coin can show:
    P(u <= r) = min(1, r) already.)"""
    if bug == "ignores_q":
        monkeypatch.setattr(sampling, "_accept", ignores_q)
    else:
        monkeypatch.setattr(sampling, "_residual", resamples_p)
    v, _ = draws(policy)
    assert depth_pvalues(v)[0] < 1e-12


def test_greedy_is_temperature_zero():
    assert Sampling().greedy and not Sampling(temperature=0.7).greedy


# ------------------------------------------------------------------ the target distribution
def test_truncation_and_renormalisation():
    logits = torch.log(torch.tensor([[0.5, 0.2, 0.15, 0.1, 0.05]]))
    assert torch.allclose(probs(logits, Sampling(1.0)), torch.tensor([[0.5, 0.2, 0.15, 0.1, 0.05]]))
    k2 = probs(logits, Sampling(1.0, top_k=2))
    assert torch.allclose(k2, torch.tensor([[5 / 7, 2 / 7, 0, 0, 0]]))
    # top_p = 0.8: 0.5 + 0.2 < 0.8, so 0.15 is kept too; 0.1 starts past the mass
    p8 = probs(logits, Sampling(1.0, top_p=0.8))
    assert torch.allclose(p8, torch.tensor([[0.5, 0.2, 0.15, 0, 0]]) / 0.85)
    assert torch.allclose(probs(logits, Sampling(1.0, top_p=0.1)), torch.tensor([[1.0, 0, 0, 0, 0]]))
    t05 = probs(logits, Sampling(0.5))
    w = torch.tensor([0.5, 0.2, 0.15, 0.1, 0.05]) ** 2
    assert torch.allclose(t05, (w / w.sum())[None])
    both = probs(logits, Sampling(1.0, top_k=3, top_p=0.7))     # top-3 -> [.5 .2 .15]/.85; mass .588 < .7
    assert torch.allclose(both, torch.tensor([[0.5, 0.2, 0, 0, 0]]) / 0.7)


def test_draw_never_picks_a_zero_mass_token_and_pit_is_in_range():
    p = torch.tensor([[0.0, 0.5, 0.0, 0.5, 0.0]]).expand(9, 5)
    u = torch.tensor([0.0, 0.1, 0.4999, 0.5, 0.7, 0.99, 0.999999, 1 - 2 ** -53, 0.25], dtype=torch.float64)
    t = draw(p, u)
    assert t.tolist() == [1, 1, 1, 3, 3, 3, 3, 3, 1]
    assert draw(p[:1], torch.ones(1, dtype=torch.float64)).tolist() == [3]    # u rounded up to 1: still mass
    w = pit(p, t, torch.full((9,), 0.5, dtype=torch.float64))
    assert w.tolist() == [0.25, 0.25, 0.25, 0.75, 0.75, 0.75, 0.75, 0.75, 0.25]


# ---------------------------------------------------------------------- the counter uniforms
def test_uniforms_are_a_function_of_their_key():
    doc = torch.arange(64)
    a = uniforms.uniform(3, doc[:, None], 1, torch.arange(10)[None, :], 2, uniforms.ACCEPT)
    b = uniforms.uniform(3, doc[17], 1, torch.arange(10), 2, uniforms.ACCEPT)     # one row, another shape
    assert torch.equal(a[17], b)                   # integer hashing, then one exact scaling: any shape
    assert len(torch.unique(a)) == a.numel()
    others = [uniforms.uniform(4, doc[:, None], 1, torch.arange(10)[None, :], 2, uniforms.ACCEPT),
              uniforms.uniform(3, doc[:, None], 2, torch.arange(10)[None, :], 2, uniforms.ACCEPT),
              uniforms.uniform(3, doc[:, None], 1, torch.arange(10)[None, :], 3, uniforms.ACCEPT),
              uniforms.uniform(3, doc[:, None], 1, torch.arange(10)[None, :], 2, uniforms.TOKEN)]
    for o in others:
        assert not torch.isclose(o, a).any()
    big = uniforms.uniform(0, torch.arange(200_000), 0, 0, 1, uniforms.DRAFT)
    assert big.min() >= 0 and big.max() < 1
    assert stats.kstest(big.numpy(), "uniform").pvalue > ALPHA
    # neighbouring keys are not correlated
    assert abs(np.corrcoef(big[:-1].numpy(), big[1:].numpy())[0, 1]) < 0.01
