"""CI smoke of the benchmarks (tiny, CPU, not timed): they must not rot."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
needs_default = pytest.mark.skipif(not (ROOT / "atlas_ab/models/default/model.safetensors").exists(),
                                   reason="the embedded default model is not in this checkout")


def smoke(script: str, tmp_path) -> dict:
    out = tmp_path / "bench.json"
    r = subprocess.run([sys.executable, str(ROOT / "bench" / script), "--smoke", "--json", str(out)],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(out.read_text())


@needs_default
def test_bench_runner_smoke(tmp_path):
    res = smoke("bench_runner.py", tmp_path)
    assert res["smoke"] and res["grid"] and {"B", "K", "rows_per_s", "bare_forward_ms"} <= set(res["grid"][0])
    assert set(res["levers"]) == {"fingerprints", "shadow_topk_4"}
    assert res["ten_k"]["rows"] > 0
    assert res["peer"]["same_text"].split("/")[0] == res["peer"]["same_text"].split("/")[1]


@needs_default
def test_bench_replay_smoke(tmp_path):
    res = smoke("bench_replay.py", tmp_path)
    assert res["smoke"] and res["arms"] == ["catchup_on", "refeed_on"]
    built = [v["replay"]["built"] for v in res["per_arm"].values()]
    assert built == [True, False]                       # one trajectory, built once for the sweep
    assert res["rows_matched"] > 0 and res["rows_differ"] == 0
    assert res["live_s"] > 0 and res["replay_s"] > 0 and res["ratio"] == res["replay_s"] / res["live_s"]


@needs_default
def test_ring_prefill_holes_smoke(tmp_path):
    res = smoke("ring_prefill_holes.py", tmp_path)
    assert set(res) == {"catchup_on", "ring_prefill_on"}
    assert res["catchup_on"]["hole_turns"] == res["catchup_on"]["rejected_first_steps"] > 0
    assert res["ring_prefill_on"]["hole_turns"] == 0
