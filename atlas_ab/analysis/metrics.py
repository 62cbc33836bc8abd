"""Acceptance metrics per arm, turn class, turn and document, with the definitions of
docs/telemetry.md (telemetry/acceptance.py: each metric's denominator and outcome).

All of them (and their uncertainty) follow from one sufficient statistic: the
count of steps per (doc_id, turn, k, accept_len) cell. That table is built with
one np.bincount over the rows and is tiny, so everything downstream is cheap.

Sampled runs (a `accept_prob` column) add the exact-probability metrics, whose y is no
longer 0/1, so they are summed per (doc_id, turn) instead (`Cells.expected`):
  p{i}_expected  y = [accept_len >= i-1] * accept_prob_i   over rows with k >= i
  alpha1         y = alpha1 = sum_x min(p_1(x), q_1(x))    over rows with k >= 1
accept_prob_i is the probability that the verifier accepts the draft of depth i, given the
drafts and that depths < i were accepted, so E[y | accepted through i-1] = P(accepted through i)
and p{i}_expected estimates p{i} without the noise of depth i's accept coin (and alpha1 without
that of the drafts). The accept indicators of depths < i stay: past the first rejection the
target's distribution is known live but not in replay (only the stored trajectory's is), so
the product of every depth's probability could not be the one definition both modes compute.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from atlas_ab import AtlasError
from atlas_ab.telemetry.acceptance import (  # noqa: F401  (the definitions, re-exported for the analysis)
    DAR,
    canonical,
    denominator,
    is_proportion,
    metric_depth,
    metric_names,
    outcome,
    parse_metric,
    weight,
)
from atlas_ab.telemetry.schema import TURN_CLASSES

HEADLINE = ("p1", "p2_uncond", "p2_cond", "tokens_per_step")
#: The exact-probability headline metrics of a sampled run (beside HEADLINE).
EXPECTED_HEADLINE = ("alpha1", "p2_expected")
#: The steps columns the exact-probability metrics read.
EXPECTED_COLUMNS = ("accept_prob", "alpha1")


@dataclass(frozen=True)
class Cells:
    """Step counts per (doc_id, turn, k, accept_len): the sufficient statistic.

    `clusters` maps doc_id -> the unit outcomes cluster in (index = doc_id), when documents
    are not independent (several windows cut from one source file); None: each document is
    its own cluster."""

    arm: str
    K: int
    table: pd.DataFrame  # columns doc_id, turn, k, accept_len, n
    clusters: np.ndarray | None = None
    cluster_unit: str = "document"
    # sampled runs: per (doc_id, turn), each exact-probability metric's "<m>:y", "<m>:y2", "<m>:n"
    expected: pd.DataFrame | None = None

    def _sub(self, keep) -> "Cells":
        e = self.expected
        return replace(self, table=self.table[keep(self.table["turn"])],
                       expected=None if e is None else e[keep(e["turn"])])

    def where(self, turn_class: str) -> "Cells":
        if turn_class == "all":
            return self
        if turn_class == "cold":
            return self._sub(lambda t: t == 0)
        if turn_class == "warm":
            return self._sub(lambda t: t >= 1)
        raise AtlasError(f"unknown turn class {turn_class!r} ({', '.join(TURN_CLASSES)})")

    def turn(self, turn: int) -> "Cells":
        return self._sub(lambda t: t == turn)


def _codes(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dense codes for non-negative ids: the ids themselves when compact, else factorize."""
    hi = int(x.max()) + 1
    if hi <= 4 * x.size + 1024:
        return x, np.arange(hi)
    codes, uniques = pd.factorize(x, sort=True)
    return codes, np.asarray(uniques)


