"""Dependencies point one way: a run (its entry point, its session locking a study's
pre-registrations, its summary and progress figures) never imports the analysis or its
statistics (scipy, statsmodels, matplotlib)."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

RUN_SIDE = """
import json, sys
from pathlib import Path
import pyarrow as pa
import atlas_ab.__main__
from atlas_ab.config.structured import StudyConfig
from atlas_ab.run.progress import Progress
from atlas_ab.run.session import Job, acceptance_summary, lock_preregs

entries = lock_preregs(StudyConfig(name="refeed", preregs=["analysis/prereg/refeed_p2_uncond.yaml"],
                                   arms=["catchup_on", "refeed_on"]), Job(run_dir=Path(sys.argv[1])))
summary = acceptance_summary(pa.table({"doc_id": [0, 0, 1], "turn": [0, 0, 0], "step": [0, 1, 0],
                                       "k": [2, 2, 0], "accept_len": [2, 0, 0]}))
p = Progress(total_tokens=10, enabled=False)
p.on_step(3, [2, 2], [2, 1])
print(json.dumps({"modules": sorted(sys.modules), "summary": summary, "figures": p.figures(),
                  "locked": [e["sha256"] for e in entries]}))
"""


def test_the_run_side_never_imports_the_analysis_or_its_statistics(tmp_path):
    r = subprocess.run([sys.executable, "-c", RUN_SIDE, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    heavy = [m for m in out["modules"] if m.split(".")[0] in ("scipy", "statsmodels", "matplotlib")
             or m.startswith("atlas_ab.analysis")]
    assert heavy == []
    assert len(out["locked"]) == 1 and len(out["locked"][0]) == 64
    # the definitions the run side uses are the analysis' (telemetry/acceptance.py): 2 verify steps,
    # accept_len 2 and 0 -> p1 = p2_uncond = 0.5, tokens/step 2.0; one serial step
    assert out["summary"] == {"n_steps": 3, "n_serial": 1, "p1": 0.5, "p2_uncond": 0.5, "p2_cond": 1.0,
                              "tokens_per_step": 2.0}
    assert out["figures"]["p1"] == 1.0 and out["figures"]["p2_uncond"] == 0.5 and out["figures"]["n_steps"] == 2
