"""The tree's multi-draft rejection sampler (speculative/tree_sampling.py), model-free: literal walks
on a 5-token vocabulary with chosen uniforms (hand-computed paths and output tokens, accept_prob,
PIT), then losslessness in numbers: over 200,000 independent steps the output at each depth, given
the outputs before it, follows p at the walk's node (binomial, 5 sd per token), and a walk that
does not renormalise the residual fails that same check and the PIT's KS test."""
import math

import numpy as np
import pytest
import torch

from atlas_ab.config.tree import parse_tree
from atlas_ab.speculative import pit_gate, tree_sampling
from atlas_ab.speculative.sampling import PLACEHOLDER as P
from atlas_ab.speculative.tree_sampling import TreeUniforms, sample, tables

V = 5
NAN = float("nan")
# topk:2,1: node 1 = (0,), 2 = (1,), 3 = (0, 0), 4 = (1, 0); the root's children 1, 2; 1's child 3, 2's child 4
TOP2 = "topk:2,1"
TOKENS = [0, 1, 2, 4, 3]                       # node 0 (t_n), then each draft's token
PROBS = [[0.1, 0.5, 0.3, 0.05, 0.05],          # p at the root: its children carry 0.5 (token 1) and 0.3 (token 2)
         [0.1, 0.1, 0.1, 0.1, 0.6],            # p at node 1: its child (token 4) 0.6
         [0.4, 0.2, 0.2, 0.2, 0.0],            # p at node 2: its child (token 3) 0.2
         [0.2, 0.2, 0.2, 0.2, 0.2],            # node 3, a leaf
         [0.0, 0.5, 0.0, 0.0, 0.5]]            # node 4, a leaf


def run(tree, accept, token, pit, tokens=TOKENS, probs=PROBS):
    """The sampler on one row per case: accept [B][N+1] (node 0's unused), token and pit [B][D+1]."""
    B = len(accept)
    t = tables(parse_tree(tree), "cpu")
    u = TreeUniforms(accept=torch.tensor(accept, dtype=torch.float64), token=torch.tensor(token, dtype=torch.float64),
                     pit=torch.tensor(pit, dtype=torch.float64))
    nodes = torch.tensor(tokens).expand(B, -1)
    p = torch.tensor(probs).expand(B, -1, -1)
    return sample(nodes, p, t, u)


def test_literal_walks():
    """Row 0: the root's rank-0 child (p 0.5) fails its coin 0.7; the rank-1 child is tested against
    the residual, 0.3 / 0.5 = 0.6 >= 0.5, and passes (raw p 0.3 would not); at node 2 its child
    (p 0.2) fails 0.9, so the recovered token is drawn from p_2 without token 3, [.5, .25, .25, 0, 0]
    at u 0.6: token 1. Row 1: both children fail (0.9 > 0.5, 0.8 > 0.6): recovered from the root's
    residual without tokens 1 and 2, [.5, 0, 0, .25, .25] at u 0.6: token 3. Row 2: both depths
    pass (0.2 <= 0.5, 0.3 <= 0.6); node 3 is a leaf: the bonus from p_3 (uniform) at u 0.45: token 2."""
    v = run(TOP2, accept=[[0, 0.7, 0.5, 0, 0.9], [0, 0.9, 0.8, 0, 0], [0, 0.2, 0, 0.3, 0]],
            token=[[0, 0.6, 0], [0.6, 0, 0], [0, 0, 0.45]], pit=[[0.5] * 3] * 3)
    assert v.accepted.tolist() == [1, 0, 2]
    assert v.path.tolist() == [[0, 2, -1], [0, -1, -1], [0, 1, 3]]
    assert v.tokens.tolist() == [[2, 1, P], [3, P, P], [1, 4, 2]]
    assert v.view.tolist() == [[0, 2, 4], [0, 1, 3], [0, 1, 3]]      # the path, then rank-0 children
    # accept_prob along the view: the children's p mass at each view node (root 0.5 + 0.3)
    np.testing.assert_allclose(v.accept_prob.numpy(), [[0.8, 0.2], [0.8, 0.6], [0.8, 0.6]], rtol=1e-6)
    np.testing.assert_allclose(v.alpha1.numpy(), [0.8, 0.8, 0.8], rtol=1e-6)
    # PIT, the children first by rank, then the vocabulary, V = 0.5. Row 1, token 3 at the root: order
    # 1, 2, 0, 3, 4, F(3-) = 0.5 + 0.3 + 0.1. Row 0: token 2 at the root after token 1 (0.5 + 0.5 * 0.3);
    # token 1 at node 2 in order 3, 0, 1, ...: 0.2 + 0.4 + 0.5 * 0.2. Row 2: token 1 first at the root
    # (0.5 * 0.5), token 4 first at node 1 (0.5 * 0.6), then node 3 has no children: vocabulary order.
    np.testing.assert_allclose(v.pit.numpy(), [[0.65, 0.7, NAN], [0.925, NAN, NAN], [0.25, 0.3, 0.5]], rtol=1e-6)


def test_a_leaf_before_the_deepest_depth_draws_its_bonus():
    """[(0,), (1,), (0, 0)]: node 2 = (1,) is a leaf at depth 1. Its parent's rank-0 child fails
    (0.7 > 0.5), node 2 passes against the residual (0.6 >= 0.5), and the step ends with the bonus
    from p_2 ([.4, .2, .2, .2, 0]) at u 0.7: token 2. accept_prob at depth 2 is NaN (no children)."""
    v = run("[(0,), (1,), (0, 0)]", accept=[[0, 0.7, 0.5, 0]], token=[[0, 0.7, 0]], pit=[[0.5] * 3],
            tokens=TOKENS[:4], probs=PROBS[:4])
    assert v.accepted.tolist() == [1] and v.path.tolist() == [[0, 2, -1]] and v.tokens.tolist() == [[2, 2, P]]
    assert v.view.tolist() == [[0, 2, -1]]
    np.testing.assert_allclose(v.accept_prob.numpy(), [[0.8, NAN]], rtol=1e-6)


