"""The CLI end to end on Parquet runs written here, and every bad input -> one line, exit 2."""
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from atlas_ab.analysis.__main__ import SUBCOMMANDS, main
from tests.helpers.synth import simulate_steps, steps_from_counts, write_run

ROOT = Path(__file__).parents[2]
PREREG = ROOT / "analysis/prereg/refeed_p2_uncond.yaml"
ERR = "atlas_ab.analysis: error: "
FAST = ["--bootstrap", "200"]


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_error(capsys, *argv, must=()):
    code, out, err = run_cli(capsys, *argv)
    lines = [l for l in err.splitlines() if not l.startswith("atlas_ab.analysis: warning:")]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith(ERR), err
    for m in must:
        assert m in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def seeds_runs(tmp_path_factory):
    """The reference engine's powered A/B to the count (16 docs x 8 turns), as two run directories."""
    d = tmp_path_factory.mktemp("seeds")
    off = write_run(d / "off", steps_from_counts({0: 4056, 1: 1995, 2: 4349}, seed=0), "catchup_on", shards=3)
    on = write_run(d / "on", steps_from_counts({0: 3775, 1: 1828, 2: 4497}, seed=1), "refeed_on")
    return off, on


@pytest.fixture
def good(tmp_path):
    return simulate_steps(400, n_docs=4, turns=2, seed=0)


# --- end to end ---------------------------------------------------------------------------

def test_compare_human_and_json(capsys, seeds_runs):
    off, on = seeds_runs
    code, out, err = run_cli(capsys, "compare", off, on, *FAST)
    assert code == 0, err
    assert "+0.027 (3.9 sd)" in out and "+0.016 (2.4 sd)" in out and "design effect" in out
    code, out, _ = run_cli(capsys, "compare", off, on, "--metric", "p1", "--json", *FAST)
    d = json.loads(out)
    assert d["metric"] == "p1" and d["difference"]["text"] == "+0.016 (2.4 sd)"
    p2 = d["headline"]["p2_uncond"]
    assert p2["text"] == "+0.027 (3.9 sd)" and p2["control"]["n"] == 10_400 and p2["treatment"]["n"] == 10_100
    for key in ("sd", "z", "cluster_sd", "z_cluster", "deff", "bootstrap", "z_bootstrap"):
        assert p2[key] is not None
    assert d["arms"]["refeed_on"]["by_class"]["cold"]["n_verify"] > 0


def test_report_with_shipped_prereg_met(capsys, seeds_runs, tmp_path):
    off, on = seeds_runs
    out_dir = tmp_path / "rep"
    code, out, err = run_cli(capsys, "report", on, off, "--prereg", PREREG, "--out", out_dir, "--evaluate-unlocked",
                             *FAST)
    assert code == 0, err
    assert out.startswith("WARNING: UNLOCKED") and "\nMET (refeed_p2_uncond):" in out   # synthetic runs lock nothing
    md = (out_dir / "report.md").read_text()
    assert "**MET**" in md and "+0.027 (3.9 sd)" in md and "+0.016 (2.4 sd)" in md
    # the first figure is the difference that decides, with its threshold
    assert md.index("difference.png") < md.index("depth.png")
    for png in ("difference.png", "depth.png", "histogram.png", "turns.png"):
        assert (out_dir / png).stat().st_size > 1000 and f"]({png})" in md
    data = json.loads((out_dir / "report.json").read_text())
    assert data["verdicts"][0]["status"] == "MET"
    assert data["comparisons"][0]["control"] == "catchup_on"  # picked by the prereg, not the order


def test_report_weak_effect_not_met(capsys, tmp_path):
    """A weak effect at the registered n is NOT MET or UNDERPOWERED, never MET."""
    off = write_run(tmp_path / "off", simulate_steps(12_000, (0.61, 0.686), n_docs=24, seed=1), "catchup_on")
    on = write_run(tmp_path / "on", simulate_steps(12_000, (0.611, 0.687), n_docs=24, seed=2), "refeed_on")
    code, out, err = run_cli(capsys, "report", off, on, "--prereg", PREREG, "--out", tmp_path / "r1",
                             "--json", "--evaluate-unlocked", *FAST)
    assert code == 0, err
    status = json.loads(out)["verdicts"][0]["status"]
    assert status in ("NOT MET", "UNDERPOWERED")
    # (n below the registered minimum -> UNDERPOWERED is covered in test_analysis_power.py)


