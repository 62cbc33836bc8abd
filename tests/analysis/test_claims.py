"""The claims study end to end on the CPU (tiny workload): both sweeps through the real runner,
then the report, twice: regenerating it from the same runs reproduces it exactly."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = ["workload.n_docs=8", "workload.turns=2", "workload.chunk_tokens=32", "workload.gen_tokens=12",
        "runner.progress=false"]


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    d = tmp_path_factory.mktemp("claims")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for study, extra in (("claims", ["runner.batch_width=8", "runner.replay_check_waves=0"]),
                         ("claims_conf", ["+arm=draft_conf_000,draft_conf_066"])):
        p = subprocess.run([sys.executable, "-m", "atlas_ab", "-m", f"+study={study}", *TINY, *extra,
                            f"hydra.sweep.dir={d}/{study}"], cwd=d, env=env, capture_output=True, text=True)
        assert p.returncode == 0, p.stderr[-3000:]
    return d


@pytest.mark.slow
def test_the_claims_report_answers_every_question_and_regenerates_exactly(sweeps, tmp_path):
    from atlas_ab.analysis.__main__ import main

    for out in ("a", "b"):
        assert main(["claims", str(sweeps / "claims"), str(sweeps / "claims_conf"), "--out", str(tmp_path / out),
                     "--bootstrap", "200"]) == 0
    md = (tmp_path / "a" / "report.md").read_text()
    assert md == (tmp_path / "b" / "report.md").read_text()
    assert (tmp_path / "a" / "report.json").read_text() == (tmp_path / "b" / "report.json").read_text()
    for q in ("claims_q1_cliff", "claims_q2_prefill_warm", "claims_q2_prefill_cold", "claims_q3_refeed",
              "claims_q3_refeed_prefill", "claims_q4_shift", "claims_q5_draft_conf", "claims_q6_ring_prefill",
              "claims_q9_head_fp8", "claims_q9_head_fp8_p2_uncond", "claims_q10_kv_fp8", "claims_q10_kv_fp8_p2_uncond"):
        assert f"### {q}" in md
    # step times are not guaranteed on a shared CPU: economics may refuse them (and then draws no figure)
    timing_refused = "Not computed: " in md and "warm-up inside step_ms?" in md
    for fig in ("difference_", "depth_", "turns_", "confidence_", "coverage_"):
        if fig == "confidence_" and timing_refused:
            continue
        assert any(p.name.startswith(fig) for p in (tmp_path / "a").glob("*.png")), fig
    assert "The fingerprint table of refeed_on" in md and "DRAFT_CONF economics" in md
    facts = {f["study"]: f for g in json.loads((tmp_path / "a" / "report.json").read_text())["models"].values()
             for f in g["workload"]}
    assert (facts["claims"]["documents"], facts["claims"]["turns"], facts["claims"]["gen_tokens"]) == (8, 2, 12)
    assert facts["claims"]["arms"] == 15 and facts["claims_conf"]["arms"] == 2     # 13 + head_fp8, kv_fp8 (issue 50)


def test_findings_prose_numbers_are_checked_against_the_reports_workloads():
    """Issue 18 section 8: FINDINGS.md said '24 source files (24 clusters)' where the runs had 14."""
    from atlas_ab.analysis.claims import check_findings

    data = {"models": {"m": {"workload": [{"study": "claims", "documents": 192, "source_files": 14},
                                          {"study": "claims_conf", "documents": 48, "source_files": 14}]}}}
    ok = "192 documents x 8 turns, cut from 14 source files (14 clusters); the economics ran 48 documents"
    assert check_findings(ok, data) == []
    bad = check_findings("192 documents x 8 turns x 32 generated tokens, cut from 24 source files (24 clusters)", data)
    assert bad == ["'24 source files': the report's workloads have source files 14",
                   "'24 clusters': the report's workloads have source files 14"]


def test_the_committed_findings_quote_their_reports_workloads():
    import json

    from atlas_ab.analysis.claims import check_findings

    checked = []
    for report in sorted((ROOT / "analysis" / "reports").glob("claims_*/report.json")):
        data = json.loads(report.read_text())
        if not all("workload" in g for g in data["models"].values()):
            continue          # a report made before the workload facts existed: nothing to check it against
        assert check_findings((report.parent / "FINDINGS.md").read_text(), data) == [], report
        checked.append(report)
    if not checked:
        pytest.skip("no committed claims report carries the workload facts")
