"""The acceptance regression gate (analysis/ci_gate.py, `analysis gate`): decisions and exit codes on
the ingested engine files shipped in tests/fixtures/gate, pairing, the margin, refusals, the pooled
ratio's sequence by hand, and its level under A/A data."""
import json
import math
from pathlib import Path

import numpy as np
import pytest

from atlas_ab import AtlasError
from atlas_ab.analysis.__main__ import main
from atlas_ab.analysis.ci_gate import Margin, _ratio_cs, gate
from atlas_ab.analysis.runs import load_units
from atlas_ab.analysis.stats import mixture_radius
from atlas_ab.ingest import ingest
from tests.helpers import gate_files
from tests.helpers.engine_fixtures import greedy_positions
from tests.helpers.synth import simulate_steps, write_run

FILES = Path(__file__).resolve().parents[1] / "fixtures" / "gate"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("gate")
    out = {}
    for engine in ("vllm", "sglang"):
        for arm in gate_files.ARMS:
            name = f"{engine}_{arm}"
            out[name] = str(ingest(engine, [FILES / f"{name}.jsonl"], d / name).out)
    return out


def test_the_shipped_files_are_what_the_helper_writes():
    for engine in ("vllm", "sglang"):
        for arm in gate_files.ARMS:
            want = "".join(json.dumps(r, sort_keys=True) + "\n" for r in gate_files.records(engine, arm))
            assert (FILES / f"{engine}_{arm}.jsonl").read_text() == want


def _gate(capsys, *argv):
    code = main(["gate", *argv])
    out = capsys.readouterr()
    return code, out.out.strip(), out.err.strip()


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("estimand", ["pooled", "per_request"])
def test_regression_no_regression_and_undecided_with_their_exit_codes(runs, capsys, engine, estimand):
    base = runs[f"{engine}_baseline"]
    code, out, _ = _gate(capsys, base, runs[f"{engine}_candidate_worse"], "--metric", "p1", "--max-drop", "0.01",
                         "--estimand", estimand)
    assert code == 1 and out.startswith("REGRESSION: worse by more than the margin 0.01") and "\n" not in out
    assert "paired by request (equal completion hashes on all 240 requests in both" in out
    code, out, _ = _gate(capsys, base, runs[f"{engine}_candidate_same"], "--metric", "p1", "--max-drop", "0.05",
                         "--estimand", estimand)
    assert code == 0 and out.startswith("PASS: no regression beyond the margin 0.05")
    code, out, _ = _gate(capsys, base, runs[f"{engine}_candidate_same"], "--metric", "p1", "--max-drop", "0.01",
                         "--estimand", estimand)
    assert code == 3 and out.startswith("UNDECIDED: the sequence holds -0.0100") and "more requests in both" in out
    words = {"pooled": "(pooled over verify steps)", "per_request": "(averaged over requests)"}[estimand]
    assert words in out


def test_json_and_the_numbers_behind_the_line(runs, capsys):
    code, out, _ = _gate(capsys, runs["vllm_baseline"], runs["vllm_candidate_worse"], "--max-drop", "1%", "--json")
    d = json.loads(out)
    assert code == 1 == d["exit_code"] and d["verdict"] == "REGRESSION" and d["estimand"] == "pooled"
    assert d["margin"] == pytest.approx(0.01 * d["baseline_value"], rel=1e-12)
    assert d["estimate"] == pytest.approx(d["candidate_value"] - d["baseline_value"], abs=1e-12)
    assert d["lower"] < d["estimate"] < d["upper"] < -d["margin"]
    # the pooled values are the runs' own p1 (accepted-at-depth-1 over verify steps with k >= 1)
    from atlas_ab.analysis.comparison import figure

    assert d["baseline_value"] == pytest.approx(figure(load_units(runs["vllm_baseline"]), "p1").value, abs=1e-12)


