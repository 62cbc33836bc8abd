"""Claims question 7 (REFEED under sampling) end to end on the CPU (tiny workload): both sampled
studies through the real runner in replay, then the claims report: one group per temperature, each
question judged on its own pre-registration, with the exact probabilities' variance line."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = ["workload.n_docs=12", "workload.turns=2", "workload.chunk_tokens=32", "workload.gen_tokens=12",
        "runner.batch_width=12", "runner.replay_check_waves=0", "runner.progress=false"]


@pytest.mark.slow
def test_the_sampled_claims_study_and_its_report(tmp_path):
    from atlas_ab.analysis.__main__ import main

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for study in ("claims_sampled", "claims_sampled_t10"):
        p = subprocess.run([sys.executable, "-m", "atlas_ab", "-m", f"+study={study}", *TINY,
                            f"hydra.sweep.dir={tmp_path}/{study}", f"runner.trajectories={tmp_path}/traj"],
                           cwd=tmp_path, env=env, capture_output=True, text=True)
        assert p.returncode == 0, p.stderr[-3000:]
        assert p.stdout.count("lossless gate passed by distribution+replay") == 4, p.stdout
    out = tmp_path / "report"
    assert main(["claims", str(tmp_path / "claims_sampled"), str(tmp_path / "claims_sampled_t10"), "--out", str(out),
                 "--bootstrap", "200"]) == 0
    md = (out / "report.md").read_text()
    assert "sampled at T=0.7" in md and "sampled at T=1" in md
    for q in ("claims_q7_refeed_sampled_t07", "claims_q7_refeed_sampled_t07_greedy_drafts",
              "claims_q7_refeed_sampled_t10", "claims_q7_refeed_sampled_t10_greedy_drafts"):
        assert f"### {q}" in md
    assert md.count("- exact acceptance probabilities: paired sd") == 4
    assert len(list((tmp_path / "traj").iterdir())) >= 2       # one sampled trajectory per temperature
