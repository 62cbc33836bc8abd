"""The tree check (analysis/tree/check.py): a tree's per-position prediction from a SHADOW_TOPK
run against the tree arm at matched positions, and the assumption past a branch, on literal
tables worked by hand."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from atlas_ab import AtlasError
from atlas_ab.analysis.tree import node_probability, observed_ranks, topk_coverage, tree_check
from atlas_ab.config.tree import parse_tree

TREE = parse_tree("topk:2,1")     # nodes 1 (0,), 2 (1,), 3 (0, 0), 4 (1, 0)


def run(steps, name):
    return SimpleNamespace(steps=steps, path=name, clusters=(None, "document"))


def shadow_and_tree():
    """Four positions, K=2, top-2 candidates [5, 6] then [7, 8]:
      A  target 5, 7  ranks (0, 0)   reach 1: 1, reach 2: 1 (both observed)
      B  target 6     ranks (1, -)   reach 1: 1 (observed); reach 2 via (1, 0): q2(0) = 1/2 (assumed)
      C  target 9     absent         reach 1: 0, reach 2: 0
      D  target 5, 8  ranks (0, 1)   reach 1: 1; reach 2: 0 (the tree has no (0, 1))
    q1 = (2/4, 1/4); q2 over A and D = (1/2, 1/2). The tree arm: A accepts [0, 1, 3], B [0, 2, 4],
    C and D nothing (D disagrees with its observed depth-1 prediction)."""
    tgt = [[5, 7, 1], [6, 7, 1], [9, 7, 1], [5, 8, 1]]
    acc = [2, 0, 0, 1]
    sh = pd.DataFrame(dict(doc_id=0, turn=1, step=range(4), position=[10, 20, 30, 40], k=2, accept_len=acc,
                           drafts=[[5, 7]] * 4, target=tgt, topk_ids=[[[5, 6], [7, 8]]] * 4))
    tr = pd.DataFrame(dict(doc_id=0, turn=1, step=range(5), position=[10, 20, 30, 40, 41], k=2,
                           accept_len=[2, 2, 0, 0, 1], tree_path=[[0, 1, 3], [0, 2, 4], [0], [0], [0, 2]]))
    return sh, tr


def test_observed_ranks_stop_past_a_wrong_prefix():
    assert observed_ranks([[5, 6], [7, 8]], [5, 8, 1], 2, 2).tolist() == [0, 1]
    assert observed_ranks([[5, 6], [7, 8]], [6, 7, 1], 2, 2).tolist() == [1, -1]
    assert observed_ranks([[5, 6], [7, 8]], [9, 7, 1], 2, 2).tolist() == [2, -1]


def test_node_probability_observed_along_the_chain_assumed_past_a_branch():
    q = [np.array([0.5, 0.25]), np.array([0.5, 0.5])]
    assert node_probability((0, 0), np.array([0, 0]), q) == (1.0, True)
    assert node_probability((1,), np.array([1, -1]), q) == (1.0, True)
    assert node_probability((1, 0), np.array([1, -1]), q) == (0.5, False)
    assert node_probability((0, 0), np.array([1, -1]), q) == (0.0, True)
    assert node_probability((1, 0), np.array([2, -1]), q) == (0.0, True)


def test_the_check_worked_by_hand():
    sh, tr = shadow_and_tree()
    cov = topk_coverage(sh, "shadow")
    c = tree_check(run(sh, "shadow"), run(tr, "tree"), cov, TREE)
    d1, d2 = c.depths
    assert (d1.n_pairs, d1.predicted, d1.realized, d1.discordant, d1.observed_share) == (4, 0.75, 0.5, 1, 1.0)
    assert d1.gap == pytest.approx(-0.25)
    assert (d2.predicted, d2.realized, d2.discordant) == (0.375, 0.5, 0)
    assert d2.observed_share == pytest.approx(1 / 1.5)
    assert c.tokens.predicted == pytest.approx(2.125) and c.tokens.realized == pytest.approx(2.0)
    assert d1.sd is None and "too few clusters" in c.summary()          # one document
    (b,) = c.branches                   # past (1,): B, and the unmatched step at 41; both reached depth 1
    assert (b.depth, b.n, b.assumed) == (2, 2, 0.5) and b.realized == pytest.approx(0.5)


def test_the_gaps_cluster_sd_is_statsmodels_clustered_mean():
    """12 documents, every other one without position D: the depth-1 gap's sd is the cluster-robust
    sd of the mean of the per-position gaps (statsmodels OLS on a constant, clustered by document)."""
    import statsmodels.api as sm
    sh, tr = shadow_and_tree()
    sh = pd.concat([sh.assign(doc_id=g)[(sh.position != 40) | (g % 2 == 1)] for g in range(12)], ignore_index=True)
    tr = pd.concat([tr.assign(doc_id=g) for g in range(12)], ignore_index=True)
    c = tree_check(run(sh, "shadow"), run(tr, "tree"), topk_coverage(sh, "shadow"), TREE)
    gaps = np.array([0.0, 0.0, 0.0] * 6 + [0.0, 0.0, 0.0, -1.0] * 6)          # A, B, C agree; D is -1
    groups = np.array([g for g in range(0, 12, 2) for _ in range(3)] + [g for g in range(1, 12, 2) for _ in range(4)])
    fit = sm.OLS(gaps, np.ones_like(gaps)).fit(cov_type="cluster", cov_kwds={"groups": groups})
    assert c.depths[0].gap == pytest.approx(gaps.mean()) and c.depths[0].n_clusters == 12
    assert c.depths[0].sd == pytest.approx(float(fit.bse[0]), rel=1e-9)
    lo, hi = c.depths[0].ci
    assert (lo + hi) / 2 == pytest.approx(gaps.mean()) and hi - lo == pytest.approx(2 * 1.959963984540054 * fit.bse[0])


def test_refusals_name_what_is_missing():
    sh, tr = shadow_and_tree()
    cov = topk_coverage(sh, "shadow")
    with pytest.raises(AtlasError, match="tree: no tree_path column"):
        tree_check(run(sh, "shadow"), run(tr.drop(columns="tree_path"), "tree"), cov, TREE)
    with pytest.raises(AtlasError, match="no matched positions"):
        tree_check(run(sh, "shadow"), run(tr.assign(position=tr.position + 1000), "tree"), cov, TREE)
    with pytest.raises(AtlasError, match="deeper or wider"):
        tree_check(run(sh, "shadow"), run(tr, "tree"), cov, parse_tree("topk:3,1"))
