"""The distributional gate's KS test against scipy's, and its decisions."""
import numpy as np
import pytest
from scipy import stats

from atlas_ab.speculative import pit_gate


@pytest.mark.parametrize("n", [100, 400, 4096, 20_000])
@pytest.mark.parametrize("shift", [0.0, 0.02, 0.05])
def test_statistic_and_pvalue_match_scipy(n, shift):
    rng = np.random.default_rng(n)
    u = np.clip(rng.random(n) + shift * rng.random(n), 0, 1)
    d = pit_gate.ks_statistic(u)
    ref = stats.kstest(u, "uniform")
    assert d == pytest.approx(ref.statistic, abs=1e-12)
    # the asymptotic series with Stephens' correction, against the exact distribution of D_n
    assert pit_gate.ks_pvalue(d, n) == pytest.approx(stats.kstwo.sf(d, n), abs=0.012)


@pytest.mark.parametrize("n", [100, 400, 4096, 20_000])
def test_pvalue_is_close_where_the_gate_decides(n):
    for d in np.linspace(0.001, 3 / np.sqrt(n), 40):
        exact = stats.kstwo.sf(d, n)
        assert pit_gate.ks_pvalue(d, n) == pytest.approx(exact, abs=2e-4 if exact < 0.05 else 0.012)


def test_series_agree_where_they_meet():
    lo, hi = pit_gate.kolmogorov_sf(1.18 - 1e-9), pit_gate.kolmogorov_sf(1.18)
    assert lo == pytest.approx(hi, abs=1e-9)
    assert pit_gate.kolmogorov_sf(1.3581) == pytest.approx(0.05, abs=1e-4)   # the 5% point of K
    assert pit_gate.kolmogorov_sf(0.0) == 1.0 and pit_gate.kolmogorov_sf(5.0) < 1e-20


def test_decisions():
    rng = np.random.default_rng(0)
    ok = pit_gate.check(rng.random(2000), sequences=4)
    assert ok["passed"] is True and ok["status"] == "passed" and ok["checked_tokens"] == 2000
    bad = pit_gate.check(rng.random(2000) ** 1.3, sequences=4)
    assert bad["passed"] is False and bad["status"] == "failed" and "not draws" in bad["first_divergence"]["summary"]
    few = pit_gate.check(rng.random(pit_gate.MIN_N - 1), sequences=4)
    assert few["passed"] is None and few["status"] == "not run" and few["checked_sequences"] == 0
