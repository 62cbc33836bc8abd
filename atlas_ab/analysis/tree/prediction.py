"""`coverage RUN --tree SPEC`: what a static draft tree would accept, predicted from a SHADOW_TOPK run.

A linear run logs, at each depth i of its chain, the drafter's top-k candidates and the target's
token. Over the steps whose drafts 1..i-1 were accepted (coverage.py's denominator), the rank of
the target's token among the candidates estimates q_i(r) = P(the target's token is the drafter's
rank-r candidate at depth i | the prefix is right), r = 0..k-1 (the rest: absent);
q_i(0) = p{i}_cond for greedy drafts.

A tree (config/tree.py) reaches depth i when the target's greedy path runs through one of its
depth-i nodes. The target's path is one sequence, so at most one node per depth lies on it, and
node v, with path (r_1, .., r_i), lies on it with probability

    P(v) = q_1(r_1) q_2(r_2) ... q_i(r_i)                                          (*)

THE ASSUMPTION (*) rests on: at a node whose prefix is right, the target's rank among the drafter's
candidates is distributed as the linear chain's at that depth, whichever ranks the prefix took.
At depth 1 that is no assumption (the root's candidates are the chain's first head). Along the
all-rank-0 path it is exact too (that path is the chain). Past a branch of rank >= 1 it is an
extrapolation: the chain never drafted after its own rank-1 candidate. The drafter's forward
there is handed the same hidden (its parent's output: the handoff) with a token its own head
ranked lower, and its candidates may cover the target less well than the chain's after a
rank-0 token; where a measured tree falls short of (*) at depth >= 2, that is the place to look
(the handoff cliff, Q1).

Then p_i(tree) = P(depth i reached) = sum over the tree's depth-i nodes of P(v), p_i_cond =
p_i / p_{i-1}, and tokens per verify step = 1 + sum_i p_i (the accepted drafts plus the bonus;
a turn's end, which cuts a step short, is not modelled). Sds: the delta method on the per-depth
rank frequencies (multinomial at each depth; the conditional frequencies at different depths
are asymptotically independent, the likelihood factorising over depths).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from atlas_ab import AtlasError
from atlas_ab.analysis.tree.coverage import Coverage
from atlas_ab.config.tree import TreeSpec, linear


@dataclass(frozen=True)
class DepthPrediction:
    depth: int
    p: float            # P(depth reached)
    se: float
    p_cond: float       # p / p of the depth above (nan where that is 0)

    def to_dict(self) -> dict:
        return {"depth": self.depth, "p": self.p, "sd": self.se, "p_cond": self.p_cond}


@dataclass(frozen=True)
class TreePrediction:
    tree: str
    turns: str
    depths: tuple[DepthPrediction, ...]
    tokens_per_step: float
    tokens_se: float
    linear: str                # the chain it is compared with
    linear_tokens: float
    diff: float                # tokens_per_step - linear_tokens
    diff_se: float

    def summary(self) -> str:
        lines = [f"tree prediction ({self.turns} turns): {self.tree}",
                 "assumes a right prefix's target rank is distributed as the chain's at that depth, "
                 "whatever ranks the prefix took (exact at depth 1 and along rank 0)", "",
                 "| depth | p (reached) | sd | p_cond |", "|---|---|---|---|"]
        lines += [f"| {d.depth} | {d.p:.4f} | {d.se:.4f} | {d.p_cond:.4f} |" for d in self.depths]
        lines.append(f"\ntokens per verify step: {self.tokens_per_step:.4f} (sd {self.tokens_se:.4f}); "
                     f"{self.linear}: {self.linear_tokens:.4f}; difference {self.diff:+.4f} (sd {self.diff_se:.4f})")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"tree": self.tree, "turns": self.turns, "depths": [d.to_dict() for d in self.depths],
                "tokens_per_step": self.tokens_per_step, "tokens_sd": self.tokens_se, "linear": self.linear,
                "linear_tokens": self.linear_tokens, "diff": self.diff, "diff_sd": self.diff_se}


def rank_table(cov: Coverage, depth: int, turns: str = "all") -> tuple[np.ndarray, int]:
    """(q [topk] the rank frequencies at `depth`, n the steps they are over)."""
    hits = np.array([cov.at(depth, j, turns).hits for j in range(1, cov.topk + 1)], dtype=np.float64)
    n = cov.at(depth, 1, turns).n
    return np.diff(np.concatenate([[0.0], hits])) / n, n


def _reach(tree: TreeSpec, q: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
    """p_i for i = 1..D and its gradient: grads[i-1][d] = d p_i / d q_{d+1} [topk]."""
    D = tree.max_depth
    p = np.zeros(D)
    grads = [[np.zeros_like(q[d]) for d in range(len(q))] for _ in range(D)]
    for path in tree.paths:
        i = len(path)
        terms = np.array([q[d][r] for d, r in enumerate(path)])
        p[i - 1] += terms.prod()
        for d, r in enumerate(path):
            grads[i - 1][d][r] += np.prod(np.delete(terms, d))
    return p, grads


def _var(grad: list[np.ndarray], q: list[np.ndarray], n: list[int]) -> float:
    """Delta-method variance of a function with gradient `grad` over the per-depth multinomials."""
    return float(sum(g @ ((np.diag(qd) - np.outer(qd, qd)) / nd) @ g for g, qd, nd in zip(grad, q, n) if nd))


def predict_tree(cov: Coverage, tree: TreeSpec, turns: str = "all", linear_k: int | None = None) -> TreePrediction:
    """The prediction (*) of the module docstring for `tree`, and the same for the linear chain of
    `linear_k` drafts (default: the tree's depth), from one coverage table."""
    D = tree.max_depth
    lk = D if linear_k is None else int(linear_k)
    deepest = max(D, lk)
    if deepest > cov.K:
        raise AtlasError(f"tree {tree.describe()}: depth {deepest} is past the run's K={cov.K} "
                         "(no coverage measured there)")
    if tree.topk > cov.topk:
        raise AtlasError(f"tree {tree.describe()}: rank {tree.topk - 1} is past the run's SHADOW_TOPK={cov.topk}")
    q, n = [], []
    for d in range(1, deepest + 1):
        try:
            qd, nd = rank_table(cov, d, turns)
        except KeyError:
            raise AtlasError(f"coverage: no {turns!r} steps reach depth {d}") from None
        q.append(qd)
        n.append(nd)
    p, g = _reach(tree, q)
    lp, lg = _reach(linear(lk), q)
    depths = tuple(DepthPrediction(i + 1, float(p[i]), float(np.sqrt(_var(g[i], q, n))),
                                   float(p[i] / (p[i - 1] if i else 1.0)) if (i == 0 or p[i - 1] > 0) else float("nan"))
                   for i in range(D))
    g_tok = [sum(gi[d] for gi in g) for d in range(deepest)]
    g_lin = [sum(gi[d] for gi in lg) for d in range(deepest)]
    tok, lin = 1.0 + float(p.sum()), 1.0 + float(lp.sum())
    return TreePrediction(tree.describe(), turns, depths, tok, float(np.sqrt(_var(g_tok, q, n))),
                          f"linear K={lk}", lin, tok - lin,
                          float(np.sqrt(_var([a - b for a, b in zip(g_tok, g_lin)], q, n))))
