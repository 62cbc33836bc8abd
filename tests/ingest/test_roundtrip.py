"""Our runs exported as vLLM reports them, ingested back: the same analysis numbers, exactly,
where the grain carries them, and a refusal naming why where it does not."""
import numpy as np
import pytest

from atlas_ab import AtlasError
from atlas_ab.analysis.__main__ import main
from atlas_ab.analysis.comparison import between_runs, compare_runs, figure
from atlas_ab.analysis.metrics import cell_counts, doc_sums
from atlas_ab.analysis.runs import export, load_run, load_units
from atlas_ab.analysis.stats import estimate
from atlas_ab.ingest import ingest
from tests.helpers.engine_fixtures import greedy_positions
from tests.helpers.synth import simulate_steps, write_run

HEAD = ("p1", "p2_uncond", "p2_cond", "tokens_per_step")
ERR = "atlas_ab.analysis: error: "


def native(tmp, name, p_cond, seed, serial=0.0, vary_k=False):
    df = simulate_steps(2400, p_cond=p_cond, n_docs=12, turns=3, doc_sd=0.4, serial_frac=serial, seed=seed)
    if vary_k:  # some steps drafted only one token (adaptive drafting, a trimmed schedule)
        short = np.random.default_rng(seed + 7).random(len(df)) < 0.3
        df.loc[short & (df["k"] == 2), "accept_len"] = df.loc[short & (df["k"] == 2), "accept_len"].clip(upper=1)
        df.loc[short & (df["k"] == 2), "k"] = 1
    return write_run(tmp / name, greedy_positions(df), name)


@pytest.fixture(scope="module")
def arms(tmp_path_factory):
    d = tmp_path_factory.mktemp("rt")
    return d, native(d, "catchup_on", (0.61, 0.686), 1), native(d, "refeed_on", (0.64, 0.72), 2)


def roundtrip(d, run, fmt, tag):
    f = d / f"{run.name}.{tag}.jsonl"
    export(run, fmt, f)
    return ingest("vllm", [f], d / f"{run.name}.{tag}", arm=run.name).out


def rates(run):
    """One arm's headline figures with the binomial/delta and clustered sds."""
    cells = cell_counts(run.steps, run.arm)
    return {m: estimate(doc_sums(cells, m), run.arm, n_boot=0) for m in HEAD}


def assert_same(native_cmp, other_cmp):
    for m in HEAD:
        a, b = native_cmp.headline[m], other_cmp.headline[m]
        for x, y in ((a.control, b.control), (a.treatment, b.treatment)):
            assert (x.value, x.n, x.se, x.cluster_se) == (y.value, y.n, y.se, y.cluster_se), m
        assert (a.delta, a.se, a.cluster_se) == (b.delta, b.se, b.cluster_se), m
        assert a.bootstrap.se == b.bootstrap.se


def test_detailed_roundtrip_is_exact(arms):
    d, a, b = arms
    ia, ib = roundtrip(d, a, "vllm-detailed", "det"), roundtrip(d, b, "vllm-detailed", "det")
    A, B, IA, IB = (load_run(p, optional=("position",)) for p in (a, b, ia, ib))
    assert_same(compare_runs(A, B, n_boot=200), compare_runs(IA, IB, n_boot=200))
    # positions reconstructed from prompt_tokens + commits: the same pairs, the same McNemar
    m0, m1 = between_runs(A, B, 2), between_runs(IA, IB, 2)
    assert m0.to_dict() == m1.to_dict() and m0.n_pairs > 500
    assert (IA.steps[["doc_id", "turn", "step", "k", "accept_len", "position"]].to_numpy()
            == A.steps.sort_values(["doc_id", "turn", "step"])[
                ["doc_id", "turn", "step", "k", "accept_len", "position"]].to_numpy()).all()
    t = IA.telemetry
    assert t.grain == "steps" and "position_pairing" in t.exact and t.clusters == "doc_id"
    assert "n_serial" in t.not_available