def cell_counts(steps: pd.DataFrame, arm: str = "", K: int | None = None, clusters=None,
                cluster_unit: str = "document") -> Cells:
    """Count steps per (doc_id, turn, k, accept_len) with one bincount.

    K: the arm's configured K (a run's manifest knows it); default the largest k observed.
    clusters / cluster_unit: see Cells."""
    if len(steps) == 0:
        raise AtlasError(f"{arm or 'run'}: no steps")
    k = steps["k"].to_numpy(np.int64)
    a = steps["accept_len"].to_numpy(np.int64)
    dc, docs = _codes(steps["doc_id"].to_numpy(np.int64))
    tc, turns = _codes(steps["turn"].to_numpy(np.int64))
    seen = int(k.max())
    if K is None:
        K = seen
    elif seen > K:
        raise AtlasError(f"{arm or 'run'}: a step has k={seen}, above the arm's configured K={K}")
    w = K + 1
    size = len(docs) * len(turns) * w * w
    if size > 50_000_000:  # too sparse for a dense bincount: hash-group instead
        g = steps.groupby(["doc_id", "turn", "k", "accept_len"], sort=True).size()
        table = g.rename("n").reset_index()
    else:
        code = ((dc * len(turns) + tc) * w + k) * w + a
        counts = np.bincount(code, minlength=size)
        nz = np.flatnonzero(counts)
        a_, rest = nz % w, nz // w
        k_, rest = rest % w, rest // w
        t_, d_ = rest % len(turns), rest // len(turns)
        table = pd.DataFrame({"doc_id": docs[d_], "turn": turns[t_], "k": k_,
                              "accept_len": a_, "n": counts[nz]})
    for c in ("doc_id", "turn", "k", "accept_len", "n"):
        table[c] = table[c].astype(np.int64)
    expected = expected_sums(steps, K)
    if clusters is not None:
        clusters = np.asarray(clusters, dtype=np.int64)
        if int(table["doc_id"].max()) >= len(clusters):
            raise AtlasError(f"{arm or 'run'}: doc_id {int(table['doc_id'].max())} has no cluster in the "
                             f"manifest's map of {len(clusters)} documents")
    return Cells(arm=arm, K=K, table=table, clusters=clusters, cluster_unit=cluster_unit, expected=expected)


def sampled(steps: pd.DataFrame) -> bool:
    """Whether the steps carry exact acceptance probabilities (a sampled run)."""
    return "accept_prob" in steps.columns and bool(steps["accept_prob"].notna().any())


def _accept_probs(steps: pd.DataFrame, K: int) -> np.ndarray:
    """[rows, K] accept_prob per depth (NaN where the row has none)."""
    col = steps["accept_prob"].to_numpy()
    lens = np.array([0 if v is None or (isinstance(v, float) and np.isnan(v)) else len(v) for v in col])
    out = np.full((len(col), K), np.nan)
    if lens.sum():
        flat = np.concatenate([np.asarray(v, dtype=np.float64) for v, n in zip(col, lens) if n])
        rows = np.repeat(np.arange(len(col)), lens)
        depth = np.arange(lens.sum()) - np.repeat(np.cumsum(lens) - lens, lens)
        out[rows, depth] = flat
    return out


