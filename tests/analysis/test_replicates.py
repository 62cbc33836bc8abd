"""Random effects over replicates and the ratio interval (analysis/stats/replicates.py): golden values on literal
tables worked by hand, statsmodels' DerSimonian-Laird where it clips nothing, and the refusals."""
from __future__ import annotations

import math

import numpy as np
import pytest

from atlas_ab import AtlasError
from atlas_ab.analysis.stats.replicates import log_ratio, random_effects, welch_df


def test_golden_random_effects_by_hand():
    """Three replicates y = (10, 12, 16) with within variances v = (1, 1, 4), worked by hand:

    w = 1/v = (1, 1, 1/4), sum w = 9/4; y_FE = (10 + 12 + 4) / (9/4) = 104/9
    Q = (10 - 104/9)^2 + (12 - 104/9)^2 + (16 - 104/9)^2 / 4 = (196 + 16 + 1600/4) / 81 = 612/81 = 68/9 = 7.5556
    c = sum w - sum w^2 / sum w = 9/4 - (33/16) / (9/4) = 9/4 - 11/12 = 4/3
    tau^2 = (Q - (R - 1)) / c = (68/9 - 2) x 3/4 = 25/6 = 4.16667
    w* = 1/(v + tau^2) = (6/31, 6/31, 6/49), sum w* = 774/1519 = 0.509546
    mean = sum w* y / sum w* = (132/31 + 96/49) / (774/1519) = 9444/774 = 1574/129 = 12.201550
    se_DL = sqrt(1519/774) = 1.400904
    se_HK^2 = sum w* (y - mean)^2 / ((R - 1) sum w*): y - mean = (-284, -26, 490)/129, so
      (6/31 (284^2 + 26^2) + 6/49 x 490^2) / 129^2 = (15741.677 + 29400) / 16641 = 2.712678, / (2 x 0.509546)
      = 2.661864, se_HK = 1.631521 > se_DL: HK decides
    interval: t(2 df, 0.975) = 4.302653; 12.201550 +- 4.302653 x 1.631521 = [5.181684, 19.221417]
    I^2 = (Q - 2) / Q = 50/68 = 0.735294; Cochran's p = P(chi^2_2 > 68/9) = exp(-34/9) = 0.022873 < 0.05: they
    disagree beyond their spreads.
    """
    r = random_effects([10, 12, 16], [1, 1, 4])
    assert r.q == pytest.approx(68 / 9, abs=1e-12)
    assert r.tau2 == pytest.approx(25 / 6, abs=1e-12)
    assert r.mean == pytest.approx(1574 / 129, abs=1e-12)
    assert r.se_dl == pytest.approx(math.sqrt(1519 / 774), abs=1e-12)
    assert r.se_hk == pytest.approx(1.6315205, abs=1e-6) and r.se == r.se_hk
    assert (r.n, r.df) == (3, 2.0)
    assert r.interval == pytest.approx((5.181684, 19.221417), abs=1e-5)
    assert r.i2 == pytest.approx(50 / 68, abs=1e-12)
    assert r.q_p == pytest.approx(math.exp(-34 / 9), abs=1e-12)
    assert r.disagree() and not r.disagree(alpha=0.01)
    assert "I^2 74%" in r.summary() and "disagree" in r.summary()


def test_agreeing_replicates_clip_tau2_and_floor_hk_at_dl():
    """y = (10, 10.5, 11), v = (1, 1, 1): Q = 0.25 + 0 + 0.25 = 0.5 < R - 1 = 2, so tau^2 = max(0, -1.5/2) = 0,
    I^2 = 0; mean 10.5, se_DL = sqrt(1/3) = 0.577350; se_HK^2 = 0.5 / (2 x 3) = 1/12 (0.288675) is below DL's,
    so DL's se decides (the floor); p = exp(-0.25) = 0.778801."""
    r = random_effects([10, 10.5, 11], [1, 1, 1])
    assert (r.tau2, r.i2) == (0.0, 0.0)
    assert r.mean == pytest.approx(10.5, abs=1e-12)
    assert r.se == pytest.approx(math.sqrt(1 / 3), abs=1e-12) and r.se_hk == pytest.approx(math.sqrt(1 / 12), abs=1e-12)
    assert r.q_p == pytest.approx(math.exp(-0.25), abs=1e-12) and not r.disagree()


