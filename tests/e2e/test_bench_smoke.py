"""CI smoke of the benchmarks (tiny, CPU, not timed): they must not rot."""
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
needs_default = pytest.mark.skipif(not (ROOT / "atlas_ab/models/default/model.safetensors").exists(),
                                   reason="the embedded default model is not in this checkout")
# each runs a benchmark script end to end in a subprocess: the whole suite (CI) runs them, the fast tier does not
pytestmark = pytest.mark.slow


def bench_module(name: str):
    """A module of bench/, imported as the benches import each other (from their own folder)."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "bench"))


def smoke(script: str, tmp_path, *args: str) -> dict:
    out = tmp_path / "bench.json"
    r = subprocess.run([sys.executable, str(ROOT / "bench" / script), "--smoke", "--json", str(out), *args],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(out.read_text())


@needs_default
def test_bench_runner_smoke(tmp_path):
    res = smoke("bench_runner.py", tmp_path)
    assert res["smoke"] and res["grid"] and {"B", "K", "rows_per_s", "bare_forward_ms"} <= set(res["grid"][0])
    assert set(res["levers"]) == {"fingerprints", "fingerprints_step_by_step", "fingerprints_host_events",
                                  "shadow_topk_4"}
    assert res["ten_k"]["rows"] > 0
    assert res["peer"]["same_text"].split("/")[0] == res["peer"]["same_text"].split("/")[1]
    prof = res["profile"]["default"]            # the steady-state profile and the host's split by loop stage
    assert prof["arm"] == "k2_refeed" and prof["batched_steps"] > 0
    split = prof["host_split_ms_per_step"]
    assert set(split) == {"plan", "run", "commit", "flush", "propose_and_feed", "read_and_rest", "step"}
    assert split["step"] >= split["plan"] + split["run"] + split["commit"] > 0


@needs_default
def test_bench_runner_only_fingerprints_smoke(tmp_path):
    """The FINGERPRINTS goal's figure alone: no grid, no other lever, no peer."""
    res = smoke("bench_runner.py", tmp_path, "--only-fingerprints")
    assert res["grid"] == [] and list(res["levers"]) == ["fingerprints"] and "peer" not in res
    assert len(res["levers"]["fingerprints"]["run_ratios"]) == 2          # the smoke's two alternations


