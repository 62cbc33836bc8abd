"""The sequential study driver (atlas_ab/study/): looks, lockstep arms, stops, the manifests' looks,
kill -9 and resume, and the bad input it refuses before any model loads. The arms run the fake
runner (tests/helpers/fakerunner.py); FAKE_RUNNER_REFEED_LIFT gives the refeed arm a clear effect."""
import json
import os
import signal
from pathlib import Path
from types import SimpleNamespace

import pytest

from atlas_ab import AtlasError
from atlas_ab.study import looks
from atlas_ab.study.sequential import SequentialStudy, check_paired
from tests.helpers import faults
from tests.helpers.cli import cli, env_with
from tests.helpers.compose import cfg_of

FAKE = list(faults.FAKE)
PREREG = """name: seq_test
hypothesis: REFEED raises p2_uncond.
primary_metric: p2_uncond
direction: increase
min_effect: 0.015
threshold_sd: 3.0
decides: cluster
estimand: whole_arm
cluster: document
arms: {{control: catchup_on, treatment: refeed_on}}
min_n_per_arm: 5000
sequential: {{alpha: 0.05, look_every: {every}, look_unit: {unit}, max_waves: {max_waves}}}
"""


def prereg(tmp: Path, every: int = 1, unit: str = "wave", max_waves: int = 12) -> Path:
    p = tmp / "seq_test.yaml"
    p.write_text(PREREG.format(every=every, unit=unit, max_waves=max_waves))
    return p


def study_args(pr: Path, n_docs: int = 48, bw: int = 4) -> list[str]:
    return [*FAKE, "+study=refeed_sequential", f"study.preregs=[{pr}]", f"workload.n_docs={n_docs}",
            f"runner.batch_width={bw}"]


def arm_cfgs(*args: str) -> dict:
    return {a: cfg_of(*args, f"+arm={a}") for a in ("catchup_on", "refeed_on")}


def manifest(d: Path) -> dict:
    return json.loads((d / "manifest.json").read_text())


# -- when it looks (pure) ------------------------------------------------------------------------

def test_whole_clusters_wait_for_a_cluster_cut_across_two_waves():
    waves = [[0, 1], [2, 3], [4, 5]]
    cmap = [0, 0, 1, 1, 1, 2]              # cluster 1 spans waves 1 and 2
    assert looks.whole_clusters(waves, 1, cmap) == ([0, 1], 1)
    assert looks.whole_clusters(waves, 2, cmap) == ([0, 1], 1)
    assert looks.whole_clusters(waves, 3, cmap) == ([0, 1, 2, 3, 4, 5], 3)
    assert looks.whole_clusters(waves, 2, None) == ([0, 1, 2, 3], 4)


def test_a_plan_looks_every_n_waves_or_clusters_and_at_the_budgets_end():
    seq = SimpleNamespace(look_every=2, look_unit="wave", max_waves=5, max_clusters=None)
    p = looks.plan_of("q", seq, n_waves=8)
    assert p.budget_waves == 5
    assert [w for w in range(1, 9) if p.is_look(w, 4 * w, 0)] == [2, 4, 5, 6, 7, 8]
    assert [w for w in range(1, 9) if p.is_last(w, 4 * w)] == [5, 6, 7, 8]
    c = looks.plan_of("q", SimpleNamespace(look_every=6, look_unit="cluster", max_waves=None, max_clusters=10), 8)
    assert c.budget_waves == 8
    assert (c.is_look(1, 4, 0), c.is_look(2, 8, 0), c.is_look(2, 8, 8), c.is_look(3, 10, 8)) == (False, True,
                                                                                                  False, True)


# -- the driver, in-process ----------------------------------------------------------------------