def test_per_depth_and_token_metrics(runs, capsys):
    code, out, _ = _gate(capsys, runs["vllm_baseline"], runs["vllm_candidate_same"], "--metric", "p2_cond",
                         "--max-drop", "0.05")
    assert code == 0 and "p2_cond (pooled over verify steps)" in out
    code, out, _ = _gate(capsys, runs["sglang_baseline"], runs["sglang_candidate_worse"], "--metric",
                         "tokens_per_step", "--max-drop", "1%")
    assert code == 1 and "1.00% of the baseline's" in out


def test_texts_that_differ_are_compared_unpaired_and_said_so(runs, capsys):
    code, out, _ = _gate(capsys, runs["vllm_baseline"], runs["vllm_candidate_sampled"], "--max-drop", "0.01")
    assert code == 3 and "over 240 requests unpaired (the completions differ in 240 of 240 requests" in out
    assert "more requests per run" in out
    code, out, _ = _gate(capsys, runs["vllm_baseline"], runs["vllm_candidate_sampled"], "--max-drop", "0.1")
    assert code == 0


def test_runs_of_different_workloads_are_refused(runs, tmp_path, capsys):
    recs = gate_files.records("vllm", "candidate_same")
    recs[3]["response"]["usage"]["prompt_tokens"] += 5          # another prompt at (doc 3, turn 0)
    f = tmp_path / "other.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    other = ingest("vllm", [f], tmp_path / "other").out
    code, out, err = _gate(capsys, runs["vllm_baseline"], str(other), "--max-drop", "0.01")
    assert code == 2 and out == "" and "\n" not in err
    assert "runs of different workloads: request (doc 3, turn 0) has" in err and "(1 of 240 requests differ)" in err
    a = write_run(tmp_path / "a", greedy_positions(simulate_steps(600, n_docs=6, turns=1, seed=1)), "a",
                  workload_hash="sha256:one")
    b = write_run(tmp_path / "b", greedy_positions(simulate_steps(600, n_docs=6, turns=1, seed=2)), "b",
                  workload_hash="sha256:two")
    code, _, err = _gate(capsys, str(a), str(b), "--max-drop", "0.01")
    assert code == 2 and "runs of different workloads (workload.hash" in err


def test_our_own_greedy_runs_pair_by_request(tmp_path):
    a = write_run(tmp_path / "a", greedy_positions(simulate_steps(3000, n_docs=30, turns=2, seed=1)), "a")
    b = write_run(tmp_path / "b", greedy_positions(simulate_steps(3000, p_cond=(0.3, 0.6), n_docs=30, turns=2,
                                                                  seed=2)), "b")
    res = gate(load_units(a), load_units(b), "p1", Margin.parse("0.02"))
    assert res.verdict == "REGRESSION" and res.pairing == "paired by request" and res.n_units == 60
    assert res.pairing_why == "greedy runs of one trajectory"


@pytest.mark.parametrize("text,value,relative", [("0.01", 0.01, False), ("1%", 0.01, True), ("2.5 %", 0.025, True),
                                                 ("0", 0.0, False), ("1e-3", 0.001, False)])
def test_the_margin_absolute_or_relative(text, value, relative):
    m = Margin.parse(text)
    assert (m.value, m.relative) == (pytest.approx(value, rel=1e-12), relative)
    assert m.absolute(0.5) == pytest.approx(value * (0.5 if relative else 1), rel=1e-12)


@pytest.mark.parametrize("text", ["-0.01", "100%", "abc", "nan", "1x", ""])
def test_a_bad_margin_is_one_line(text):
    with pytest.raises(AtlasError, match="--max-drop"):
        Margin.parse(text)