def test_bench_forward_smoke(tmp_path):
    """The forward roofline benchmark runs end to end on the CPU (Triton's interpreter) and
    reports every column the issue asks for; its correctness check agrees with the torch path."""
    out = tmp_path / "forward.json"
    r = subprocess.run([sys.executable, str(ROOT / "bench/bench_forward.py"), "--smoke", "--json", str(out)],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(out.read_text())
    assert res["smoke"] and {"copy_bytes_per_s", "matmul_flop_per_s", "graph_kernel_us"} <= set(res["rates"])
    row = res["grid"][0]
    assert {"old_ms", "new_ms", "bound_ms", "memory_ms", "flop_ms", "ratio_new", "kv_bytes", "weight_bytes",
            "launch_floor_ms", "new_skinny_ms"} <= set(row)
    assert set(row["parts_ms"]) == set(row["parts_bound_ms"]) == {"matmuls", "attention", "norms_rope_silu", "misc"}
    assert res["drafts"][0]["draft_new_ms"] > 0 and res["matmuls"][0]["skinny_us"] > 0
    new = res["correctness"]["smoke"]["new"]
    assert new["argmax_agree"] == 1.0 and new["hidden_rel_err"] < 1e-5
    assert res["memory"]["kv_bytes_per_slot_trunk"] == 2 * 2 * 2 * 16 * 4     # layers x K,V x kv heads x D x fp32
    assert "| smoke | 2 | 1 |" in r.stdout
    assert row["rounds"] == 1 and row["new_ms_rounds"] == [row["new_ms"]] and len(row["old_ms_rounds"]) == 1


def test_forward_goal_is_judged_on_five_alternations():
    """bench/goals.py: the forward goal's figure is each cell's median of >= 5 alternations; a run
    with fewer is shown, not judged. The verdict is at the rated bandwidth where the device has one."""
    forward_goals = bench_module("goals").forward_goals
    grid = [dict(shape="5.7B", ratio_new=1.2, rounds=5), dict(shape="5.7B", ratio_new=1.25, rounds=5),
            dict(shape="0.77B", ratio_new=9.0, rounds=5)]
    rated = [dict(r, ratio_new=r["ratio_new"] * 1.5) for r in grid]
    shown, verdict = forward_goals(grid, rated)
    assert shown.met is None and shown.measured == 1.25                     # the worst 5.7B cell, not judged
    assert verdict.measured == pytest.approx(1.875) and verdict.met is False
    (alone,) = forward_goals(grid)
    assert alone.met is True and alone.measured == 1.25
    few = [dict(r, rounds=1) for r in grid]
    assert [g.met for g in forward_goals(few, rated)] == [None, None]
    assert "(< 5: not judged)" in forward_goals(few)[0].detail


@needs_default
def test_bench_startup_smoke(tmp_path):
    """The start-up bench times each phase and each wave's gate, and judges both goals."""
    res = smoke("bench_startup.py", tmp_path)
    assert res["smoke"] and res["runner_init_s"] > 0 and res["before_first_step_s"] > res["runner_init_s"]
    for wave in ("first_wave", "same_wave_again"):
        w = res[wave]
        assert w["gate_passed"] and w["gate_s"] > 0 and w["gate_checked_tokens"] > 0
        assert w["gate_over_steps"] == w["gate_s"] / (w["step_ms_sum"] / 1e3)
    assert [g["name"] for g in res["goals"]] == ["start-up before the first step (warm machine)",
                                                 "lossless gate / the steps' time"]


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


@needs_default
def test_prefill_boundary_rows_smoke(tmp_path):
    res = smoke("prefill_boundary_rows.py", tmp_path)
    assert set(res) == {"prefill_catchup", "prefill_refeed"}
    assert res["prefill_catchup"]["rows_fed"] == 0             # without REFEED the ring holds none of them
    r = res["prefill_refeed"]
    assert r["rows_fed"] >= r["boundaries_fed"] == r["warm_boundaries"] > 0


@needs_default
def test_bench_writes_smoke(tmp_path):
    res = smoke("bench_writes.py", tmp_path)
    assert res["smoke"] and res["rows"] > 0 and res["waves"] == 2
    assert set(res["wall_s"]) == {"fp_off_in_line", "fp_off_behind", "fp_on_in_line", "fp_on_behind"}
    assert set(res["add_shard_ms_median"]) == set(res["wall_s"])     # every run wrote its shards


def test_fingerprints_goal_is_the_median_of_its_alternations_with_their_range():
    runner_goals = bench_module("goals").runner_goals
    def fp(ratios):
        return runner_goals([], {"fingerprints": {"run_ratios": ratios}})[-1]
    straddles = fp([0.92, 0.99, 0.85, 0.91, 0.96])          # its median 0.92 is below 0.95, its max above
    assert straddles.measured == 0.92 and straddles.interval == (0.85, 0.99)
    assert straddles.met is None and straddles.verdict == "INSIDE ITS NOISE"
    assert straddles.detail == "median of 5 alternations (they ranged 0.850-0.990)"
    assert "| 0.920 (0.850-0.990) | INSIDE ITS NOISE |" in straddles.line()
    # an H200 call: bench/results/bench_runner_default_fp_h200_2026-12-01s8d.json
    below = fp([0.853, 0.921, 0.945, 0.904, 0.919])
    assert below.met is False and below.verdict == "NOT MET"
    above = fp([0.96, 0.99, 0.951, 1.02, 0.97])
    assert above.met is True and above.as_dict()["verdict"] == "MET"
    few = fp([0.97, 0.96])
    assert few.met is None and few.verdict == "-" and few.detail.endswith("(< 5: not judged)")


def test_median_interval_golden():
    """Order statistics (x_(k), x_(n+1-k)), k the largest with 1 - 2 P(Bin(n, 1/2) <= k-1) >= 0.90:
    n=5: min..max, 1 - 2/32; n=10: 2nd..9th, 1 - 2 * 11/1024; n=20: 6th..15th, 1 - 2 * 21700/2^20
    (21700 = C(20,0) + ... + C(20,5))."""
    median_interval = bench_module("goals").median_interval
    assert median_interval([5, 1, 4, 2, 3]) == (1, 5, 0.9375)
    lo, hi, cov = median_interval(list(range(10, 0, -1)))
    assert (lo, hi) == (2, 9) and cov == pytest.approx(1 - 22 / 1024, abs=1e-12)
    lo, hi, cov = median_interval(list(range(1, 21)))
    assert (lo, hi) == (6, 15) and cov == pytest.approx(1 - 43400 / 2 ** 20, abs=1e-12)


def test_runner_goal_is_judged_on_its_cells_intervals():
    """The worst cell's interval: each alternation's step median over the cell's bare verify."""
    runner_goals = bench_module("goals").runner_goals

    def cell(K, steps, bare=1.0):
        return dict(model="llama8b", B=16, K=K, bare_forward_ms=bare, step_ms_medians=steps,
                    step_over_bare=sorted(steps)[len(steps) // 2] / bare)
    fine = cell(1, [1.05, 1.06, 1.07, 1.08, 1.09])
    noisy = cell(2, [1.08, 1.09, 1.095, 1.12, 1.13])
    slow = cell(3, [1.2, 1.21, 1.22, 1.23, 1.24])
    goal = runner_goals([fine, noisy], {})[1]
    assert goal.measured == pytest.approx(1.095) and goal.interval == (1.08, 1.13) and goal.met is None
    assert runner_goals([fine], {})[1].met is True
    assert runner_goals([fine, noisy, slow], {})[1].met is False
    smoke = cell(1, [1.2])                                    # one alternation: the figure alone decides
    assert runner_goals([smoke], {})[1].interval is None and runner_goals([smoke], {})[1].met is False


def test_step_kernels_summary_literal():
    """bench/bench_step_kernels.py's per-step summary of a profile: two steps of [attend 0-10 us, an
    index add 11-13 us, a generated kernel 14-15 us]: 3 kernels a step, 13 us busy, gaps
    (1 + 1 + 5 + 1 + 1) / 2, the add and the generated kernel as the glue, the latter generated."""
    summary = bench_module("bench_step_kernels").summary

    class Range:
        def __init__(self, start, end):
            self.start, self.end = start, end

        def elapsed_us(self):
            return self.end - self.start

    class Kernel:
        def __init__(self, name, start, end):
            self.name, self.time_range = name, Range(start, end)

    evs = [Kernel("attend", 0, 10), Kernel("index_add", 11, 13), Kernel("triton_poi_fused_add_0", 14, 15),
           Kernel("attend", 20, 30), Kernel("index_add", 31, 33), Kernel("triton_poi_fused_add_0", 34, 35)]
    s = summary(evs, 2)
    assert (s["kernels"], s["busy_us"], s["gaps_us"], s["glue_kernels"], s["glue_busy_us"]) == (3, 13, 4.5, 2, 3)
    assert (s["generated_kernels"], s["generated_busy_us"]) == (1, 1)
    assert s["rows"] == [["attend", 1.0, 10.0], ["index_add", 1.0, 2.0], ["triton_poi_fused_add_0", 1.0, 1.0]]


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="with a GPU it would profile")
def test_step_kernels_refuses_a_machine_without_a_gpu():
    r = subprocess.run([sys.executable, str(ROOT / "bench/bench_step_kernels.py")], capture_output=True, text=True,
                       timeout=300, cwd=ROOT)
    assert r.returncode != 0
    assert r.stderr.strip().splitlines()[-1] == "bench_step_kernels: needs a GPU (the step it profiles is a CUDA graph)"


@needs_default
def test_bench_gate_power_smoke(tmp_path):
    """The gate's power bench: a clean cell never fails the gate; every run a bug hit in fp32 fails it."""
    res = smoke("bench_gate_power.py", tmp_path)
    assert res["smoke"] and res["dtype"] == "float32" and res["gate_sequences"] == 2
    none, bug = res["cells"]
    assert (none["bug"], none["failed"], none["hits_recorded"]) == ("none", 0, 0)
    assert bug["bug"] == "wrong_accept" and bug["failed"] == bug["runs_hit"] == bug["failed_of_runs_hit"]


def test_bench_fp8_head_smoke(tmp_path):
    """bench/bench_fp8_head.py (issue 50) end to end, emulated on the CPU: every row has its six times."""
    res = smoke("bench_fp8_head.py", tmp_path)
    assert [r["R"] for r in res["rows"]] == [1, 16]
    assert all(r[k] > 0 for r in res["rows"] for k in ("head_bf16", "head_fp8", "gemm_bf16", "propose_bf16",
                                                        "propose_fp8"))


def test_bench_suffix_tree_smoke(tmp_path):
    res = smoke("bench_suffix_tree.py", tmp_path)
    assert res["smoke"] and len(res["ids"]) == len(res["objects"]) == 1 and res["ratio"] > 0
