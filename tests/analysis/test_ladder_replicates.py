"""A ladder timed in replicates: a K that does not pay is declared paying at most alpha of the time by the
random-effects interval, where the per-step interval of one job declares it far more often; a
single-replicate ladder is marked and writes no engine config without --allow-single-replicate."""
from __future__ import annotations

import json

import numpy as np
import pytest

from atlas_ab.analysis.ladder import ALLOW_SINGLE, FILES, SINGLE, SINGLE_NOTE, acceptance_of, fit, write_configs

# Ten documents, two K=1 verify steps each accepting (0, 1): E_1 = 1.5 in every cluster, so its se is 0 and the
# simulation below tests the timing half alone.
ACC = {1: acceptance_of(1, np.repeat(np.arange(10), 2), np.tile([0, 1], 10))}
T0, REPS, STEPS = 1.0, 3, 40
JOB_SD, STEP_SD = 0.08, 0.10      # a job's own level (graphs, host state, drift) and a step's, relative


def _cell(rng, mean: float) -> list[np.ndarray]:
    """REPS jobs' step times: each job's level drawn once (the random effect), then its steps around it."""
    return [mean * (1 + JOB_SD * rng.standard_normal()) * (1 + STEP_SD * rng.standard_normal(STEPS))
            for _ in range(REPS)]


def test_a_k_that_does_not_pay_is_declared_paying_at_most_alpha_of_the_time():
    """K=1's step costs exactly E_1 = 1.5 times plain decode's, so X(1, 1) = X(1, 0): K=1 does not pay.
    Over N = 400 seeded sweeps, each cell timed in 3 jobs (job sd 8%, step sd 10%, 40 steps a job):
      new  random effects over the 3 replicates (t of ~4 Welch df): "K=1 pays" is the lower bound of a 95%
           interval above 0, nominally 2.5% of sweeps; asserted <= alpha N + 2 binomial sds at alpha = 0.05
           (20 + 2 x 4.36 = 28.7, so <= 28): at most alpha, with the slack of the count's own noise;
      old  one job per cell (each cell's first replicate) with its per-step interval: its se (~1.6% of a mean)
           misses the job's 8%, so it declares K=1 paying in ~35% of sweeps; asserted >= 20% (80 of 400).
    (These seeds give 8 and 141 of 400.)"""
    n, new, old = 400, 0, 0
    for seed in range(n):
        rng = np.random.default_rng(seed)
        times = {(1, 0): _cell(rng, T0), (1, 1): _cell(rng, 1.5 * T0)}
        new += fit(ACC, times, n_boot=0).choices[1].pays
        old += fit(ACC, {c: t[0] for c, t in times.items()}, n_boot=0).choices[1].pays
    assert new <= 28, new
    assert old >= 80, old


def test_a_k_that_pays_is_found_by_the_replicates():
    """The same sweep with K=1's step at 1.2 x plain decode's: X rises 25%, three sds of the pooled log ratio
    (~0.08): found in most of 40 seeded sweeps (>= 20), so the interval is not merely wide."""
    found = sum(fit(ACC, {(1, 0): _cell(np.random.default_rng(s), T0),
                          (1, 1): _cell(np.random.default_rng(1000 + s), 1.2 * T0)}, n_boot=0).choices[1].pays
                for s in range(40))
    assert found >= 20, found


def _single():
    rng = np.random.default_rng(5)
    # K=1 clearly pays at B=4 in this one job per cell (its step 1.1 x plain's for 1.5 x the tokens)
    return fit(ACC, {(4, 0): 2.0 * (1 + 0.02 * rng.standard_normal(30)),
                     (4, 1): 2.2 * (1 + 0.02 * rng.standard_normal(30))}, n_boot=0)


def test_a_single_replicate_ladder_is_marked_and_writes_no_engine_config(tmp_path):
    res = _single()
    assert res.replicates == 1 and res.single_replicate and res.choices[4].pays
    text = res.summary()
    assert f"replicates per cell: 1: {SINGLE}" in text and f"({SINGLE}) K=1 pays" in text
    files = write_configs(res, tmp_path / "o")
    assert sorted(files) == ["json"]
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == [FILES["json"]]
    lad = json.loads((tmp_path / "o" / FILES["json"]).read_text())
    assert lad["verdict"] == SINGLE and lad["replicates"] == 1
    assert any(n.startswith(f"engine configs not written: {SINGLE}") and ALLOW_SINGLE in n for n in lad["notes"])