def test_rank0_reads_p_as_the_chain_does():
    """The first child's test is p(x) >= u on p as given (not renormalised by its float sum):
    a coin equal to p(x) passes, as sampling._accept's `p(x) >= u q(x)` with q = 1."""
    px = torch.tensor(PROBS)[0, 1].item()
    v = run(TOP2, accept=[[0, px, 1.0, 1.0, 0]], token=[[0, 0, 0]], pit=[[0.5] * 3])
    assert v.path.tolist() == [[0, 1, -1]]


# ------------------------------------------------------------------ losslessness, numerically
ROWS = 200_000
SD = 5


def _draws(rows=ROWS, seed=11):
    t = tables(parse_tree(TOP2), "cpu")
    u = TreeUniforms.of(seed, torch.arange(rows), 0, torch.zeros(rows, dtype=torch.long), t)
    return sample(torch.tensor(TOKENS).expand(rows, -1), torch.tensor(PROBS).expand(rows, -1, -1), t, u)


def _follows(out: np.ndarray, p) -> bool:
    """Each token's count among `out` within SD binomial sd of len(out) * p (exactly 0 where p = 0)."""
    n, p = len(out), np.asarray(p, dtype=np.float64)
    counts = np.bincount(out, minlength=V)
    sd = np.sqrt(n * p * (1 - p))
    return bool(n > 0 and (np.abs(counts - n * p) <= SD * sd + 1e-9).all())


def _lossless(v) -> dict:
    """Per conditioning event, whether the next output follows p at the node the walk is at:
    depth 1 given nothing (the root); depth 2 given depth 1 = a root child's token (the walk moved
    there); depth 3 given depths 1-2 = a path to a leaf (its bonus)."""
    tok = v.tokens.numpy()
    out = {"depth 1": _follows(tok[:, 0], PROBS[0])}
    for node, (first, second) in ((1, (1, None)), (2, (2, None)), (3, (1, 4)), (4, (2, 3))):
        at = tok[:, 0] == first
        col = 1
        if second is not None:
            at &= tok[:, 1] == second
            col = 2
        out[f"at node {node}"] = _follows(tok[at, col], PROBS[node])
    return out


def test_output_follows_p_at_every_depth():
    v = _draws()
    checks = _lossless(v)
    assert all(checks.values()), checks
    # the path reaches both root children and both leaves often enough to be checked
    assert min((v.path == n).any(1).sum().item() for n in range(1, 5)) > 0.02 * ROWS
    u = v.pit.numpy()
    assert pit_gate.check(u[~np.isnan(u)], ROWS)["passed"]


def _not_renormalised(res):
    return torch.ones(res.shape[0], dtype=res.dtype)


def test_a_walk_without_renormalising_fails_the_same_check(monkeypatch):
    """The rank-1 child tested against the raw p (not the residual renormalised): token 2 comes
    out with probability 0.5 * 0.3 = 0.15, not 0.3; the depth-1 check and the PIT's KS test fail,
    the deeper ones (one child each) still hold."""
    monkeypatch.setattr(tree_sampling, "_residual_mass", _not_renormalised)
    v = _draws()
    checks = _lossless(v)
    assert checks["depth 1"] is False and all(ok for k, ok in checks.items() if k != "depth 1"), checks
    share = (v.tokens[:, 0] == 2).double().mean().item()
    assert abs(share - 0.15) < SD * math.sqrt(0.15 * 0.85 / ROWS)
    u = v.pit.numpy()
    g = pit_gate.check(u[~np.isnan(u)], ROWS)
    assert g["passed"] is False and g["ks"]["p_value"] < 1e-12


@pytest.mark.parametrize("tree", ["topk:1,1,1", TOP2, "[(0,), (1,), (2,), (0, 0), (0, 1), (0, 0, 0)]"])
def test_keys_rank0_is_the_chains_and_a_step_reads_each_once(tree):
    """A child's coin key is a function of its (depth, rank), one to one: a rank-0 child's is the
    chain's ACCEPT key of its depth, a rank >= 1 child's its own TREE_ACCEPT key (siblings of a
    parent share nothing; nodes of one depth and rank under different parents share a key, and a
    step's walk tests the children of one node per depth). The TOKEN and PIT keys are the chain's
    depths 1..D+1, and no two of the keys one walk can read are equal."""
    from atlas_ab.speculative import uniforms
    spec = parse_tree(tree)
    t = tables(spec, "cpu")
    keys = list(zip(t.key_depth.tolist(), t.key_stream.tolist()))
    N1, D = spec.n_nodes + 1, spec.max_depth
    by_place = {}
    for v in range(1, N1):
        assert by_place.setdefault((int(spec.depth[v]), int(spec.rank[v])), keys[v]) == keys[v]
        if spec.rank[v] == 0:
            assert keys[v] == (spec.depth[v], uniforms.ACCEPT)
        else:
            assert keys[v][1] == uniforms.TREE_ACCEPT
    assert len(set(by_place.values())) == len(by_place)
    assert keys[N1:] == [(d, uniforms.TOKEN) for d in range(1, D + 2)] + [(d, uniforms.PIT) for d in range(1, D + 2)]
    for leaf in range(N1):      # a walk to any node reads its ancestors' children's coins, then TOKEN and PIT
        on = np.nonzero(spec.ancestors[leaf])[0]
        read = [keys[c] for v in on for c in spec.children(v)] + keys[N1:]
        assert len(set(read)) == len(read)
