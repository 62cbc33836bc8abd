"""Arms that ran different (or unknown) code are refused by report, compare, mcnemar and pairs
unless --allow-mismatch, which then says so at the top (issue 18 section 4)."""
import json

import pytest

from tests.analysis.test_cli import FAST, one_error, run_cli
from tests.helpers.engine_fixtures import greedy_positions
from tests.helpers.synth import simulate_steps, write_run

OTHER = "sha256:" + "1" * 64
SAME = "sha256:" + "0" * 64


@pytest.fixture(scope="module")
def arms(tmp_path_factory):
    d = tmp_path_factory.mktemp("code")
    a = greedy_positions(simulate_steps(600, (0.6, 0.7), n_docs=12, seed=0))
    b = greedy_positions(simulate_steps(600, (0.65, 0.7), n_docs=12, seed=1))
    return {"a": write_run(d / "a", a, "catchup_on", code_hash=SAME),
            "b": write_run(d / "b", b, "refeed_on", code_hash=SAME),
            "other": write_run(d / "other", b, "refeed_on", code_hash=OTHER),
            "old": write_run(d / "old", b, "refeed_on", code_hash=None),
            "old2": write_run(d / "old2", a, "catchup_on", code_hash=None)}


@pytest.mark.parametrize("verb", ["compare", "mcnemar", "report"])
def test_arms_of_different_code_are_refused(capsys, tmp_path, arms, verb):
    extra = ["--out", tmp_path / "rep"] if verb == "report" else []
    one_error(capsys, verb, arms["a"], arms["other"], *extra,
              must=("ran different code", "catchup_on=sha256:000000000000", "refeed_on=sha256:111111111111",
                    "--allow-mismatch"))
    assert not (tmp_path / "rep").exists()


@pytest.mark.parametrize("verb", ["compare", "mcnemar", "report"])
def test_runs_without_a_code_hash_are_unknown_code(capsys, tmp_path, arms, verb):
    extra = ["--out", tmp_path / "rep"] if verb == "report" else []
    one_error(capsys, verb, arms["a"], arms["old"], *extra,
              must=(str(arms["old"]), "unknown code", "no code.hash", "--allow-mismatch"))
    # two unknowns are no better than one: nothing shows they ran the same code
    one_error(capsys, verb, arms["old2"], arms["old"], *extra, must=("unknown code",))


def test_allowed_mismatch_is_stated_first_and_every_arm_shows_its_code(capsys, tmp_path, arms):
    code, out, err = run_cli(capsys, "compare", arms["a"], arms["other"], "--allow-mismatch", *FAST)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "code: catchup_on sha256:000000000000; refeed_on sha256:111111111111"
    assert lines[2].startswith("NOTE: the arms ran different code")
    code, out, err = run_cli(capsys, "mcnemar", arms["a"], arms["other"], "--allow-mismatch")
    assert code == 0, err
    assert out.startswith("WARNING: the arms ran different code") and "code: catchup_on sha256:0000" in out
    code, out, err = run_cli(capsys, "report", arms["a"], arms["other"], "--allow-mismatch", "--out", tmp_path / "r",
                             *FAST)
    assert code == 0, err
    assert out.startswith("WARNING: the arms ran different code")
    md = (tmp_path / "r" / "report.md").read_text()
    assert md.startswith("> **WARNING: Provenance mismatch, compared anyway (--allow-mismatch):**")
    assert "| sha256:111111111111 |" in md
    data = json.loads((tmp_path / "r" / "report.json").read_text())
    assert [r["code"]["hash"] for r in data["runs"]] == [SAME, OTHER]


def test_the_same_code_passes_and_is_shown(capsys, arms):
    code, out, err = run_cli(capsys, "compare", arms["a"], arms["b"], "--json", *FAST)
    assert code == 0, err
    assert [c["hash"] for c in json.loads(out)["code"]] == [SAME, SAME]
