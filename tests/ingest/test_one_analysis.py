"""Issue 20 section 1: one analysis for every kind of run. A step run and an engine run reduce to
the same per-unit table and go through the same estimate; ingest imports none of the analysis."""
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from atlas_ab.analysis.comparison import figure
from atlas_ab.analysis.metrics import compare, doc_sums
from atlas_ab.analysis.runs import export, load_run, load_units
from atlas_ab.analysis.stats import estimate
from atlas_ab.ingest import ingest
from tests.helpers.engine_fixtures import greedy_positions
from tests.helpers.synth import simulate_steps, write_run

METRICS = ("p1", "p2_uncond", "p2_cond", "tokens_per_step", "draft_acceptance_rate")


@pytest.mark.slow          # fresh interpreters (~1.5 s)
def test_ingest_imports_no_analysis():
    """The import graph: ingest (every source, the writer, the collector) loads nothing of the
    analysis and none of its statistics libraries, so analysis -> ingest is the only direction."""
    ingest = ("import sys, importlib\n"
              "from atlas_ab.ingest import SOURCES\n"
              "for m in list(SOURCES.values()) + ['atlas_ab.ingest', 'atlas_ab.ingest.tables', 'atlas_ab.ingest.write',"
              " 'atlas_ab.collect', 'atlas_ab.ingest.jsonio']:\n"
              "    importlib.import_module(m)\n"
              "bad = sorted(m for m in sys.modules if m.startswith(('atlas_ab.analysis', 'scipy', 'statsmodels')))\n"
              "print(','.join(bad))\n")
    # and the analysis reads runs, engine runs included, without the ingest (only the CLI verb
    # `ingest` calls into it)
    analysis = ("import sys\n"
                "import atlas_ab.analysis.runs.unit_runs, atlas_ab.analysis.runs.vllm_export\n"
                "import atlas_ab.analysis.report.build, atlas_ab.analysis.criteria.kinds\n"
                "print(','.join(sorted(m for m in sys.modules if m.startswith('atlas_ab.ingest'))))\n")
    # two fresh interpreters, side by side (neither waits on the other's imports)
    with ThreadPoolExecutor(2) as pool:
        outs = list(pool.map(lambda code: subprocess.run([sys.executable, "-c", code], capture_output=True,
                                                         text=True, check=True), (ingest, analysis)))
    assert [out.stdout.strip() for out in outs] == ["", ""]


def same(r1, r2) -> bool:
    """Equal Rates, every number bit for bit (NaN, the i.i.d. sd a token ratio lacks, included)."""
    return json.dumps(r1.to_dict(), sort_keys=True) == json.dumps(r2.to_dict(), sort_keys=True)


def _run(tmp, vary_k):
    df = simulate_steps(2400, p_cond=(0.61, 0.686), n_docs=12, turns=3, doc_sd=0.4, seed=5)
    if vary_k:  # some steps drafted one token only: the summary's joint of k and accept_len is unknown
        short = np.random.default_rng(12).random(len(df)) < 0.3
        sel = short & (df["k"] == 2)
        df.loc[sel, "accept_len"] = df.loc[sel, "accept_len"].clip(upper=1)
        df.loc[sel, "k"] = 1
    return write_run(tmp / "steps", greedy_positions(df), "arm")


@pytest.mark.parametrize("vary_k", [False, True])
def test_one_step_run_both_ways(tmp_path, vary_k):
    """ONE step run, read as steps and as per-request counts (`analysis export histogram`, then
    `ingest vllm`): the same figures, sds, cluster sds and bootstrap wherever the counts' grain
    has the figure; where it has not, a bound that holds the step run's value or a refusal."""
    steps_run = _run(tmp_path, vary_k)
    export(steps_run, "histogram", tmp_path / "arm.jsonl")
    engine = ingest("vllm", [tmp_path / "arm.jsonl"], tmp_path / "engine", arm="arm")
    assert (engine.steps == 0) == vary_k and engine.telemetry.grain == "requests"
    a, b = load_units(steps_run), load_units(engine.out)
    cells = load_run(steps_run).cells()
    for m in METRICS:
        fa, fb = figure(a, m, n_boot=300, seed=1), figure(b, m, n_boot=300, seed=1)
        # as steps: the per-unit table gives exactly the estimate of the cells (the step path)
        assert same(fa.rate, estimate(doc_sums(cells, m), "arm", n_boot=300, seed=1)), m
        if fb.status == "exact":
            assert same(fb.rate, fa.rate), m
        elif fb.status == "bounds":
            assert vary_k and fb.low <= fa.value <= fb.high, m
        else:
            assert vary_k and m == "p2_cond" and "joint" in fb.reason, m
    exact = {m for m in METRICS if figure(b, m).status == "exact"}
    assert exact == (set(METRICS) if not vary_k else {"p1", "tokens_per_step", "draft_acceptance_rate"})
    # a comparison through the one compare: either run as either arm
    d1, d2 = compare(a.units, b.units, "p1", n_boot=200), compare(cells, b.units, "p1", n_boot=200)
    assert d1.delta == d2.delta == 0 and d1.se == d2.se and d1.cluster_se == d2.cluster_se