def test_mcnemar_oracle_and_paired(capsys, tmp_path):
    df = simulate_steps(2000, n_docs=8, seed=5)
    rng = np.random.default_rng(0)
    eligible = (df.accept_len >= 1) & (df.k >= 2)
    # the oracle hits whenever the real draft did, and on 40% of the real misses
    hit = (df.accept_len >= 2) | (rng.random(len(df)) < 0.4)
    df["oracle_hit2"] = pa.array(np.where(eligible, hit, None), type=pa.bool_()).to_pandas()
    a = write_run(tmp_path / "a", df, "a")
    code, out, err = run_cli(capsys, "mcnemar", a, "--json")
    assert code == 0, err
    d = json.loads(out)
    m = d["mcnemar"]
    assert m["c"] == 0 and m["b"] > 0 and m["z"] == pytest.approx(m["b"] ** 0.5)
    assert d["oracle_p2_cond"] > d["real_p2_cond"]
    b = write_run(tmp_path / "b", simulate_steps(2000, (0.65, 0.7), n_docs=8, seed=6), "b")
    code, out, err = run_cli(capsys, "mcnemar", a, b, "--depth", "2")
    assert code == 0, err
    assert "McNemar depth 2" in out and "exact p=" in out


def test_power_json(capsys):
    code, out, _ = run_cli(capsys, "power", "--p", "0.4182", "--delta", "0.027", "--sd", "3", "--n", "700",
                           "--icc", "0.01", "--m", "100", "--json")
    d = json.loads(out)
    assert code == 0 and d["n_iid"] == 9926 and d["n_per_arm"] == 19753
    # at n = 700 with deff 1.99: sd = sqrt(0.49030572 / 700 * 1.99) = 0.03734, z = 0.723
    assert d["sd_at_n"] == pytest.approx((0.49030572 / 700 * 1.99) ** 0.5)
    assert d["z_at_n"] == pytest.approx(0.723, abs=0.001)


