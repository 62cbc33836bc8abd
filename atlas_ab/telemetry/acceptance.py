"""The acceptance metrics of docs/telemetry.md: their names, what each counts, and their values.

Every metric is "mean of y over the steps in its denominator":
  p{i}        y = [accept_len >= i]   over steps with k >= i
  p{i}_cond   y = [accept_len >= i]   over steps with accept_len >= i-1 and k >= i
  tokens      y = 1 + accept_len      over steps with k >= 1
  draft_acceptance_rate   accepted over drafted tokens: y = accept_len over steps with k >= 1,
              each step weighing k in the denominator (`weight`; what engines report)
Sampled runs add the exact-probability metrics p{i}_expected and alpha1, whose y is a probability
read from the steps' accept_prob / alpha1 columns (analysis/metrics/cells.py, `row_values`); their
names are parsed here, their values computed there.
`denominator`, `outcome` and `weight` are that table, the one definition the run side (its summary and
progress line) and the analysis (analysis/metrics/, analysis/comparison/paired.py) both use. numpy only:
the run side imports this module, never the analysis.
"""
from __future__ import annotations

import re

import numpy as np

from atlas_ab import AtlasError

#: the one timing metric (analysis/economics.py): committed tokens per second of step time
THROUGHPUT = "tokens_per_second"
#: accepted over drafted tokens, the figure engines report
DAR = "draft_acceptance_rate"
_METRIC = re.compile(r"^p(\d+)(_uncond|_cond|_expected)?$")


def parse_metric(name: str) -> tuple[str, int]:
    """'p2_uncond' -> ('p', 2); 'p2_cond' -> ('cond', 2); 'tokens_per_step' -> ('tokens', 1);
    'draft_acceptance_rate' -> ('dar', 0); 'p2_expected' -> ('expected', 2); 'alpha1' -> ('alpha', 1)."""
    if name in ("tokens_per_step", "tokens"):
        return "tokens", 1
    if name in (DAR, "acceptance_rate"):
        return "dar", 0
    if name == "alpha1":
        return "alpha", 1
    m = _METRIC.match(name)
    if not m or int(m.group(1)) < 1:
        raise AtlasError(f"unknown metric {name!r} (p1, p2_uncond, p{{i}}, p{{i}}_cond, tokens_per_step, {DAR}; "
                         "sampled runs: p{i}_expected, alpha1)")
    depth = int(m.group(1))
    if m.group(2) == "_expected":
        return "expected", depth
    if m.group(2) == "_cond" and depth > 1:
        return "cond", depth
    return "p", depth  # p1_cond is p1 by definition


def metric_depth(name: str) -> int:
    return parse_metric(name)[1]


def is_proportion(name: str) -> bool:
    """Unconditional rates are binomial proportions; p_cond and tokens are ratios."""
    return parse_metric(name)[0] == "p"


def canonical(metric: str) -> str:
    """Stable column name: p2 -> p2_uncond (the reference engine's name), p1_cond -> p1."""
    kind, i = parse_metric(metric)
    if kind == "tokens":
        return "tokens_per_step"
    if kind == "dar":
        return DAR
    if kind == "alpha":
        return "alpha1"
    if kind == "expected":
        return f"p{i}_expected"
    if kind == "cond":
        return f"p{i}_cond"
    return "p2_uncond" if i == 2 else f"p{i}"


def metric_names(K: int) -> list[str]:
    """Every metric an arm of K observes: p1..pK, p2_cond..pK_cond, tokens_per_step."""
    return ([f"p{i}" for i in range(1, K + 1)] + [f"p{i}_cond" for i in range(2, K + 1)]
            + ["tokens_per_step"])


def denominator(metric: str, k: np.ndarray, accept_len: np.ndarray) -> np.ndarray:
    """Which steps (by their k and accept_len) are in the metric's denominator."""
    kind, i = parse_metric(metric)
    if kind == "p":
        return k >= i
    if kind == "cond":
        return (k >= i) & (accept_len >= i - 1)
    return k >= 1


def outcome(metric: str, accept_len: np.ndarray) -> np.ndarray:
    """Each step's y (meaningful on the denominator's steps only)."""
    kind, i = parse_metric(metric)
    if kind == "tokens":
        return (1 + accept_len).astype(np.float64)
    if kind == "dar":
        return accept_len.astype(np.float64)
    return (accept_len >= i).astype(np.float64)


def weight(metric: str, k: np.ndarray) -> np.ndarray | None:
    """Each step's count in the denominator when it is not 1 (draft_acceptance_rate: its k drafted
    tokens, which are not independent draws, so that metric has no i.i.d. sd); None otherwise."""
    return k.astype(np.float64) if parse_metric(metric)[0] == "dar" else None


def histogram_rates(hist: np.ndarray) -> dict[str, float]:
    """Every metric's value and denominator from a [k, accept_len] count matrix (the run's
    summary and its progress line: pooled over documents, so no uncertainty)."""
    hist = np.asarray(hist)
    k, a = np.nonzero(hist)
    if len(k) == 0:
        return {"n_steps": 0}
    c = hist[k, a].astype(np.float64)
    out: dict[str, float] = {"n_steps": int(c.sum()), "n_serial": int(c[k == 0].sum()),
                             "n_verify": int(c[k >= 1].sum())}
    for m in metric_names(int(k.max())):
        den = denominator(m, k, a)
        n = float(c[den].sum())
        out[canonical(m)] = float((c[den] * outcome(m, a[den])).sum()) / n if n else float("nan")
        out[f"n_{canonical(m)}"] = int(n)
    return out


def step_histogram(k: np.ndarray, accept_len: np.ndarray, max_k: int) -> np.ndarray:
    """The [k, accept_len] count matrix of steps (histogram_rates' input)."""
    hist = np.zeros((max_k + 1, max_k + 1), dtype=np.int64)
    np.add.at(hist, (np.asarray(k, dtype=np.int64), np.asarray(accept_len, dtype=np.int64)), 1)
    return hist
