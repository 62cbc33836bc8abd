"""`coverage SHADOW --tree SPEC --realized TREE_RUN`: a tree's prediction tested against the tree arm.

prediction.py predicts, from a SHADOW_TOPK run of the linear chain, what a static tree would
accept, over the whole arm. This module checks that prediction where it can be checked exactly:
position by position, and at the branches where its one assumption is made.

Terms (config/tree.py for the tree's; prediction.py for q_i and THE ASSUMPTION):
  matched position  a (doc_id, turn, position) where both runs start a verify step. Greedy runs of
                    one target share its trajectory, so their positions align; where they step,
                    they need not
  observed rank     at a matched position the chain logged, for each depth i, the drafter's top-k
                    and the target's token; obs_i is the target's rank among them (k: absent). It
                    is observed while the chain's own prefix was right (obs_1..obs_{i-1} all 0)
  per-position prediction
                    a tree node v = (r_1..r_d) lies on the target's path with probability
                      P(v | row) = prod_i f_i,  f_i = [r_i == obs_i]  while r_1..r_{i-1} are all 0
                                                f_i = q_i(r_i)         past a rank >= 1 (assumed)
                    reach_d(row) = sum of P(v) over the depth-d nodes; tokens(row) = 1 + sum_d reach_d
  realized          the tree arm's reach_d = [accept_len >= d] at the same position
  gap               realized - predicted, per matched position; its mean and cluster sd (the
                    control run's clusters, as `paired_difference`'s) per depth and for tokens
  observed share    the part of the predicted reach_d that is observed, not assumed

At depth 1 nothing is assumed, so a gap there means the two drafters were not in the same state
at that position (the tree arm's drafter rows follow its own accepted paths). At depth >= 2 the
gap adds the assumption's error; `branch` isolates that part on the tree arm alone: over its steps
whose accepted path went through a rank >= 1 node at depth d-1, the rate of reaching depth d
against the assumption's probability there (sum of q_d over that node's child ranks). The
handoff (Q1) is where the assumption can fail: past a branch the drafter's forward gets its
parent's hidden with a token its head ranked lower.

Shapes: P matched positions, D the tree's depth, k the shadow run's top-k.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from atlas_ab import AtlasError
from atlas_ab.analysis.comparison import KEY
from atlas_ab.analysis.stats import DocSums, cluster, few_clusters
from atlas_ab.analysis.tree.coverage import Coverage
from atlas_ab.analysis.tree.prediction import rank_table
from atlas_ab.config.tree import TreeSpec

Z95 = 1.959963984540054


@dataclass(frozen=True)
class GapRow:
    """One depth (or tokens per step, depth 0) over the matched positions."""
    depth: int
    n_pairs: int
    predicted: float          # mean per-position prediction
    observed_share: float     # of `predicted`, the observed part's share (nan where predicted is 0)
    realized: float           # mean realized
    gap: float                # realized - predicted
    sd: float | None          # cluster sd of the gap (None: too few clusters)
    n_clusters: int
    discordant: int           # depth >= 1: positions where an observed 0/1 prediction and the realized differ

    @property
    def ci(self) -> tuple[float, float] | None:
        return None if self.sd is None else (self.gap - Z95 * self.sd, self.gap + Z95 * self.sd)

    def to_dict(self) -> dict:
        return {"depth": self.depth, "n_pairs": self.n_pairs, "predicted": self.predicted,
                "observed_share": self.observed_share, "realized": self.realized, "gap": self.gap, "sd": self.sd,
                "ci95": list(self.ci) if self.ci else None, "n_clusters": self.n_clusters,
                "discordant": self.discordant}


@dataclass(frozen=True)
class BranchRow:
    """Depth d reached from a depth d-1 node of rank >= 1 somewhere on its path: realized vs assumed."""
    depth: int
    n: int                    # tree-arm steps whose accepted path reached such a node at depth d-1
    realized: float           # of them, the share that reached depth d
    assumed: float            # the assumption's probability (mean over those steps)
    assumed_sd: float         # its binomial (delta) sd from the coverage counts
    gap: float
    sd: float                 # binomial sd of `realized` and `assumed_sd`, combined

    def to_dict(self) -> dict:
        return {"depth": self.depth, "n": self.n, "realized": self.realized, "assumed": self.assumed,
                "assumed_sd": self.assumed_sd, "gap": self.gap, "sd": self.sd}


@dataclass(frozen=True)
class TreeCheck:
    tree: str
    shadow: str
    realized_run: str
    depths: tuple[GapRow, ...]
    tokens: GapRow            # depth 0: tokens per verify step (1 + accepted)
    branches: tuple[BranchRow, ...]
    cluster_unit: str

    def summary(self) -> str:
        lines = [f"tree check, matched positions: {self.realized_run} against {self.shadow}'s per-position "
                 f"prediction for {self.tree} (gap = realized - predicted; cluster sd by {self.cluster_unit})", "",
                 "| depth | pairs | predicted | observed share | realized | gap | 95% interval | discordant |",
                 "|---|---|---|---|---|---|---|---|"]
        for r in (*self.depths, self.tokens):
            ci = f"[{r.ci[0]:+.4f}, {r.ci[1]:+.4f}]" if r.ci else "n/a (too few clusters)"
            name = "tokens/step" if r.depth == 0 else str(r.depth)
            share = "" if np.isnan(r.observed_share) else f"{r.observed_share:.3f}"
            disc = "" if r.depth == 0 else f"{r.discordant:,}"
            lines.append(f"| {name} | {r.n_pairs:,} | {r.predicted:.4f} | {share} | {r.realized:.4f} | "
                         f"{r.gap:+.4f} | {ci} | {disc} |")
        if self.branches:
            lines += ["", "past a branch (the tree arm's steps; the assumption alone): depth d reached from a "
                      "rank >= 1 path at depth d-1", "",
                      "| depth | steps | realized | assumed | gap (sd) |", "|---|---|---|---|---|"]
            lines += [f"| {b.depth} | {b.n:,} | {b.realized:.4f} | {b.assumed:.4f} ({b.assumed_sd:.4f}) | "
                      f"{b.gap:+.4f} ({b.sd:.4f}) |" for b in self.branches]
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"tree": self.tree, "shadow": self.shadow, "realized_run": self.realized_run,
                "depths": [r.to_dict() for r in self.depths], "tokens": self.tokens.to_dict(),
                "branches": [b.to_dict() for b in self.branches], "cluster_unit": self.cluster_unit}


def observed_ranks(topk_ids, target, K: int, k: int) -> np.ndarray:
    """[K] the target's rank among the logged candidates at each depth (k: absent), -1 where not
    observed (a wrong prefix above it)."""
    obs = np.full(K, -1, dtype=np.int64)
    for i in range(K):
        cand = list(topk_ids[i])
        obs[i] = cand.index(target[i]) if target[i] in cand else k
        if obs[i] != 0:
            break
    return obs


def node_probability(path: tuple, obs: np.ndarray, q: list[np.ndarray]) -> tuple[float, bool]:
    """(P(node on the target's path | the row's observed ranks), whether it used no assumption)."""
    p, chain, assumed = 1.0, True, False
    for i, r in enumerate(path):
        if chain and obs[i] >= 0:              # the chain's own prefix: the rank here is observed
            if r != obs[i]:
                return 0.0, not assumed
        else:
            assumed = True
            p *= float(q[i][r]) if r < len(q[i]) else 0.0
        chain = chain and r == 0
    return p, not assumed


def per_position(steps: pd.DataFrame, tree: TreeSpec, q: list[np.ndarray], K: int, k: int):
    """[P, D] predicted reach per depth and [P, D] its observed part, one row per shadow step."""
    D = tree.max_depth
    pred, obs_part = np.zeros((len(steps), D)), np.zeros((len(steps), D))
    for j, (ids, tgt) in enumerate(zip(steps["topk_ids"], steps["target"])):
        obs = observed_ranks(ids, list(tgt), K, k)
        for path in tree.paths:
            p, exact = node_probability(path, obs, q)
            pred[j, len(path) - 1] += p
            if exact:
                obs_part[j, len(path) - 1] += p
    return pred, obs_part


def _gap_row(depth: int, pred, share: float, real, groups, unit: str, discordant: int) -> GapRow:
    d = real - pred                                                                     # [P]
    ids, inv = np.unique(groups, return_inverse=True)
    sums = DocSums(metric=f"gap{depth}", doc_id=ids, y=np.bincount(inv, weights=d), n=np.bincount(inv),
                   y2=np.bincount(inv, weights=d * d), unit=unit)
    note = few_clusters(len(ids), unit)
    return GapRow(depth, len(d), float(pred.mean()), share, float(real.mean()), float(d.mean()),
                  None if note else cluster.cluster_se(sums), len(ids), discordant)


def _share(part: np.ndarray, whole: np.ndarray) -> float:
    tot = float(whole.sum())
    return float(part.sum()) / tot if tot > 0 else float("nan")


def branch_rows(tree_steps: pd.DataFrame, tree: TreeSpec, q: list[np.ndarray], n_q: list[int]) -> tuple:
    """The assumption on the tree arm alone: `BranchRow` per depth d >= 2 that a branch reaches."""
    rows = []
    paths = [()] + list(tree.paths)                                                    # node id -> path
    for d in range(2, tree.max_depth + 1):
        hit, assumed, grads = [], [], []
        for path_ids, acc in zip(tree_steps["tree_path"], tree_steps["accept_len"]):
            if acc < d - 1:
                continue
            v = int(path_ids[d - 1])                       # the accepted path's depth d-1 node
            if all(r == 0 for r in paths[v]):
                continue                                   # the chain's own path: observed, not assumed
            kids = tree.children(v)
            if len(kids) == 0:
                continue                                   # a leaf: the tree cannot reach d through it
            hit.append(acc >= d)
            assumed.append(sum(float(q[d - 1][tree.rank[c]]) for c in kids if tree.rank[c] < len(q[d - 1])))
            grads.append([int(tree.rank[c]) for c in kids])
        if not hit:
            continue
        n, a = len(hit), float(np.mean(assumed))
        qd = q[d - 1]
        # the assumed probability's sd: a sum of q_d's multinomial cells (the ranks of the children)
        ranks = sorted({r for g in grads for r in g})
        s = float(qd[ranks].sum()) if ranks else 0.0
        a_sd = float(np.sqrt(max(s * (1 - s), 0.0) / n_q[d - 1])) if n_q[d - 1] else float("nan")
        real = float(np.mean(hit))
        rows.append(BranchRow(d, n, real, a, a_sd, real - a, float(np.sqrt(real * (1 - real) / n + a_sd ** 2))))
    return tuple(rows)


def tree_check(shadow, tree_run, cov: Coverage, tree: TreeSpec) -> TreeCheck:
    """The check of the module docstring: `shadow` a SHADOW_TOPK run of the chain (runs.Run with
    topk_ids, target and position), `tree_run` the tree arm (with tree_path and position), `cov`
    the shadow's coverage (coverage.topk_coverage)."""
    D = tree.max_depth
    if D > cov.K or tree.topk > cov.topk:
        raise AtlasError(f"tree {tree.describe()}: deeper or wider than {shadow.path}'s K={cov.K}, "
                         f"SHADOW_TOPK={cov.topk}")
    for r, cols in ((shadow, ("topk_ids", "target", "position")), (tree_run, ("tree_path", "position"))):
        missing = [c for c in cols if c not in r.steps.columns or r.steps[c].isna().all()]
        if missing:
            raise AtlasError(f"{r.path}: no {', '.join(missing)} column, so the tree check cannot read it")
    q, n_q = zip(*(rank_table(cov, d) for d in range(1, D + 1)))
    sh = shadow.steps[shadow.steps["topk_ids"].notna()].reset_index(drop=True)
    pred, obs_part = per_position(sh, tree, list(q), cov.K, cov.topk)
    left = sh[KEY].assign(_i=np.arange(len(sh)))
    right = tree_run.steps[KEY + ["accept_len"]]
    m = left.merge(right, on=KEY)
    if m.empty:
        raise AtlasError(f"{shadow.path} vs {tree_run.path}: no matched positions on (doc_id, turn, position)")
    i = m["_i"].to_numpy()
    acc = m["accept_len"].to_numpy(np.int64)                                           # [P]
    cmap, unit = shadow.clusters
    doc = m["doc_id"].to_numpy(np.int64)
    groups = doc if cmap is None else np.asarray(cmap, np.int64)[doc]
    rows = []
    for d in range(1, D + 1):
        real = (acc >= d).astype(np.float64)
        exact = np.isin(pred[i, d - 1], (0.0, 1.0)) & (obs_part[i, d - 1] == pred[i, d - 1])
        disc = int(np.count_nonzero(exact & (real != pred[i, d - 1])))
        rows.append(_gap_row(d, pred[i, d - 1], _share(obs_part[i, d - 1], pred[i, d - 1]), real, groups, unit, disc))
    tok = _gap_row(0, 1.0 + pred[i].sum(1), _share(obs_part[i], pred[i]), 1.0 + acc, groups, unit, 0)
    return TreeCheck(tree.describe(), str(shadow.path), str(tree_run.path), tuple(rows), tok,
                     branch_rows(tree_run.steps, tree, list(q), list(n_q)), unit)