def row_values(steps: pd.DataFrame, metric: str, K: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(in the denominator [rows] bool, y [rows] float) of one metric, row by row (the definitions
    in this module's docstring)."""
    kind, i = parse_metric(metric)
    k, a = steps["k"].to_numpy(np.int64), steps["accept_len"].to_numpy(np.int64)
    if kind == "dar":
        raise AtlasError(f"{DAR} is a ratio of token totals: it has no outcome per step to pair")
    if kind in ("p", "cond", "tokens"):
        return denominator(metric, k, a), outcome(metric, a)
    if not sampled(steps):
        raise AtlasError(f"{metric} needs exact acceptance probabilities (a sampled run's accept_prob column)")
    if kind == "alpha":
        y = steps["alpha1"].to_numpy(np.float64)
        return (k >= 1) & ~np.isnan(y), np.nan_to_num(y)
    ap = _accept_probs(steps, max(int(k.max()), i) if K is None else max(K, i))[:, i - 1]
    den = k >= i
    if (den & (a >= i - 1) & np.isnan(ap)).any():
        raise AtlasError(f"{metric}: a step in its denominator has no accept probability at depth {i}")
    return den, np.where(a >= i - 1, np.nan_to_num(ap), 0.0)


def expected_names(K: int) -> list[str]:
    """The exact-probability metrics of a sampled arm of K."""
    return ["alpha1"] + [f"p{i}_expected" for i in range(1, K + 1)]


def expected_sums(steps: pd.DataFrame, K: int) -> pd.DataFrame | None:
    """Per (doc_id, turn): y, y^2 and n of every exact-probability metric (None: not a sampled run)."""
    if not sampled(steps):
        return None
    keys = steps[["doc_id", "turn"]].to_numpy(np.int64)
    groups, inv = np.unique(keys, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    G = len(groups)
    out = {"doc_id": groups[:, 0], "turn": groups[:, 1]}
    for m in expected_names(K):
        den, y = row_values(steps, m, K)
        w = den.astype(np.float64)
        out[f"{m}:y"] = np.bincount(inv, weights=w * y, minlength=G)
        out[f"{m}:y2"] = np.bincount(inv, weights=w * y * y, minlength=G)
        out[f"{m}:n"] = np.bincount(inv, weights=w, minlength=G).astype(np.int64)
    return pd.DataFrame(out)


@dataclass(frozen=True)
class DocSums:
    """Per-cluster sums for one metric: y (numerator), n (denominator rows), y2 (sum y^2).
    A cluster is a document unless the Cells say otherwise (`doc_id` then holds cluster ids)."""

    metric: str
    doc_id: np.ndarray
    y: np.ndarray
    n: np.ndarray
    y2: np.ndarray
    unit: str = "document"

    @property
    def Y(self) -> float:
        return float(self.y.sum())

    @property
    def N(self) -> int:
        return int(self.n.sum())

    @property
    def value(self) -> float:
        return self.Y / self.N if self.N else float("nan")

    @property
    def iid_se(self) -> float:
        """sd of the mean treating rows as independent: the binomial sd for 0/1 y,
        the delta-method sd of sum(y)/sum(x) otherwise (same formula: y is 0 off-denominator)."""
        N, R = self.N, self.value
        if N == 0:
            return float("nan")
        ss = float(self.y2.sum()) - 2 * R * self.Y + R * R * N
        return float(np.sqrt(max(ss, 0.0)) / N)


def _expected_doc_sums(cells: Cells, metric: str) -> DocSums:
    e = cells.expected
    if e is None:
        raise AtlasError(f"{cells.arm or 'run'}: {metric} needs exact acceptance probabilities, which only "
                         "a sampled run records (workload.sampling.temperature > 0)")
    if f"{metric}:y" not in e.columns:
        raise AtlasError(f"{cells.arm or 'run'}: {metric} needs depth {parse_metric(metric)[1]}, "
                         f"but this run never observed it (K={cells.K})")
    unit = e["doc_id"].to_numpy() if cells.clusters is None else cells.clusters[e["doc_id"].to_numpy()]
    n = e[f"{metric}:n"].to_numpy()
    docs, inv = np.unique(unit[n > 0], return_inverse=True)
    G = len(docs)
    pick = lambda c: np.bincount(inv, weights=e[f"{metric}:{c}"].to_numpy()[n > 0], minlength=G)  # noqa: E731
    return DocSums(metric=metric, doc_id=docs, y=pick("y"), n=pick("n").astype(np.int64), y2=pick("y2"),
                   unit=cells.cluster_unit)


def doc_sums(cells: "Cells | Units", metric: str) -> DocSums:
    """Per-document (y, n, y^2) sums of one metric, from the cell counts or the per-unit table (the
    exact-probability metrics: from the per-(doc_id, turn) sums)."""
    if isinstance(cells, Units):
        return unit_sums(cells, metric)
    kind, i = parse_metric(metric)
    if kind in ("expected", "alpha"):
        return _expected_doc_sums(cells, metric)
    t = cells.table
    k, a, c = t["k"].to_numpy(), t["accept_len"].to_numpy(), t["n"].to_numpy()
    den, yv, w = denominator(metric, k, a), outcome(metric, a), weight(metric, k)
    unit = t["doc_id"].to_numpy() if cells.clusters is None else cells.clusters[t["doc_id"].to_numpy()]
    docs, inv = np.unique(unit[den], return_inverse=True)
    cd = c[den].astype(np.float64)
    yd = yv[den]
    G = len(docs)
    if w is not None:
        return DocSums(metric=metric, doc_id=docs, y=np.bincount(inv, weights=cd * yd, minlength=G),
                       n=np.bincount(inv, weights=cd * w[den], minlength=G).astype(np.int64),
                       y2=np.full(G, np.nan), unit=cells.cluster_unit)
    return DocSums(metric=metric, doc_id=docs,
                   y=np.bincount(inv, weights=cd * yd, minlength=G),
                   n=np.bincount(inv, weights=cd, minlength=G).astype(np.int64),
                   y2=np.bincount(inv, weights=cd * yd * yd, minlength=G), unit=cells.cluster_unit)


# ---- the per-unit table: what every run reduces to -------------------------------------------

@dataclass(frozen=True)
class Units:
    """Per-unit counts (telemetry/schema.py COUNT_COLUMNS): a request of an engine run, a
    (doc_id, turn) of a step run, or the one global row of counters. Every metric is a ratio of
    their sums, so the cluster sandwich and the bootstrap need nothing finer.

    table: doc_id, turn, n, D, A, y2_tok, k_max, n_recorded, zero_max and the per-depth lists
    a_ge, k_ge, cond_den (length K; None items where the source does not determine them).
    clusters: the cluster unit (document, request) or None (global counters: no clusters).
    why_not: figure -> why the run's grain cannot give it (an engine run's manifest)."""

    arm: str
    K: int
    table: pd.DataFrame
    clusters: str | None = "document"
    cluster_map: np.ndarray | None = None     # doc_id -> cluster (a step run's workload map)
    why_not: dict = field(default_factory=dict)
    where: str = ""                           # the run directory, for messages

    @property
    def cluster_unit(self) -> str:
        return self.clusters or "global counter"


def _isnull(v) -> bool:
    return v is None or (isinstance(v, float) and np.isnan(v))


def units_from_steps(steps: pd.DataFrame, arm: str = "", K: int | None = None, clusters=None,
                     cluster_unit: str = "document") -> Units:
    """A step run as its per-unit table: one unit per (doc_id, turn), its verify steps summed."""
    v = steps[steps["k"] >= 1]
    K = int(v["k"].max()) if K is None and len(v) else (K or 0)
    rows = []
    for (d, t), g in v.groupby(["doc_id", "turn"], sort=True):
        k, a = g["k"].to_numpy(np.int64), g["accept_len"].to_numpy(np.int64)
        rows.append({"doc_id": int(d), "turn": int(t), "n": len(g), "D": int(k.sum()), "A": int(a.sum()),
                     "k_max": K, "n_recorded": None, "zero_max": None,
                     "a_ge": [int((a >= i).sum()) for i in range(1, K + 1)],
                     "k_ge": [int((k >= i).sum()) for i in range(1, K + 1)],
                     "cond_den": [int(((a >= i - 1) & (k >= i)).sum()) for i in range(1, K + 1)],
                     "y2_tok": float(((1 + a) ** 2).sum())})
    cmap = None if clusters is None else np.asarray(clusters, dtype=np.int64)
    return Units(arm=arm, K=K, table=pd.DataFrame(rows, columns=UNIT_COLUMNS), clusters=cluster_unit,
                 cluster_map=cmap)


UNIT_COLUMNS = ("doc_id", "turn", "n", "D", "A", "k_max", "n_recorded", "zero_max", "a_ge", "k_ge", "cond_den",
                "y2_tok")


def units_from_counts(df: pd.DataFrame, arm: str, clusters: str | None, why_not: dict | None = None,
                      where: str = "") -> Units:
    """An ingested counts table (COUNT_COLUMNS) as the per-unit table: read, nothing derived."""
    K = max([len(x) for col in ("drafted", "accepted", "cond_den") for x in df[col] if not _isnull(x)] or [0])

    def num(v):
        return None if _isnull(v) else int(v)

    def lst(x):
        return None if _isnull(x) else [None if _isnull(v) else int(v) for v in x]

    rows = [{"doc_id": r.doc_id, "turn": r.turn, "n": num(r.n_steps), "D": num(r.draft_tokens),
             "A": num(r.accepted_tokens), "k_max": num(r.k_max), "n_recorded": num(r.n_recorded),
             "zero_max": num(r.zero_max), "a_ge": lst(r.accepted), "k_ge": lst(r.drafted),
             "cond_den": lst(r.cond_den), "y2_tok": None if _isnull(r.y2_tok) else float(r.y2_tok)}
            for r in df.itertuples(index=False)]
    return Units(arm=arm, K=K, table=pd.DataFrame(rows, columns=UNIT_COLUMNS), clusters=clusters,
                 why_not=dict(why_not or {}), where=where)


def unit_column(units: Units, col: str, i: int | None = None) -> np.ndarray | None:
    """One count per unit (depth i of a per-depth list), or None when any unit lacks it."""
    vals = units.table[col].tolist()
    if any(_isnull(v) for v in vals):
        return None
    if i is None:
        return np.asarray(vals, np.float64)
    if any(i > len(x) or x[i - 1] is None for x in vals):
        return None
    return np.asarray([x[i - 1] for x in vals], np.float64)


#: the figure each metric kind is, by the name an engine run's manifest gives it (ingest/tables.py)
FIGURE = {"p": "p_i", "cond": "p_i_cond", "tokens": "tokens_per_step", "dar": DAR}


def unit_parts(units: Units, metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | str:
    """(y, n, y^2) per unit of one metric, or why the run's counts do not give them."""
    kind, i = parse_metric(metric)
    if kind in ("expected", "alpha"):
        return "exact acceptance probabilities are recorded by sampled step runs only"
    if kind == "p":
        y, n = unit_column(units, "a_ge", i), unit_column(units, "k_ge", i)
        y2 = y  # 0/1 outcomes: y^2 = y
    elif kind == "cond":
        y, n = unit_column(units, "a_ge", i), unit_column(units, "cond_den", i)
        y2 = y
    elif kind == "tokens":
        steps, A = unit_column(units, "n"), unit_column(units, "A")
        y, n = (None, None) if steps is None or A is None else (steps + A, steps)
        y2 = unit_column(units, "y2_tok")
        y2 = np.full(len(units.table), np.nan) if y2 is None else y2
    else:
        y, n = unit_column(units, "A"), unit_column(units, "D")
        y2 = np.full(len(units.table), np.nan)
    if y is None or n is None:
        why = units.why_not.get(FIGURE[kind]) or {
            "p": "no per-depth counts of k and accept_len",
            "cond": "needs the joint count of k and accept_len per step",
            "tokens": "the number of verify steps is not reported",
            "dar": "drafted and accepted token totals are not reported"}[kind]
        return why
    return y, n, y2


def unit_sums(units: Units, metric: str, pairing: str = "doc") -> DocSums:
    """Per-cluster (y, n, y^2) sums of one metric from the per-unit table: the same sums
    doc_sums gives from a step run's cells. Clusters: documents (or the run's cluster map),
    requests (pairing="request": (doc_id, turn)), or one for global counters."""
    parts = unit_parts(units, metric)
    if isinstance(parts, str):
        raise AtlasError(f"{units.where or units.arm}: {canonical(metric)} is not available: {parts}")
    y, n, y2 = parts
    t = units.table
    if pairing == "request":
        keys = t["doc_id"].to_numpy(np.int64) * 1_000_003 + t["turn"].to_numpy(np.int64)
    elif units.clusters is None:
        keys = np.zeros(len(t), np.int64)
    else:
        keys = t["doc_id"].to_numpy(np.int64)
        keys = keys if units.cluster_map is None else units.cluster_map[keys]
    live = n > 0  # a unit outside the metric's denominator is no cluster of it (as doc_sums drops it)
    docs, inv = np.unique(keys[live], return_inverse=True)
    G = len(docs)
    return DocSums(metric=metric, doc_id=docs, y=np.bincount(inv, weights=y[live], minlength=G),
                   n=np.bincount(inv, weights=n[live], minlength=G).astype(np.int64),
                   y2=np.bincount(inv, weights=y2[live], minlength=G), unit=units.cluster_unit)


def rates(cells: Cells, K: int | None = None) -> dict[str, float]:
    """Point values of every metric plus the step counts, for one subset of cells."""
    K = cells.K if K is None else K
    t = cells.table
    k, c = t["k"].to_numpy(), t["n"].to_numpy()
    out: dict[str, float] = {"n_steps": int(c.sum()), "n_serial": int(c[k == 0].sum()),
                             "n_verify": int(c[k >= 1].sum())}
    names = metric_names(K) + (expected_names(K) if cells.expected is not None else [])
    for m in names:
        s = doc_sums(cells, m)
        out[canonical(m)] = s.value
        out[f"n_{canonical(m)}"] = s.N
    return out


def realized(metric: str) -> str:
    """The realized metric an exact-probability one estimates: p{i}_expected -> p{i}, alpha1 -> p1."""
    kind, i = parse_metric(metric)
    if kind not in ("expected", "alpha"):
        raise AtlasError(f"{metric} is not an exact-probability metric")
    return canonical(f"p{i}")


def histogram(cells: Cells) -> pd.DataFrame:
    """Acceptance-length counts: rows k (verify steps only), columns accept_len 0..K."""
    t = cells.table[cells.table["k"] >= 1]
    h = t.pivot_table(index="k", columns="accept_len", values="n", aggfunc="sum", fill_value=0)
    return h.reindex(columns=range(cells.K + 1), fill_value=0).astype(np.int64)


@dataclass(frozen=True)
class ArmMetrics:
    """Every figure for one arm: per turn class, per turn, and the histogram."""

    arm: str
    K: int
    by_class: pd.DataFrame  # index all/cold/warm
    by_turn: pd.DataFrame   # index turn
    histogram: pd.DataFrame  # index (turn_class, k), columns accept_len

    def summary(self) -> str:
        cols = [c for c in ("n_verify", "n_serial", "p1", "p2_uncond", "p2_cond", "tokens_per_step")
                if c in self.by_class]
        return (f"arm {self.arm} (K={self.K})\n" + self.by_class[cols].to_string(float_format="%.4f")
                + "\n\nacceptance-length histogram\n" + self.histogram.to_string())

    __str__ = summary

    def to_dict(self) -> dict:
        return {"arm": self.arm, "K": self.K,
                "by_class": _records(self.by_class), "by_turn": _records(self.by_turn),
                "histogram": {f"{tc}/k={k}": [int(x) for x in row]
                              for (tc, k), row in self.histogram.iterrows()}}


def _records(df: pd.DataFrame) -> dict:
    return {str(i): {c: (None if pd.isna(v) else (int(v) if c.startswith("n_") else float(v)))
                     for c, v in row.items()} for i, row in df.iterrows()}


def _frame(rows: dict) -> pd.DataFrame:
    df = pd.DataFrame.from_dict(rows, orient="index")
    counts = [c for c in df.columns if c.startswith("n_")]
    df[counts] = df[counts].astype(np.int64)
    return df


def arm_metrics(cells: Cells) -> ArmMetrics:
    """All figures for one arm (K = the arm's max k)."""
    by_class = _frame({tc: rates(cells.where(tc), cells.K) for tc in TURN_CLASSES})
    turns = np.unique(cells.table["turn"].to_numpy())
    by_turn = _frame({int(t): rates(cells.turn(int(t)), cells.K) for t in turns})
    by_turn.index.name = "turn"
    hists = {tc: histogram(cells.where(tc)) for tc in TURN_CLASSES}
    hist = pd.concat(hists, names=["turn_class", "k"])
    return ArmMetrics(arm=cells.arm, K=cells.K, by_class=by_class, by_turn=by_turn, histogram=hist)


def require_depth(cells: Cells, metric: str, where: str) -> None:
    """A metric at depth i needs steps with k >= i; comparing at an unobserved depth is an error."""
    i = metric_depth(metric)
    if cells.K < i:
        raise AtlasError(f"{where}: {metric} needs depth {i}, but this run never observed it (K={cells.K})")
