"""DRAFT_CONF economics against hand-computed values."""
import json
import math

import numpy as np
import pandas as pd
import pytest

from atlas_ab import AtlasError
from atlas_ab.analysis.economics import confidence_bins, economics, throughput, throughput_difference, timed
from atlas_ab.analysis.runs import load_run
from tests.helpers import synth


def _timed_run(root, arm, steps, mode="live", batch_width=1):
    root = synth.write_run(root, steps, arm)
    m = json.loads((root / "manifest.json").read_text())
    m.update(mode=mode, waves={"total": 1, "batch_width": batch_width}, levers={"num_drafts": 2})
    (root / "manifest.json").write_text(json.dumps(m))
    return load_run(root)


def _steps(n_docs=12, per_doc=50, ms_spec=2.0, ms_serial=1.0, gate_below=0.0, seed=0):
    """Steps whose chain confidence c is uniform; accept_len 2 when c > 0.6, 1 when c > 0.3, else 0;
    a gated step (c < gate_below) is serial (k = 0) and commits one token."""
    rng = np.random.default_rng(seed)
    n = n_docs * per_doc
    c = rng.random(n).astype(np.float32)
    a = np.where(c > 0.6, 2, np.where(c > 0.3, 1, 0))
    gated = c < gate_below
    k = np.where(gated, 0, 2)
    a = np.where(gated, 0, a)
    return pd.DataFrame({
        "doc_id": np.repeat(np.arange(n_docs), per_doc), "turn": 0, "step": np.tile(np.arange(per_doc), n_docs),
        "k": k.astype(np.int32), "accept_len": a.astype(np.int32),
        "step_ms": np.where(gated, ms_serial, ms_spec).astype(np.float32),
        "committed": [[1] * int(x) for x in np.where(gated, 1, 1 + a)],
        "conf": [[float(x), float(x) + 0.01] for x in c]})


def test_throughput_is_a_clustered_ratio(tmp_path):
    s = _steps()
    r = _timed_run(tmp_path / "r", "a", s)
    t = throughput(r)
    per = s.assign(tok=s["committed"].map(len), sec=s["step_ms"] / 1e3).groupby("doc_id")[["tok", "sec"]].sum()
    R = per["tok"].sum() / per["sec"].sum()
    G = len(per)
    se = math.sqrt(G / (G - 1) * ((per["tok"] - R * per["sec"]) ** 2).sum()) / per["sec"].sum()
    assert t.value == pytest.approx(R) and t.se == pytest.approx(se)


def test_throughput_needs_live_timings_of_one_sequence(tmp_path):
    with pytest.raises(AtlasError, match="replay run carries no step times"):
        throughput(_timed_run(tmp_path / "r", "a", _steps(), mode="replay"))
    with pytest.raises(AtlasError, match="batch width 16"):
        throughput(_timed_run(tmp_path / "b", "a", _steps(), batch_width=16))


def test_step_times_of_different_loops_are_not_compared(tmp_path):
    """A run-ahead chunk's steps share its mean time: such a run is compared only with its kind."""
    a = _timed_run(tmp_path / "a", "draft_conf_000", _steps())
    b = _timed_run(tmp_path / "b", "draft_conf_066", _steps(gate_below=0.66, seed=1))
    throughput_difference(a, b)                  # manifests without a loop: both step by step
    m = json.loads((a.path / "manifest.json").read_text())
    (a.path / "manifest.json").write_text(json.dumps({**m, "loop": "run_ahead"}))
    a = load_run(a.path)
    with pytest.raises(AtlasError, match=r"step times from different loops: .*a \(run_ahead\), .*b \(step_by_step\)"):
        throughput_difference(a, b)
    with pytest.raises(AtlasError, match="one runner.run_ahead and runner.fuse_bookkeeping setting"):
        economics(a, [b])


