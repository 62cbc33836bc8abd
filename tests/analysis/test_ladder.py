"""The K ladder's throughput model: golden values on a literal table, the decision rules, and the
delta method against the bootstrap on seeded synthetic data."""
from __future__ import annotations

import math

import numpy as np
import pytest

from atlas_ab import AtlasError
from atlas_ab.analysis.ladder import acceptance_of, fit

# Ten documents, two K=1 verify steps each: documents 0-4 accept both drafts (tokens 2 + 2 = 4),
# 5-9 accept one of two (1 + 2 = 3). E_1 = 35 / 20 = 1.75; z_g = (T_g - 1.75 x 2) / 20 = +-0.025;
# var = 10/9 x 10 x 0.025^2 = 1/144, se(E_1) = 1/12.
CLUSTERS = np.repeat(np.arange(10), 2)
ACCEPT = np.array([1, 1] * 5 + [0, 1] * 5)
# Batched step times (ms): mean and se = sd / sqrt(2) = |a - b| / 2.
TIMES = {(1, 0): [1.0, 1.2], (1, 1): [1.5, 1.7], (4, 0): [2.0, 2.02], (4, 1): [2.2, 2.22]}


def _golden():
    acc = {1: acceptance_of(1, CLUSTERS, ACCEPT)}
    return fit(acc, {c: np.array(t) for c, t in TIMES.items()}, n_boot=0)


def test_golden_throughput_and_interval():
    res = _golden()
    c = res.cells.set_index(["B", "K"])
    assert c.loc[(1, 1), "E"] == pytest.approx(1.75, abs=1e-12)
    assert c.loc[(1, 1), "E_se"] == pytest.approx(1 / 12, abs=1e-12)
    # X(1, 0) = 1 x 1 / 1.1 ms = 909.0909 tokens/s, se = X x 0.1 / 1.1 = 82.6446
    assert c.loc[(1, 0), "X"] == pytest.approx(909.090909, abs=1e-5)
    assert c.loc[(1, 0), "X_se"] == pytest.approx(82.644628, abs=1e-5)
    # X(1, 1) = 1.75 / 1.6 ms = 1093.75; se_log = sqrt((1/12 / 1.75)^2 + (0.1 / 1.6)^2) = 0.0785737
    assert c.loc[(1, 1), "X"] == pytest.approx(1093.75, abs=1e-9)
    assert c.loc[(1, 1), "X_se"] == pytest.approx(85.939966, abs=1e-5)
    # 95% interval exp(+-1.959964 x 0.0785737): [937.6398, 1275.8514]
    assert c.loc[(1, 1), "X_lo"] == pytest.approx(937.639782, abs=1e-4)
    assert c.loc[(1, 1), "X_hi"] == pytest.approx(1275.851437, abs=1e-4)
    # X(4, 1) = 4 x 1.75 / 2.21 ms = 3167.4208
    assert c.loc[(4, 1), "X"] == pytest.approx(3167.420814, abs=1e-5)


def test_golden_gains_and_answers():
    res = _golden()
    one, four = res.choices[1], res.choices[4]
    # B=1: 1093.75 / 909.0909 - 1 = 0.203125; se_log = sqrt(0.0476190^2 + 0.0625^2 + 0.0909091^2) = 0.1201594;
    # interval 1.203125 x exp(+-1.959964 x 0.1201594) - 1 = [-0.049328, +0.522617]: holds 0
    assert one.over_0.value == pytest.approx(0.203125, abs=1e-12)
    assert one.over_0.se == pytest.approx(1.203125 * 0.1201594212, abs=1e-8)
    assert (one.over_0.lo, one.over_0.hi) == pytest.approx((-0.0493276438, 0.5226168681), abs=1e-8)
    assert (one.best, one.K, one.tied, one.pays) == (1, 0, (0,), False)
    assert one.verdict().startswith("no K pays: the best, K=1 +20.3%")
    # B=4: 3167.4208 / 1990.0498 - 1 = 0.591629; se_log = sqrt(0.0476190^2 + (0.01/2.21)^2 + (0.01/2.01)^2)
    # = 0.0480916; interval [+0.448459, +0.748950]: K=1 pays
    assert four.over_0.value == pytest.approx(0.5916289593, abs=1e-9)
    assert (four.over_0.lo, four.over_0.hi) == pytest.approx((0.4484589919, 0.7489502694), abs=1e-8)
    assert (four.best, four.K, four.tied, four.pays) == (1, 1, (), True)
    assert res.ladder == {1: 0, 4: 1}
    assert "| 4 | 1 | 1 |" in res.summary()