def test_the_study_stops_both_arms_at_the_look_that_decides(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_RUNNER_REFEED_LIFT", "1")
    pr = prereg(tmp_path)
    d = tmp_path / "study"
    out = open(tmp_path / "out.txt", "w")
    m = SequentialStudy(arm_cfgs(*study_args(pr)), d, out=out).run()
    out.close()
    q = m["preregs"]["seq_test"]
    assert m["status"] == "decided" and q["decision"] == "MET"
    at = q["decided_at"]
    stop = q["closed_at_wave"]
    assert at == len(q["looks"]) and 1 < stop < 12, q["looks"]      # stopped early, at its deciding look
    assert [lk["waves"] for lk in q["looks"]] == list(range(1, stop + 1))   # a look after every wave
    assert [lk["documents"] for lk in q["looks"]] == [4 * w for w in range(1, stop + 1)]
    assert all(lk["decision"] == "UNDECIDED" for lk in q["looks"][:-1]) and q["looks"][-1]["lower"] >= 0.015
    for arm, i in (("catchup_on", 0), ("refeed_on", 1)):
        am = manifest(d / f"{i}_{arm}")
        assert am["status"] == "stopped" and [s["wave"] for s in am["shards"]] == list(range(stop))
        assert am["stopped"] == {"by": "refeed_sequential", "at_wave": stop, "decisions": {"seq_test": "MET"}}
        assert am["sequential"]["preregs"]["seq_test"]["looks"] == q["looks"]
    sv = q["saving"]
    assert sv["waves_not_run"] == 12 - stop and sv["documents_run"] == 4 * stop
    assert sv["saved_share"] == pytest.approx(1 - max(sv["steps_per_arm"].values()) / 5000, abs=1e-12)
    text = (tmp_path / "out.txt").read_text()
    assert f"seq_test: MET at look {at} of {at}, after {4 * stop} documents ({stop} waves)" in text
    assert f"{12 - stop} of 12 waves not run" in text
    # the report re-judges the stored runs at the recorded looks: the same decision, and its path
    from atlas_ab.analysis.report import build_report
    from atlas_ab.analysis.runs import load_run
    runs = [load_run(d / "0_catchup_on", optional=("position",)), load_run(d / "1_refeed_on", optional=("position",))]
    rep = build_report(runs, tmp_path / "rep", n_boot=0)
    j = rep.judged[0]
    assert j.sequential.result.decision == "MET" and j.sequential.result.decided_at == at and j.sequential.agrees
    assert (tmp_path / "rep" / "sequential_seq_test.png").stat().st_size > 0
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "### seq_test: **MET** (sequential)" in md and f"{12 - stop} of 12 waves not run" in md


def test_without_an_effect_the_study_runs_its_budget_and_ends_underpowered(tmp_path):
    pr = prereg(tmp_path, every=2, max_waves=4)
    d = tmp_path / "study"
    m = SequentialStudy(arm_cfgs(*study_args(pr, n_docs=24)), d, out=open(os.devnull, "w")).run()
    q = m["preregs"]["seq_test"]
    assert m["status"] == "complete" and q["decision"] == "UNDERPOWERED" and q["final"]
    assert [lk["waves"] for lk in q["looks"]] == [2, 4] and q["closed_at_wave"] == 4
    # stopped at its budget of 4 of the workload's 6 waves
    assert manifest(d / "0_catchup_on")["status"] == "stopped" and len(manifest(d / "1_refeed_on")["shards"]) == 4


# -- bad input: one line, before any model loads ----------------------------------------------------

def test_bad_input_is_one_line_before_any_model_loads(tmp_path):
    pr = prereg(tmp_path)
    run = tmp_path / "r1"
    code, err = faults.main_of("atlas_ab", [*study_args(pr), "+arm=refeed_on", f"hydra.run.dir={run}"])
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1, err
    faults.check("study.sequential-arm-given", lines[0])
    assert not any(p.name.endswith(("_catchup_on", "_refeed_on")) or p.name == "study.json" for p in run.iterdir())
    fine = prereg(tmp_path, every=2, unit="cluster")
    run = tmp_path / "r2"
    code, err = faults.main_of("atlas_ab", [*study_args(fine, bw=4), f"hydra.run.dir={run}"])
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1, err
    faults.check("study.sequential-looks-finer-than-a-wave", lines[0])
    assert sorted(p.name for p in run.iterdir()) == [".hydra"]
    # arms whose configs compose different workloads (an arm file of the user's that sets one)
    conf = tmp_path / "conf"
    (conf / "arm").mkdir(parents=True)
    (conf / "arm" / "wide.yaml").write_text("# @package _global_\narm:\n  name: wide\n  catchup: true\n"
                                             "  refeed: true\nworkload:\n  turns: 2\n")
    wide = tmp_path / "wide.yaml"
    wide.write_text(pr.read_text().replace("treatment: refeed_on", "treatment: wide"))
    run = tmp_path / "r3"
    code, err = faults.main_of("atlas_ab", [*study_args(wide), "study.arms=[catchup_on,wide]",
                                            f"hydra.searchpath=[file://{conf}]", f"hydra.run.dir={run}"])
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1, err
    faults.check("study.sequential-arms-do-not-share-a-workload", lines[0])
    assert sorted(p.name for p in run.iterdir()) == [".hydra"]


def test_check_paired_names_the_key_that_differs():
    cfgs = arm_cfgs(*FAKE, "+study=refeed_sequential")
    cfgs["refeed_on"].runner.batch_width = 8
    with pytest.raises(AtlasError, match=r"its arms do not share a workload \(catchup_on vs refeed_on: "
                                         r"runner.batch_width: 16 -> 8\)"):
        check_paired("refeed_sequential", cfgs)


# -- kill -9, then resume: the same looks, the same decision -----------------------------------------

@pytest.mark.slow        # three CLI runs of the study (fake runner)
def test_kill_9_then_resume_reaches_the_same_looks_and_decision(tmp_path):
    pr = prereg(tmp_path)
    args = [*study_args(pr), "runner.write_behind=false"]
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    code, out, err = cli("-m", *args, f"hydra.sweep.dir={whole}", env=env_with(FAKE_RUNNER_REFEED_LIFT=1))
    assert code == 0, err[-2000:]
    ref = json.loads((whole / "study.json").read_text())["preregs"]["seq_test"]
    assert ref["decision"] == "MET" and ref["closed_at_wave"] > 3
    # killed in the control's wave 2: its waves 0-1 and the treatment's 0-1 stored, looks 1-2 recorded
    p = cli("-m", *args, f"hydra.sweep.dir={killed}", env=env_with(FAKE_RUNNER_REFEED_LIFT=1,
                                                                    FAKE_RUNNER_KILL_AT=2), wait=False)
    p.communicate(timeout=300)
    assert p.returncode == -signal.SIGKILL
    mid = json.loads((killed / "study.json").read_text())
    assert mid["status"] == "running" and len(mid["preregs"]["seq_test"]["looks"]) == 2
    assert manifest(killed / "0_catchup_on")["status"] == "running"
    code, out, err = cli("-m", *args, f"hydra.sweep.dir={killed}", "runner.resume=auto",
                         env=env_with(FAKE_RUNNER_REFEED_LIFT=1))
    assert code == 0, err[-2000:]
    got = json.loads((killed / "study.json").read_text())
    assert got["status"] == "decided" and len(got["resumes"]) == 1
    q = got["preregs"]["seq_test"]
    assert q["looks"] == ref["looks"] and q["decision"] == ref["decision"] and q["saving"] == ref["saving"]
    for arm in ("0_catchup_on", "1_refeed_on"):
        a, b = manifest(whole / arm), manifest(killed / arm)
        assert b["status"] == "stopped" and b["resumed"] and [s["sha256"] for s in a["shards"]] == \
            [s["sha256"] for s in b["shards"]]
    # a decided study is not run again
    code, out, err = cli("-m", *args, f"hydra.sweep.dir={killed}", "runner.resume=auto")
    assert code == 0 and f"seq_test: MET at look {ref['decided_at']}" in out, err[-2000:]


# -- the shipped study, end to end on the default model --------------------------------------------

@pytest.mark.slow        # the real runner, two arms live on the CPU: ~1.5 min on 2 idle cores
def test_refeed_sequential_stops_early_on_the_default_model(tmp_path):
    d = tmp_path / "sweep"
    code, out, err = cli("-m", "+study=refeed_sequential", "runner.progress=false", "runner.device=cpu",
                         f"hydra.sweep.dir={d}")
    assert code == 0, err[-2000:]
    q = json.loads((d / "study.json").read_text())["preregs"]["refeed_sequential"]
    # measured on this repository's CPU (Python 3.11's stdlib as the corpus): MET at look 15 of a
    # budget of 38 waves, 4,101 and 3,896 verify steps per arm against the fixed-n 10,000
    assert q["decision"] == "MET" and q["closed_at_wave"] < 38 and q["saving"]["waves_not_run"] > 0
    assert all(n < 10_000 for n in q["saving"]["steps_per_arm"].values())
    assert "refeed_sequential: MET at look" in out and "not run)" in out and "waves not run" in out
    for arm in ("0_catchup_on", "1_refeed_on"):
        assert manifest(d / arm)["status"] == "stopped"