def test_statsmodels_dl_agrees_where_it_clips_nothing():
    sm = pytest.importorskip("statsmodels.stats.meta_analysis")
    y, v = np.array([10.0, 12, 16]), np.array([1.0, 1, 4])
    ours, theirs = random_effects(y, v), sm.combine_effects(y, v, method_re="dl")
    assert ours.tau2 == pytest.approx(theirs.tau2, rel=1e-9)
    assert ours.mean == pytest.approx(theirs.mean_effect_re, rel=1e-9)
    assert ours.se_dl == pytest.approx(theirs.sd_eff_w_re, rel=1e-9)
    assert ours.se_hk == pytest.approx(math.sqrt(theirs.var_hksj_re), rel=1e-9)
    assert ours.i2 == pytest.approx(theirs.i2, rel=1e-9)
    # where the replicates agree better than their spreads, statsmodels 0.15's tau^2 goes negative; ours is 0
    agree = sm.combine_effects(np.array([10, 10.5, 11]), np.ones(3), method_re="dl")
    assert agree.tau2 < 0 and random_effects([10, 10.5, 11], [1, 1, 1]).tau2 == 0.0


def test_one_replicate_is_its_own_within_se_with_a_normal_quantile():
    r = random_effects([5.0], [0.25])
    assert (r.mean, r.se, r.df, r.single) == (5.0, 0.5, math.inf, True)
    assert r.interval == pytest.approx((5 - 1.959964 * 0.5, 5 + 1.959964 * 0.5), abs=1e-12)
    assert not r.disagree() and "one replicate" in r.summary()


def test_golden_log_ratio_with_welch_df():
    """r = 1.2 from parts (0.01, inf df) (acceptance), (0.02, 2 df), (0.01, 2 df) (two pooled timings):
    var = 0.04, se_log = 0.2; df = 0.04^2 / (0.02^2/2 + 0.01^2/2) = 0.0016 / 0.00025 = 6.4;
    t(6.4 df, 0.975) = 2.410315; interval 1.2 x exp(+-2.410315 x 0.2) = [0.741010, 1.943294]."""
    x = log_ratio(1.2, [(0.01, math.inf), (0.02, 2.0), (0.01, 2.0)])
    assert x.se_log == pytest.approx(0.2, abs=1e-12) and x.df == pytest.approx(6.4, abs=1e-12)
    assert (x.lo, x.hi) == pytest.approx((0.741010, 1.943294), abs=1e-6)
    assert x.se == pytest.approx(0.24, abs=1e-12) and x.holds(1.0)
    # every part normal: the normal quantile itself, exp(+-1.959964 x 0.1)
    n = log_ratio(2.0, [(0.004, math.inf), (0.006, math.inf)])
    assert n.df == math.inf and (n.lo, n.hi) == pytest.approx((2 * math.exp(-0.1959964), 2 * math.exp(0.1959964)),
                                                               abs=1e-12)
    assert welch_df([(0.0, 2.0), (0.01, math.inf)]) == math.inf


def test_bad_input_refused():
    with pytest.raises(AtlasError, match="one of each per replicate"):
        random_effects([1.0, 2.0], [1.0])
    with pytest.raises(AtlasError, match="within variance is not > 0"):
        random_effects([1.0, 2.0], [1.0, 0.0])
    with pytest.raises(AtlasError, match="must be positive and finite"):
        log_ratio(0.0, [(0.01, math.inf)])
