"""McNemar by hand; the oracle probe; paired matching between runs."""
import math

import numpy as np
import pandas as pd
import pytest

from atlas_ab import AtlasError
from atlas_ab.analysis.comparison import between_runs, oracle_probe
from atlas_ab.analysis.runs import Run
from atlas_ab.analysis.stats import mcnemar


def pairs(a, b, c, d):
    """a both, b second only, c first only, d neither."""
    first = [1] * a + [0] * b + [1] * c + [0] * d
    second = [1] * a + [1] * b + [0] * c + [0] * d
    return np.array(first, bool), np.array(second, bool)


def test_mcnemar_by_hand():
    r = mcnemar(*pairs(30, 15, 5, 50))
    assert (r.both, r.b, r.c, r.neither, r.n_pairs) == (30, 15, 5, 50, 100)
    # exact two-sided: 2 * P(X <= 5), X ~ Bin(20, 1/2)
    #   = 2 * (1 + 20 + 190 + 1140 + 4845 + 15504) / 2**20 = 43400 / 1048576
    assert r.p_exact == pytest.approx(43400 / 1048576, rel=1e-9)
    # z = (b - c)/sqrt(b + c) = 10/sqrt(20)
    assert r.z == pytest.approx(10 / math.sqrt(20))
    # chi2 = (b - c)^2/(b + c) = 100/20; corrected (|b - c| - 1)^2/(b + c) = 81/20
    assert r.chi2 == pytest.approx(5.0) and r.chi2_cc == pytest.approx(4.05)
    # chi2 with 1 df: P(X > x) = erfc(sqrt(x/2))
    assert r.p_chi2 == pytest.approx(math.erfc(math.sqrt(5.0 / 2)))
    assert r.p_chi2_cc == pytest.approx(math.erfc(math.sqrt(4.05 / 2)))
    # rates over the pairs: first 35/100, second 45/100
    assert (r.first_rate, r.second_rate) == (0.35, 0.45)
    # the sign: second better -> z > 0; swap the roles and it flips
    assert mcnemar(*pairs(30, 5, 15, 50)).z == pytest.approx(-10 / math.sqrt(20))


def test_mcnemar_never_reports_the_exact_statistic_as_z():
    r = mcnemar(*pairs(0, 9, 1, 0))
    assert r.z == pytest.approx(8 / math.sqrt(10))  # not min(b, c) = 1
    assert "z=+2.5" in r.summary()


def fake_run(df, arm="x", path="/runs/x"):
    return Run(path=path, arm=arm, manifest=None, steps=df, files=())


def test_oracle_probe_subset_and_rates():
    df = pd.DataFrame({
        "doc_id": [0] * 8, "turn": [0] * 8, "step": range(8),
        "k":          [2, 2, 2, 2, 2, 1, 2, 2],
        "accept_len": [2, 1, 1, 0, 1, 1, 2, 1],
        # eligible: accept_len >= 1 and k >= 2 (rows 0,1,2,4,6,7); row 7 is null (not probed)
        "oracle_hit2": pd.array([True, True, True, None, False, True, True, None], dtype="boolean"),
    })
    probe = oracle_probe(fake_run(df))
    t = probe.test
    # probed rows 0,1,2,4,6: real = [1,0,0,0,1], oracle = [1,1,1,0,1]
    assert (t.n_pairs, t.both, t.b, t.c, t.neither) == (5, 2, 2, 0, 1)
    assert probe.real_p2_cond == 2 / 5 and probe.oracle_p2_cond == 4 / 5
    assert probe.real_p2_cond_all == 2 / 6 and probe.n_cond_all == 6


def test_oracle_probe_needs_the_column():
    df = pd.DataFrame({"doc_id": [0], "turn": [0], "step": [0], "k": [2], "accept_len": [1]})
    with pytest.raises(AtlasError, match=r"without the ORACLE_P2 probe.*\+arm=oracle_p2"):
        oracle_probe(fake_run(df))


def test_between_runs_matches_on_position():
    a = pd.DataFrame({"doc_id": [0, 0, 0, 1], "turn": [0, 0, 0, 0], "step": [0, 1, 2, 0],
                      "position": [10, 13, 16, 10], "k": [2, 2, 1, 2], "accept_len": [2, 0, 1, 1]})
    # run B took other steps: position 13 is absent, 11 exists only in B
    b = pd.DataFrame({"doc_id": [0, 0, 0, 1], "turn": [0, 0, 0, 0], "step": [0, 1, 2, 0],
                      "position": [10, 11, 16, 10], "k": [2, 2, 2, 2], "accept_len": [1, 2, 2, 2]})
    r = between_runs(fake_run(a, "A"), fake_run(b, "B"), depth=2)
    # matched with k >= 2 in both: (0,0,10): A hit, B miss; (1,0,10): A miss, B hit.
    # (0,0,16) has k = 1 in A: depth 2 unobserved there, not a pair.
    assert (r.n_pairs, r.b, r.c) == (2, 1, 1)
    with pytest.raises(AtlasError, match="depth 3 never observed"):
        between_runs(fake_run(a, "A"), fake_run(b, "B"), depth=3)