def test_histogram_roundtrip_same_rates_no_positions(arms, capsys):
    d, a, b = arms
    ha, hb = roundtrip(d, a, "histogram", "hist"), roundtrip(d, b, "histogram", "hist")
    A, B, HA, HB = (load_run(p) for p in (a, b, ha, hb))
    # k was fixed (num_draft_tokens == steps x num_spec_tokens): the joint is exact, p_cond and
    # the document-clustered sd included; the order of steps does not enter any rate
    assert_same(compare_runs(A, B, n_boot=200), compare_runs(HA, HB, n_boot=200))
    t = HA.telemetry
    assert t.grain == "requests" and {"p_i", "p_i_cond", "cluster_sd"} <= set(t.exact)
    assert {"position_pairing", "step_order"} <= set(t.not_available)
    code = main(["mcnemar", str(ha), str(hb)])
    err = [l for l in capsys.readouterr().err.splitlines() if "warning" not in l]
    assert code == 2 and len(err) == 1 and err[0].startswith(ERR)
    assert "no step positions to pair on" in err[0] and "pairs RUN_A RUN_B" in err[0]
    # pairing at the request level instead
    assert main(["pairs", str(ha), str(hb), "--metric", "p2", "--bootstrap", "100", "--json"]) == 0
    assert '"matched": 36' in capsys.readouterr().out


def test_histogram_with_varying_k_gives_what_is_exact(tmp_path, capsys):
    a = native(tmp_path, "var", (0.6, 0.7), 3, vary_k=True)
    h = roundtrip(tmp_path, a, "histogram", "hist")
    A = load_run(a)
    # no step table: the joint of (k, accept_len) is unknown when k varied
    with pytest.raises(AtlasError, match="has no step table"):
        load_run(h)
    c = load_units(h)
    r = rates(A)
    p1, tok = figure(c, "p1"), figure(c, "tokens_per_step")
    assert p1.status == tok.status == "exact"
    assert (p1.value, p1.n) == (r["p1"].value, r["p1"].n)
    assert p1.iid_se == pytest.approx(r["p1"].se, rel=1e-12)
    assert p1.cluster_se == pytest.approx(r["p1"].cluster_se, rel=1e-12)
    assert tok.value == pytest.approx(r["tokens_per_step"].value, rel=1e-12)
    assert tok.iid_se == pytest.approx(r["tokens_per_step"].se, rel=1e-12)
    p2 = figure(c, "p2")
    true = r["p2_uncond"].value
    assert p2.status == "bounds" and p2.low <= true <= p2.high and p2.high - p2.low < 0.4
    cond = figure(c, "p2_cond")
    assert cond.status == "refused" and "joint count" in cond.reason
    # the report says what it can no longer compute
    assert main(["report", str(h), "--out", str(tmp_path / "rep"), "--bootstrap", "0"]) == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "bounds" in md and "not available from this grain: needs the joint count" in md
    code = main(["compare", str(h), str(h)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith(ERR) and "grain 'requests' has no step table" in err[-1]


def test_serial_steps_are_not_recorded_so_positions_are_refused(tmp_path):
    a = native(tmp_path, "gated", (0.6, 0.7), 4, serial=0.1)
    i = roundtrip(tmp_path, a, "vllm-detailed", "det")
    A, I = load_run(a), load_run(i)
    # vLLM records only steps that carried drafts; the rates do not count serial steps either
    ra, ri = rates(A), rates(I)
    for m in HEAD:
        assert (ra[m].value, ra[m].n) == (ri[m].value, ri[m].n)
    why = I.telemetry.why_not("position_pairing")
    assert "without drafts were not recorded" in why
    with pytest.raises(AtlasError, match="no step positions to pair on"):
        load_run(i, columns=("position",))


def test_export_refuses_positions_that_do_not_follow_the_commits(tmp_path):
    df = simulate_steps(200, n_docs=2, turns=1, seed=0)  # synth positions are step * (K + 1)
    run = write_run(tmp_path / "r", df, "x")
    with pytest.raises(AtlasError, match="committed tokens"):
        export(run, "vllm-detailed", tmp_path / "x.jsonl")
