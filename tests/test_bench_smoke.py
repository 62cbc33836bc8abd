"""CI smoke of the runner benchmark (tiny, CPU, not timed): it must not rot."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(not (ROOT / "atlas_ab/models/default/model.safetensors").exists(),
                    reason="the embedded default model is not in this checkout")
def test_bench_runner_smoke(tmp_path):
    out = tmp_path / "bench.json"
    r = subprocess.run([sys.executable, str(ROOT / "bench/bench_runner.py"), "--smoke", "--json", str(out)],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(out.read_text())
    assert res["smoke"] and res["grid"] and {"B", "K", "rows_per_s", "bare_forward_ms"} <= set(res["grid"][0])
    assert set(res["levers"]) == {"fingerprints", "shadow_topk_4"}
    assert res["ten_k"]["rows"] > 0
    assert res["peer"]["same_text"].split("/")[0] == res["peer"]["same_text"].split("/")[1]