def test_step_times_with_and_without_fused_bookkeeping_are_not_compared(tmp_path):
    """Compiled bookkeeping (runtime/fusion.py) shortens a step: a fused run is compared only with fused ones."""
    runs = [_timed_run(tmp_path / n, arm, _steps(seed=s)) for n, arm, s in (("a", "draft_conf_000", 0),
                                                                           ("b", "draft_conf_066", 1))]
    for r, fused in zip(runs, (True, False)):
        m = json.loads((r.path / "manifest.json").read_text())
        (r.path / "manifest.json").write_text(json.dumps({**m, "loop": "run_ahead", "fused": fused}))
    a, b = (load_run(r.path) for r in runs)
    with pytest.raises(AtlasError, match=r"different loops: .*a \(run_ahead \+ fused\), .*b \(run_ahead\)"):
        throughput_difference(a, b)


def test_break_even_and_tau_star(tmp_path):
    # verify 2 ms, serial 1 ms: break-even E[1 + a] >= 2. The bins above 0.6 give 3 tokens, (0.3, 0.6]
    # gives 2 (pays, just), below 0.3 gives 1: tau* = 0.3 (bin edges of 0.1).
    ungated = _timed_run(tmp_path / "u", "draft_conf_000", _steps())
    gated = _timed_run(tmp_path / "g", "draft_conf_050", _steps(gate_below=0.5, seed=1))
    e = economics(ungated, [gated])
    assert (e.c_spec_ms, e.c_serial_ms, e.break_even) == (2.0, 1.0, 2.0)
    assert e.tau_star == pytest.approx(0.3)
    b = confidence_bins(ungated, 2.0)
    assert list(b["pays"]) == [False, False, False, True, True, True, True, True, True, True]
    d = throughput_difference(ungated, gated)
    assert d.delta == pytest.approx(throughput(gated).value - throughput(ungated).value)
    assert d.se is not None and d.se > 0


