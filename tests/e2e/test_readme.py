"""The README's "Run a study" block works as written: every command, in order, from a directory
outside the repository (so the packaged configs and pre-registrations are what is found), on a
tiny workload (scripts/readme_commands.py says which overrides it appends and how RUN, RUN_A,
RUN_B and runs/multirun/<date>/<time> are filled). ~65 s on 2 cores: marked slow."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import readme_commands  # noqa: E402


def test_the_block_is_a_tutorial_over_every_cli_verb():
    cmds = readme_commands.readme_commands()
    joined = "\n".join(cmds)
    for verb in ("report", "compare", "mcnemar", "power", "fingerprints", "coverage", "claims"):
        assert f"atlas_ab.analysis {verb}" in joined, verb
    assert any("-m +study=" in c for c in cmds) and any("runner.mode=replay" in c for c in cmds)
    # placeholders are only used after a command that fills them
    state_keys = set()
    for c in cmds:
        for key in ("RUN_A", "RUN_B", "RUN"):
            if key in c.split():
                assert key in state_keys, f"{key} used before any command wrote it: {c}"
        if c.startswith("python -m atlas_ab ") or " python -m atlas_ab " in c:
            state_keys.add("RUN")
            if " -m " in c:
                state_keys.update({"RUN_A", "RUN_B"})


def test_fill_appends_the_tiny_overrides_to_runs_only():
    state = {"RUN": Path("/r/x"), "RUN_A": Path("/r/a"), "RUN_B": Path("/r/b"), "sweep": Path("/r/m")}
    assert readme_commands.fill("python -m atlas_ab.analysis mcnemar RUN_A RUN_B", state) == \
        "python -m atlas_ab.analysis mcnemar /r/a /r/b"
    run = readme_commands.fill("python -m atlas_ab -m +study=refeed", state)
    assert run.startswith("python -m atlas_ab -m +study=refeed workload=tiny") and "workload.n_docs=4" in run
    assert readme_commands.fill("python -m atlas_ab.analysis report runs/multirun/<date>/<time>/*", state) == \
        "python -m atlas_ab.analysis report /r/m/*"


@pytest.mark.slow
def test_every_readme_command_exits_zero(tmp_path):
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "readme_commands.py"), "--workdir", str(tmp_path)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-4000:]
    # and each command did its work: the claims report and the study's verdicts are on disk
    assert (tmp_path / "claims_report" / "report.md").exists()
    assert list((tmp_path / "analysis" / "reports").glob("*/report.md")), "report wrote nothing"