def _imported(*argvs) -> list[tuple[subprocess.CompletedProcess, set[str]]]:
    """`python -X importtime -m atlas_ab.analysis ARGV` for each ARGV, each in a fresh interpreter, side
    by side (two cores: a test's interpreters need not wait on each other): each one's result and the
    top-level packages and modules it imported."""
    def one(argv):
        r = subprocess.run([sys.executable, "-X", "importtime", "-m", "atlas_ab.analysis", *map(str, argv)],
                           cwd=ROOT, capture_output=True, text=True)
        lines = [line.rsplit("|", 1)[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")]
        return r, {m.split(".")[0] for m in lines} | set(lines)
    with ThreadPoolExecutor(len(argvs)) as pool:
        return list(pool.map(one, argvs))


@pytest.mark.slow        # fresh interpreters in subprocesses: the whole suite runs it, the fast tier does not
def test_python_m_and_no_torch(seeds_runs):
    """The real entry point in a fresh interpreter: exit 2 and the one line; and no verb's module
    (--help imports them all to list them) pulls in torch (the library modules they load when run:
    tests/run/test_imports.py imports every one)."""
    (r, _), (h, imported) = _imported(["compare", seeds_runs[0], "/nonexistent/run"], ["--help"])
    assert r.returncode == 2
    errors = [l for l in r.stderr.splitlines() if not l.startswith("import time:")]
    assert errors == [f"{ERR}/nonexistent/run: run directory does not exist"]
    assert h.returncode == 0 and all(v in h.stdout for v in SUBCOMMANDS)    # every verb's module registered
    assert "torch" not in imported


@pytest.mark.slow          # a fresh interpreter per verb (~3 s); test_python_m_and_no_torch keeps one fast
def test_each_verb_imports_only_what_it_uses(seeds_runs):
    """A closed form loads no plotting or regression library, a comparison no plotting one."""
    (r, imported), (c, compared) = _imported(["power", "--p", "0.42", "--delta", "0.015", "--sd", "3"],
                                             ["compare", *seeds_runs, "--bootstrap", "50"])
    assert r.returncode == 0 and "steps per arm needed: 32,099" in r.stdout
    assert not imported & {"matplotlib", "statsmodels", "pandas", "pyarrow", "torch"}, imported
    assert c.returncode == 0 and "+0.027 (3.9 sd)" in c.stdout
    assert not compared & {"matplotlib", "torch"}, compared


# --- bad input: one line naming the file and the problem, exit 2 -----------------------------

def test_missing_directory(capsys, tmp_path, seeds_runs):
    one_error(capsys, "compare", seeds_runs[0], tmp_path / "nope", must=(str(tmp_path / "nope"), "does not exist"))


def test_missing_column(capsys, tmp_path, good, seeds_runs):
    r = write_run(tmp_path / "r", good.drop(columns=["accept_len"]), "refeed_on")
    one_error(capsys, "compare", seeds_runs[0], r, must=("part-00000.parquet", "missing required column 'accept_len'"))


def test_wrong_type_and_nulls(capsys, tmp_path, good, seeds_runs):
    r = write_run(tmp_path / "f", good, "refeed_on")
    pq.write_table(pa.Table.from_pandas(good.astype({"k": "float64"})), r / "steps/part-00000.parquet")
    one_error(capsys, "compare", seeds_runs[0], r, must=("part-00000.parquet", "column 'k' has type double"))
    bad = good.astype({"turn": "Int32"})
    bad.loc[2, "turn"] = None
    r = write_run(tmp_path / "n", good, "refeed_on")
    pq.write_table(pa.Table.from_pandas(bad), r / "steps/part-00000.parquet")
    one_error(capsys, "compare", seeds_runs[0], r, must=("part-00000.parquet", "'turn' has 1 null values"))


def test_empty_run(capsys, tmp_path, good, seeds_runs):
    (tmp_path / "r" / "steps").mkdir(parents=True)
    one_error(capsys, "compare", seeds_runs[0], tmp_path / "r", must=(str(tmp_path / "r" / "steps"), "empty run"))
    r = write_run(tmp_path / "r0", good.iloc[:0], "refeed_on")
    one_error(capsys, "mcnemar", r, must=("empty run",))


def test_corrupt_parquet(capsys, tmp_path, good, seeds_runs):
    r = write_run(tmp_path / "r", good, "refeed_on", shards=2)
    (r / "steps/part-00001.parquet").write_bytes(b"PAR1 this is not parquet")
    one_error(capsys, "compare", seeds_runs[0], r, must=("part-00001.parquet", "unreadable Parquet"))


def test_accept_len_over_k(capsys, tmp_path, good, seeds_runs):
    bad = good.copy()
    bad.loc[7, "accept_len"] = bad.loc[7, "k"] + 1
    r = write_run(tmp_path / "r", bad, "refeed_on")
    one_error(capsys, "compare", seeds_runs[0], r, must=("part-00000.parquet", "accept_len > k at row 7"))


@pytest.mark.parametrize("col", ["k", "accept_len", "doc_id", "turn", "step"])
def test_negative_values(capsys, tmp_path, good, seeds_runs, col):
    bad = good.copy()
    bad.loc[3, col] = -1
    r = write_run(tmp_path / "r", bad, "refeed_on")
    one_error(capsys, "compare", seeds_runs[0], r, must=("part-00000.parquet", f"negative {col}"))


def test_duplicate_key(capsys, tmp_path, good, seeds_runs):
    bad = good.copy()
    bad.loc[len(bad) - 1, ["doc_id", "turn", "step"]] = bad.loc[5, ["doc_id", "turn", "step"]].to_numpy()
    r = write_run(tmp_path / "r", bad, "refeed_on", shards=2)
    one_error(capsys, "compare", seeds_runs[0], r, must=("part-00001.parquet", "duplicate (doc_id, turn, step)"))


def test_depth_never_observed(capsys, tmp_path, seeds_runs):
    k1 = write_run(tmp_path / "k1", simulate_steps(300, (0.6,), n_docs=4, seed=1), "refeed_on")
    one_error(capsys, "compare", seeds_runs[0], k1, must=(str(k1), "p2_uncond needs depth 2", "K=1"))
    k3 = write_run(tmp_path / "k3", simulate_steps(300, (0.6, 0.7, 0.7), n_docs=4, seed=1), "refeed_on")
    one_error(capsys, "compare", seeds_runs[0], k3, "--metric", "p3", must=(str(seeds_runs[0]), "depth 3", "K=2"))


def test_incomplete_and_mismatch(capsys, tmp_path, good, seeds_runs):
    off = seeds_runs[0]
    running = write_run(tmp_path / "run", good, "refeed_on", status="running")
    one_error(capsys, "compare", off, running, must=("manifest.json", "'running'", "--allow-incomplete"))
    code, _, err = run_cli(capsys, "compare", off, running, "--allow-incomplete", "--bootstrap", "0")
    assert code == 0, err
    other = write_run(tmp_path / "other", good, "refeed_on", workload_hash="sha256:other")
    one_error(capsys, "compare", off, other, must=("workload.hash", "--allow-mismatch"))
    code, out, err = run_cli(capsys, "report", off, other, "--allow-mismatch", "--out", tmp_path / "rep", *FAST)
    assert code == 0, err
    assert "Provenance mismatch" in (tmp_path / "rep" / "report.md").read_text()
    assert "workload.hash" in err  # stated as a warning too


def test_debris_shard_is_ignored_with_a_warning(capsys, tmp_path, good, seeds_runs):
    r = write_run(tmp_path / "r", good, "refeed_on", status="running")
    pq.write_table(pa.table({"doc_id": [0]}), r / "steps/part-00099.parquet")  # a crash's leftover
    code, _, err = run_cli(capsys, "compare", seeds_runs[0], r, "--bootstrap", "0", "--allow-incomplete")
    assert code == 0 and "part-00099.parquet: not listed in manifest.json shards; ignored" in err
    # in a complete run the same file means the manifest and the files disagree: refused
    c = write_run(tmp_path / "c", good, "refeed_on")
    pq.write_table(pa.table({"doc_id": [0]}), c / "steps/part-00099.parquet")
    one_error(capsys, "compare", seeds_runs[0], c, must=("part-00099.parquet", "not listed"))


def test_external_run_without_manifest(capsys, tmp_path, good, seeds_runs):
    r = write_run(tmp_path / "my_arm", good, "ignored", manifest=False)
    code, out, err = run_cli(capsys, "compare", seeds_runs[0], r, "--json", "--bootstrap", "0")
    assert code == 0, err
    assert json.loads(out)["treatment"] == "my_arm"  # the directory name