def test_ties_serve_the_smallest_k():
    # K=2 and K=3 both well above plain decode and within each other's intervals
    rng = np.random.default_rng(1)
    chain = lambda k: np.cumprod(rng.random((2000, k)) < 0.6, axis=1).sum(axis=1)  # noqa: E731
    acc = {k: acceptance_of(k, np.repeat(np.arange(40), 50), chain(k)) for k in (1, 2, 3)}
    # E ~ 1.6, 1.96, 2.18: K=3's step costs what its extra draft brings (12.2 ms ~ 11 x 2.18 / 1.96)
    times = {(8, 0): rng.normal(10.0, 0.5, 200), (8, 1): rng.normal(10.5, 0.5, 200),
             (8, 2): rng.normal(11.0, 2.0, 200), (8, 3): rng.normal(12.2, 2.0, 200)}
    c = fit(acc, times, n_boot=0).choices[8]
    assert c.pays and 3 in c.tied + (c.best,) and 2 in c.tied + (c.best,)
    assert c.K == min((c.best,) + c.tied) and c.K >= 2
    assert "tied with K=" in c.verdict()


def test_bad_input_refused():
    acc = {1: acceptance_of(1, CLUSTERS, ACCEPT)}
    with pytest.raises(AtlasError, match="no K=0 \\(plain decode\\) timing at batch width 4"):
        fit(acc, {(4, 1): np.array([1.0, 1.1])}, n_boot=0)
    with pytest.raises(AtlasError, match="no acceptance for K=2"):
        fit(acc, {(1, 0): np.array([1.0, 1.1]), (1, 2): np.array([1.0, 1.1])}, n_boot=0)
    few = {1: acceptance_of(1, np.arange(4), [0, 1, 1, 0])}
    with pytest.raises(AtlasError, match="only 4 documents"):
        fit(few, {(1, 0): np.array([1.0, 1.1]), (1, 1): np.array([1.0, 1.1])}, n_boot=0)
    with pytest.raises(AtlasError, match="accept_len outside 0..1"):
        acceptance_of(1, [0, 1], [0, 2])


def _synthetic(seed: int):
    """60 documents with their own acceptance rate (clustered), 400 steps per cell, skewed times."""
    rng = np.random.default_rng(seed)
    G, per = 60, 40
    rate = rng.beta(6, 4, G)                                                   # [G] per-document p
    docs = np.repeat(np.arange(G), per)
    acc = {}
    for k in (1, 2, 3):
        u = rng.random((G * per, k))                                           # [steps, k]
        a = np.cumprod(u < rate[docs, None], axis=1).sum(axis=1)
        acc[k] = acceptance_of(k, docs, a)
    times = {(b, k): (2.0 + 0.1 * b + 0.4 * k * (1 + b / 16)) * rng.gamma(20, 1 / 20, 400)
             for b in (1, 16) for k in (0, 1, 2, 3)}
    return acc, times


def test_delta_method_agrees_with_the_bootstrap_on_synthetic_data():
    acc, times = _synthetic(7)
    res = fit(acc, times, n_boot=1000, seed=3)
    c = res.cells
    # the se of X: the two agree within 15% in every cell (1,000 draws: the bootstrap se itself moves ~2%)
    ratio = c["X_boot_se"] / c["X_se"]
    assert ratio.between(0.85, 1.15).all(), ratio.tolist()
    # and so do the gains' ses (K vs K=0, where covariance does not enter; best vs next, where it does)
    for ch in res.choices.values():
        for g in (ch.over_0, ch.over_next):
            if g is not None:
                assert g.boot_se == pytest.approx(g.se, rel=0.15)
                assert g.boot_lo == pytest.approx(g.lo, abs=0.4 * g.se + 1e-9)


def test_delta_method_covers_on_synthetic_replicates():
    """Over 40 seeded replicates the delta interval of E_2 holds the true E_2 about 95% of the time."""
    true_rate = 0.6          # every document the same: E_2 = 1 + p + p^2
    hits = 0
    for s in range(40):
        rng = np.random.default_rng(100 + s)
        docs = np.repeat(np.arange(30), 20)
        a = np.cumprod(rng.random((600, 2)) < true_rate, axis=1).sum(axis=1)
        res = fit({2: acceptance_of(2, docs, a)}, {(1, 0): np.array([1.0, 1.1]), (1, 2): np.array([1.0, 1.1])},
                  n_boot=0)
        r = res.acceptance.iloc[0]
        hits += abs(r.E - (1 + true_rate + true_rate ** 2)) <= 1.959964 * r.E_se
    assert 34 <= hits <= 40
    assert math.isfinite(res.cells["X"].iloc[0])