def _by_file(run, per_file=3):
    m = json.loads((run.path / "manifest.json").read_text())
    m["workload"] = {**m.get("workload", {}), "cluster_unit": "source file",
                     "doc_cluster": (np.arange(36) // per_file).tolist()}
    (run.path / "manifest.json").write_text(json.dumps(m))
    return load_run(run.path)


def test_tokens_per_second_clusters_by_source_file_and_its_relative_sd_carries_both_arms(tmp_path):
    """36 documents cut 3 to a file: 12 clusters, not 36. The registered relative difference
    b/a - 1 is judged with the delta-method sd of both arms (stats.ratio_difference_se), by hand here."""
    from atlas_ab.analysis.criteria import judge
    from atlas_ab.config.prereg import load_prereg

    a = _by_file(_timed_run(tmp_path / "a", "draft_conf_000", _steps(n_docs=36, seed=0)))
    b = _by_file(_timed_run(tmp_path / "b", "draft_conf_066", _steps(n_docs=36, gate_below=0.66, seed=1)))
    assert throughput(a).n_clusters == 12 and throughput(a, (None, "document")).n_clusters == 36
    sums = []
    for r in (a, b):
        t = timed(r).steps
        s = t.assign(tok=t["committed"].map(len), sec=t["step_ms"].astype(float) / 1e3,
                     file=t["doc_id"] // 3).groupby("file")[["tok", "sec"]].sum()
        sums.append(s)
    A, B = (s["tok"].sum() / s["sec"].sum() for s in sums)
    u = (sums[0]["tok"] - A * sums[0]["sec"]) / sums[0]["sec"].sum()
    v = (sums[1]["tok"] - B * sums[1]["sec"]) / sums[1]["sec"].sum()
    se = math.sqrt(12 / 11 * (((v - (B / A) * u) / A) ** 2).sum())
    pre = tmp_path / "q5.yaml"
    pre.write_text(json.dumps({"hypothesis": "h", "primary_metric": "tokens_per_second", "direction": "decrease",
                               "min_effect": 0.05, "relative": True, "threshold_sd": 3.0, "decides": "cluster",
                               "arms": {"control": "draft_conf_000", "treatment": "draft_conf_066"},
                               "min_n_per_arm": 100}))
    j = judge(load_prereg(pre), [a, b], n_boot=0)
    assert j.verdict.delta == pytest.approx(B / A - 1) and j.verdict.se == pytest.approx(se, rel=1e-9)
    assert j.verdict.clusters == "12 source files"
    assert j.sensitivity.verdict is None and "no matched-positions estimand" in j.sensitivity.note


def test_warm_up_steps_are_left_out_of_throughput_and_costs(tmp_path):
    s = _steps()
    first = s["step"] == 0
    s["warmup_ms"] = np.where(first, 25.0, np.nan).astype(np.float32)     # the wave's first verify
    s["step_ms"] = s["step_ms"].where(~first, np.nan)
    t = throughput(_timed_run(tmp_path / "r", "a", s))
    kept = s[~first]
    assert (t.n_steps, t.n_warmup) == (len(kept), 12) and t.warmup_seconds == pytest.approx(12 * 0.025)
    assert t.value == pytest.approx(kept["committed"].map(len).sum() / (kept["step_ms"].sum() / 1e3))
    s.loc[3, "warmup_ms"] = np.nan                                         # untimed and not warm-up
    s.loc[3, "step_ms"] = np.nan
    with pytest.raises(AtlasError, match=r"step_ms is null on 1 step\(s\) that are not warm-up"):
        throughput(_timed_run(tmp_path / "n", "a", s))


def test_a_warm_up_sized_outlier_refuses_the_run(tmp_path):
    # 12 documents x 50 verify steps of 2.0 ms. The rule: a step above 5x the median of its kind is an
    # outlier; outliers refuse the run from 1% of its step time on.
    s = _steps()
    s.loc[(s.doc_id == 5) & (s.step == 20), "step_ms"] = 11.0          # one stall at 5.5x: 0.9% of the time
    assert throughput(_timed_run(tmp_path / "stall", "a", s)).n_steps == 600
    s.loc[(s.doc_id == 3) & (s.step == 0), "step_ms"] = 1400.0         # a capture inside step_ms
    # outliers: 1400 and 11 ms, (1400 + 11) / (598 x 2 + 1400 + 11) = 54.1% of the time
    with pytest.raises(AtlasError) as e:
        throughput(_timed_run(tmp_path / "capture", "a", s))
    assert str(e.value) == (
        f"{tmp_path / 'capture'}: doc 3 turn 0 step 0 took 1400.0 ms, 700x the median verify step (2.000 ms); "
        "2 step(s) above 5x their kind's median make 54.1% of the step time: warm-up inside step_ms? "
        "(a run made before warm-up was timed apart in warmup_ms: re-run it)")
    s["warmup_ms"] = np.float32(np.nan)                               # a run that timed its warm-up apart
    with pytest.raises(AtlasError, match=r"54\.1% of the step time: .*its warm-up was timed apart: a busy host"):
        throughput(_timed_run(tmp_path / "new", "a", s))
    g = _steps(gate_below=0.5, seed=1)                                 # serial steps have their own median
    g.loc[g.k == 0, "step_ms"] = 0.2
    first_serial = g[g.k == 0].groupby("doc_id").head(1).index               # each document's first one
    g.loc[first_serial, "step_ms"] = 1.5                                       # 7.5x the serial median
    with pytest.raises(AtlasError, match=r"7x the median serial step \(0\.200 ms\)"):
        economics(_timed_run(tmp_path / "u", "draft_conf_000", _steps()), [_timed_run(tmp_path / "g", "g", g)])


def _in_process(run, process):
    m = json.loads((run.path / "manifest.json").read_text())
    m["host"] = {"hostname": "h", "process": process}
    (run.path / "manifest.json").write_text(json.dumps(m))
    return load_run(run.path)


def _replicated_prereg(path, replicates=3, threshold_sd=2.0):
    path.write_text(json.dumps({"hypothesis": "h", "primary_metric": "tokens_per_second", "direction": "decrease",
                                "min_effect": 0.05, "relative": True, "threshold_sd": threshold_sd,
                                "decides": "cluster", "replicates": replicates, "min_n_per_arm": 100,
                                "arms": {"control": "draft_conf_000", "treatment": "draft_conf_066"}}))
    return path


def test_a_replicated_tokens_per_second_registration_is_judged_on_the_replicates_t(tmp_path):
    """Three runs an arm, each its own process: the ratio of the arms' random-effects pools
    (ladder/throughput.throughput_ratio), its sd widened by the t of the pooled df at the registered
    level (t_q / z with q = Phi(threshold_sd)), worked here from the per-run values."""
    from scipy import stats as st

    from atlas_ab.analysis.criteria import judge
    from atlas_ab.analysis.stats.replicates import random_effects
    from atlas_ab.config.prereg import load_prereg

    runs = {"draft_conf_000": [], "draft_conf_066": []}
    for i in range(3):
        for arm, gate, ms in (("draft_conf_000", 0.0, 2.0 + 0.1 * i), ("draft_conf_066", 0.66, 2.0 - 0.05 * i)):
            r = _timed_run(tmp_path / f"{arm}_{i}", arm, _steps(gate_below=gate, ms_spec=ms, seed=10 * i + len(arm)))
            runs[arm].append(_in_process(r, f"h:{i}:0.0"))
    pools = {a: random_effects([throughput(r).value for r in rs], [throughput(r).se ** 2 for r in rs])
             for a, rs in runs.items()}
    c, t = pools["draft_conf_000"], pools["draft_conf_066"]
    ratio = t.mean / c.mean
    se_log = math.sqrt((c.se / c.mean) ** 2 + (t.se / t.mean) ** 2)
    assert c.df == t.df == 2
    j = judge(load_prereg(_replicated_prereg(tmp_path / "q5r.yaml")), [*runs["draft_conf_000"],
                                                                     *runs["draft_conf_066"]], n_boot=0)
    v = j.verdict
    parts = [((c.se / c.mean) ** 2, 2.0), ((t.se / t.mean) ** 2, 2.0)]   # Welch-Satterthwaite
    df = sum(p for p, _ in parts) ** 2 / sum(p * p / d for p, d in parts)
    want_sd = ratio * se_log * st.t.ppf(st.norm.cdf(2.0), df) / 2.0
    assert v.delta == pytest.approx(ratio - 1, rel=1e-12) and v.se == pytest.approx(want_sd, rel=1e-9)
    assert v.n_control == sum(throughput(r).n_steps for r in runs["draft_conf_000"])
    assert "throughput_replicated" in j.details and j.details["throughput_replicated"]["df"] == pytest.approx(df)


def test_a_replicated_registration_refuses_too_few_runs_and_runs_of_one_process(tmp_path):
    from atlas_ab.analysis.criteria import judge
    from atlas_ab.config.prereg import load_prereg

    pre = load_prereg(_replicated_prereg(tmp_path / "q5r.yaml"))
    a = [_in_process(_timed_run(tmp_path / f"a{i}", "draft_conf_000", _steps(seed=i)), f"h:{i}:0.0") for i in range(3)]
    b = [_in_process(_timed_run(tmp_path / f"b{i}", "draft_conf_066", _steps(gate_below=0.66, seed=9 + i)), "h:7:0.0")
         for i in range(3)]
    with pytest.raises(AtlasError, match="control arm 'draft_conf_000' has 2 run\\(s\\); the registration asks for "
                                         ">= 3 replicates, each its own process"):
        judge(pre, [*a[:2], *b], n_boot=0)
    with pytest.raises(AtlasError, match="treatment arm 'draft_conf_066': its 3 runs are not each in their own "
                                         "process \\(two ran in one process\\)"):
        judge(pre, [*a, *b], n_boot=0)


def test_the_claims_groups_keep_an_arms_replicates_and_refuse_two_runs_of_one_process(tmp_path):
    from atlas_ab.analysis.claims.groups import group_by_model

    apart = [_in_process(_timed_run(tmp_path / f"a{i}", "draft_conf_000", _steps(seed=i)), f"h:{i}:0.0")
             for i in range(2)]
    (g,) = group_by_model(apart)
    assert [r.arm for r in g.runs] == ["draft_conf_000"] * 2
    same = [_in_process(_timed_run(tmp_path / f"s{i}", "draft_conf_000", _steps(seed=i)), "h:1:0.0") for i in range(2)]
    with pytest.raises(AtlasError, match="arm 'draft_conf_000' appears in more than one run \\(replicates of an arm "
                                         "must each be their own process\\)"):
        group_by_model(same)
