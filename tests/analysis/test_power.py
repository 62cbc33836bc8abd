"""Power and sample size by hand, and the pre-registration verdicts."""
import math
from pathlib import Path

import pytest

from atlas_ab import AtlasError
from atlas_ab.analysis.criteria import evaluate
from atlas_ab.analysis.stats import design_effect, difference, power_at, rate, solve
from atlas_ab.config.prereg import load_prereg

SHIPPED = Path(__file__).parents[2] / "analysis/prereg/refeed_p2_uncond.yaml"
Z80 = 0.8416212335729143     # Phi^-1(0.8)
Z975 = 1.959963984540054     # Phi^-1(0.975)


def test_sample_size_by_hand():
    r = solve(0.4182, 0.027, threshold_sd=3.0, power=0.8)
    # p q + p' q' = .4182*.5818 + .4452*.5548 = 0.24330876 + 0.24699696 = 0.49030572
    # n = (3 + 0.84162)^2 * 0.49030572 / 0.027^2 = 14.757829 * 0.49030572 / 0.000729 = 9925.7
    assert r.n_iid == math.ceil((3 + Z80) ** 2 * 0.49030572 / 0.027 ** 2) == 9926
    assert r.n_per_arm == 9926 and r.deff == 1.0
    # ICC 0.01 over 100 steps per document: deff = 1 + 99 * 0.01 = 1.99
    r = solve(0.4182, 0.027, threshold_sd=3.0, icc=0.01, m=100)
    assert r.deff == pytest.approx(1.99)
    assert r.n_per_arm == math.ceil((3 + Z80) ** 2 * 0.49030572 / 0.027 ** 2 * 1.99) == 19753
    # two-sided alpha 0.05 instead: z* = 1.95996
    r = solve(0.4182, 0.027, alpha=0.05)
    assert r.z_threshold == pytest.approx(Z975)
    assert r.n_per_arm == math.ceil((Z975 + Z80) ** 2 * 0.49030572 / 0.027 ** 2) == 5279


def test_reverse_n700():
    r = solve(0.4182, 0.027, threshold_sd=3.0, n=700)
    # sd = sqrt(0.49030572 / 700) = 0.026466; z = 0.027 / 0.026466 = 1.020
    assert r.se_at_n == pytest.approx(math.sqrt(0.49030572 / 700))
    assert r.z_at_n == pytest.approx(1.02, abs=0.005)
    # power = Phi(1.020 - 3) = Phi(-1.980) = 0.0239
    assert r.power_at_n == pytest.approx(0.0239, abs=5e-4)


def test_power_inputs_are_checked():
    with pytest.raises(AtlasError):
        solve(0.4, 0.0, threshold_sd=3)
    with pytest.raises(AtlasError):
        solve(0.99, 0.05, threshold_sd=3)
    with pytest.raises(AtlasError):
        design_effect(icc=1.5, m=10)
    assert power_at(0.027, 0.027 / 3, 3.0) == pytest.approx(0.5)


def test_shipped_prereg_is_the_seeds_criterion():
    s = load_prereg(SHIPPED).spec
    assert (s.primary_metric, s.direction, s.min_effect, s.threshold_sd) == ("p2_uncond", "increase", 0.015, 3.0)
    assert (s.arms.control, s.arms.treatment, s.decides, s.estimand) == ("catchup_on", "refeed_on", "binomial",
                                                                         "whole_arm")
    assert s.minimums() == {"min_n_per_arm": 10_000} and len(load_prereg(SHIPPED).sha256) == 64


def _diff(p0, n0, p1, n1):
    return difference(rate(p0, n0, "p2_uncond", "refeed_off"), rate(p1, n1, "p2_uncond", "refeed_on"))


def test_verdicts():
    pr = load_prereg(SHIPPED)
    # the reference engine's powered A/B: met at 3.9 sd
    v = evaluate(pr, _diff(0.4182, 10_400, 0.4452, 10_100))
    assert v.status == "MET" and v.z == pytest.approx(3.9, abs=0.05)
    # n = 700 per arm: below the registered minimum
    v = evaluate(pr, _diff(0.4182, 700, 0.4452, 700))
    assert v.status == "UNDERPOWERED" and "minimum" in v.reason
    # enough n to register, but power to see 0.015 at 3 sd, sd = 0.0069, is ~0.2
    v = evaluate(pr, _diff(0.4182, 10_400, 0.4232, 10_100))
    assert v.status == "UNDERPOWERED" and "power" in v.reason and v.power_at_min_effect < 0.8
    # well powered (sd ~ 0.0020) and the effect is absent: not met
    v = evaluate(pr, _diff(0.4182, 120_000, 0.4190, 120_000))
    assert v.status == "NOT MET" and v.power_at_min_effect > 0.8
    # large but in the wrong direction is not met either
    v = evaluate(pr, _diff(0.4452, 120_000, 0.4182, 120_000))
    assert v.status == "NOT MET" and "direction" in v.reason


def test_bad_prereg(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("hypothesis: x\nprimary_metric: p2_uncond\ndirection: up\n")
    with pytest.raises(AtlasError, match="missing field"):
        load_prereg(p)
    p.write_text(SHIPPED.read_text().replace("decides: binomial", "decides: vibes"))
    with pytest.raises(AtlasError, match="decides"):
        load_prereg(p)