def test_the_pooled_ratio_sequence_by_hand():
    """At t units: the estimate is sum yb / sum nb - sum ya / sum na, the sd that of the influence
    values psi_i = (yb_i - Rb nb_i) / mean(nb) - (ya_i - Ra na_i) / mean(na) (ddof 1), the bounds
    the running intersection of estimate -+ the mixture radius (none before 10 units)."""
    rng = np.random.default_rng(5)
    na, nb = rng.integers(5, 30, 40).astype(float), rng.integers(5, 30, 40).astype(float)
    ya, yb = rng.binomial(na.astype(int), 0.6).astype(float), rng.binomial(nb.astype(int), 0.55).astype(float)
    est, lo, hi, sd = _ratio_cs([(yb, nb, 1.0), (ya, na, -1.0)], 0.05)
    for t in (10, 23, 40):
        Ra, Rb = ya[:t].sum() / na[:t].sum(), yb[:t].sum() / nb[:t].sum()
        psi = (yb[:t] - Rb * nb[:t]) / nb[:t].mean() - (ya[:t] - Ra * na[:t]) / na[:t].mean()
        assert est[t - 1] == pytest.approx(Rb - Ra, abs=1e-12)
        assert abs(psi.mean()) < 1e-12 and sd[t - 1] == pytest.approx(psi.std(ddof=1), rel=1e-9)
    r = mixture_radius(np.arange(1, 41), sd, 0.05, 500)
    r[:9] = np.inf
    np.testing.assert_allclose(lo, np.maximum.accumulate(est - r), rtol=1e-12)
    np.testing.assert_allclose(hi, np.minimum.accumulate(est + r), rtol=1e-12)
    assert math.isinf(lo[8]) and math.isfinite(lo[9])


def test_under_aa_requests_the_gate_sequences_keep_the_level():
    """300 A/A replicates of 200 paired requests (each 10..50 verify steps, its own rate from
    Beta(7, 3) shared by both runs): the pooled sequence (asymptotic) and the per-request one
    (hedged, on every tenth replicate) exclude the true difference 0 at most alpha + its MC error."""
    from atlas_ab.analysis.ci_gate import _bounded_cs

    alpha, reps, T = 0.05, 300, 200
    rng = np.random.default_rng(42)
    miss_pooled = miss_req = 0
    for i in range(reps):
        n = rng.integers(10, 51, T).astype(float)
        p = rng.beta(7, 3, T)
        ya, yb = rng.binomial(n.astype(int), p).astype(float), rng.binomial(n.astype(int), p).astype(float)
        _, lo, hi, _ = _ratio_cs([(yb, n, 1.0), (ya, n, -1.0)], alpha)
        miss_pooled += bool(((lo > 0) | (hi < 0)).any())
        if i % 10 == 0:
            lo2, hi2 = _bounded_cs(yb / n - ya / n, -1.0, 1.0, alpha)
            miss_req += bool(((lo2 > 0) | (hi2 < 0)).any())
    bound = alpha + 3 * math.sqrt(alpha * (1 - alpha) / reps)
    assert miss_pooled / reps <= bound and miss_req / (reps / 10) <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / 30)


def test_global_counters_and_a_bad_estimand_are_refused(tmp_path, capsys):
    from tests.helpers.engine_fixtures import vllm_prom

    (tmp_path / "before.prom").write_text(vllm_prom(100, 200, 90, [60, 30]))
    (tmp_path / "after.prom").write_text(vllm_prom(1100, 2200, 1390, [860, 530]))
    (tmp_path / "b.prom").write_text(vllm_prom(1000, 2000, 1400, [850, 550]))
    a = ingest("prometheus", [tmp_path / "before.prom", tmp_path / "after.prom"], tmp_path / "a").out
    b = ingest("prometheus", [tmp_path / "b.prom"], tmp_path / "b").out
    code, out, err = _gate(capsys, str(a), str(b), "--max-drop", "0.01")
    assert code == 2 and out == "" and "global counters have no requests: the gate needs per-request telemetry" in err
    with pytest.raises(SystemExit) as e:
        main(["gate", str(a), str(b), "--max-drop", "0.01", "--estimand", "median"])
    assert e.value.code == 2
