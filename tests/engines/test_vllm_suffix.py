"""Our suffix decoding against vLLM 0.32's own (`--method suffix`, Arctic Inference 0.3.0's C++ tree, built by
scripts/setup_vllm.sh), request by request and drafted step by drafted step, on the default workload: every
completion equal to transformers' greedy decoding, and every drafted step's accept_len equal. The global
tree is off on both sides (suffix_decoding_max_cached_requests=0): what it holds at a step depends on the
order in which requests finish, which a server and our lockstep batches do not share (with it on, 1,711
of 2,219 paired steps agreed on 2026-12-04, the aggregates within 0.002 tokens a step).

Skipped, with one line naming why, where the engine or Arctic's tree cannot be installed; CI runs it."""
import json
import subprocess

import pytest

from tests.helpers.vllm_engine import ROOT, engine_python, run_module, served

pytestmark = [pytest.mark.slow, pytest.mark.vllm]
NO_GLOBAL = "suffix_decoding_max_cached_requests=0"


def test_our_suffix_drafts_what_vllms_drafts_at_every_step(tmp_path):
    py = engine_python()
    probe = subprocess.run([str(py), "-c", "import arctic_inference.suffix_decoding"], cwd="/", capture_output=True,
                           text=True)
    if probe.returncode != 0:
        pytest.skip("arctic-inference is not in vLLM's environment (scripts/setup_vllm.sh could not build it): "
                    + (probe.stderr.strip().splitlines() or [""])[-1])
    with served("--method", "suffix", "--k", "2", "--set", NO_GLOBAL) as state:
        run_module("-m", "atlas_ab.collect", "--url", state["url"], "--arm", "vllm_suffix_k2",
                   "--out", str(tmp_path / "vllm"), "--token-ids", "--ignore-eos", "--no-progress", cwd=tmp_path)
    run_module("-m", "atlas_ab", "+arm=suffix", f"arm.{NO_GLOBAL}", "runner.progress=false",
               f"hydra.run.dir={tmp_path / 'ours'}", cwd=ROOT)
    out = json.loads(run_module("-m", "atlas_ab.engines.vllm.compare", str(tmp_path / "ours"), str(tmp_path / "vllm"),
                                "--json", cwd=ROOT).stdout)
    n = out["requests"]
    assert n == 128 and out["same_vs_transformers"] == out["same_vs_ours"] == out["ours_vs_transformers"] == n
    assert out["steps_only_ours"] == out["steps_only_vllm"] == 0 and out["steps_both"] > 1500
    assert out["same_accept"] == out["steps_both"], out["step_diffs"][:5]