def test_allow_single_replicate_writes_the_configs_headed_by_the_flag(tmp_path):
    files = write_configs(_single(), tmp_path / "o", allow_single=True)
    assert sorted(files) == ["atlas", "json", "trtllm", "vllm"]
    v = json.loads(files["vllm"].read_text())            # vLLM's bare object: it refuses any other key
    assert v["num_speculative_tokens"] == 1 and set(v) == {"method", "num_speculative_tokens",
                                                            "num_speculative_tokens_per_batch_size"}
    note = (files["vllm"].parent / (files["vllm"].name + SINGLE_NOTE)).read_text()
    assert ALLOW_SINGLE in note and SINGLE in note
    for name in ("trtllm", "atlas"):
        first = files[name].read_text().splitlines()[0]
        assert first.startswith(f"# {SINGLE}") and ALLOW_SINGLE in first


def test_a_replicated_ladder_writes_its_configs_without_a_header(tmp_path):
    rng = np.random.default_rng(2)
    res = fit(ACC, {(4, 0): _cell(rng, 2.0), (4, 1): _cell(rng, 2.0)}, n_boot=0)
    assert res.replicates == REPS and not res.single_replicate
    assert "replicates per cell: 3 (random effects over replicates decide)" in res.summary()
    c = res.cells.iloc[0]
    assert (c.replicates, c.t_df, c.n_timed) == (3, 2.0, 3 * STEPS) and 0 <= c.i2 <= 1
    files = write_configs(res, tmp_path / "o")
    assert "atlas" in files and not files["atlas"].read_text().startswith(f"# {SINGLE}")


def test_the_bootstrap_cannot_decide_from_three_replicates():
    from atlas_ab import AtlasError
    rng = np.random.default_rng(3)
    times = {(1, 0): _cell(rng, T0), (1, 1): _cell(rng, T0)}
    with pytest.raises(AtlasError, match="the bootstrap cannot decide from 3 replicates per cell"):
        fit(ACC, times, n_boot=100, method="bootstrap")
    res = fit(ACC, times, n_boot=200, seed=1)          # reported beside the delta interval, hierarchical
    assert res.cells["X_boot_lo"].notna().all()


def test_a_cell_whose_replicates_disagree_says_so():
    """Plain decode's three jobs at 1.0, 1.0 and 1.5 ms (steps +-1%, se ~0.002 ms): Cochran's Q is in the
    thousands, I^2 ~100%, and the cell and a note say so; K=1's agree."""
    rng = np.random.default_rng(4)
    steps = lambda m: m * (1 + 0.01 * rng.standard_normal(STEPS))  # noqa: E731
    res = fit(ACC, {(1, 0): [steps(1.0), steps(1.0), steps(1.5)], (1, 1): [steps(1.5), steps(1.5), steps(1.5)]},
              n_boot=0)
    c = res.cells.set_index("K")
    assert bool(c.loc[0, "disagree"]) and c.loc[0, "i2"] > 0.99 and not bool(c.loc[1, "disagree"])
    assert "note: B=1 K=0: its 3 replicates disagree beyond their spreads" in res.summary()
    assert "(replicates disagree)" in res.summary()


def test_the_hierarchical_bootstrap_agrees_with_random_effects_at_twelve_replicates():
    """Twelve jobs a cell (job sd 8%, step sd 10%): the bootstrap (replicates drawn, then steps within each)
    gives X's se within 25% of the random-effects delta se (it lacks the (R - 1) / R and the t, ~4% and the
    draws' own ~3%), and may decide from 12 replicates."""
    rng = np.random.default_rng(6)
    reps = lambda m: [m * (1 + JOB_SD * rng.standard_normal())  # noqa: E731
                      * (1 + STEP_SD * rng.standard_normal(STEPS)) for _ in range(12)]
    res = fit(ACC, {(1, 0): reps(T0), (1, 1): reps(1.5 * T0)}, n_boot=1000, seed=2, method="bootstrap")
    ratio = res.cells["X_boot_se"] / res.cells["X_se"]
    assert ratio.between(0.75, 1.25).all(), ratio.tolist()
    assert set(res.cells["replicates"]) == {12}
