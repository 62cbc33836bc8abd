"""bench/goals.py's issue-41 goals: the step over its physical limit, and end to end (hand-computed)."""
import pytest

from tests.e2e.test_bench_smoke import bench_module

goals = bench_module("goals")


def test_the_step_limit_is_its_bytes_at_the_bandwidth():
    # 10 GB of trunk + 2 x 0.5 GB of drafter + 1 GB of KV at 4.8 TB/s: 12 GB / 4.8e12 B/s = 2.5 ms
    assert goals.step_limit_ms(10e9, 0.5e9, 1e9, 2, 4.8e12) == pytest.approx(2.5, rel=1e-12)


def test_the_limit_goal_is_the_worst_cell_judged_on_its_interval():
    def cell(B, K, steps, limit):
        return dict(model="llama8b", B=B, K=K, bare_forward_ms=1.0, step_ms_medians=steps, limit_ms=limit,
                    step_over_bare=1.0, step_over_limit=sorted(steps)[len(steps) // 2] / limit)
    fine = cell(16, 1, [3.0, 3.1, 3.2, 3.3, 3.4], 2.5)          # 1.20-1.36: median 1.28
    slow = cell(64, 3, [4.0, 4.1, 4.2, 4.3, 4.4], 3.0)          # 1.333-1.467: median 1.4
    (limit,) = [g for g in goals.runner_goals([fine, slow], {}) if "5.7B" in g.name and "limit" in g.name]
    assert limit.target == 1.35 and limit.measured == pytest.approx(1.4)
    assert limit.interval == pytest.approx((4.0 / 3.0, 4.4 / 3.0))     # the largest low end, the largest high
    assert limit.met is None                                     # 1.333 <= 1.35 < 1.467: inside its noise
    alone = [g for g in goals.runner_goals([fine], {}) if "5.7B" in g.name and "limit" in g.name][0]
    assert alone.met is None and alone.interval == pytest.approx((3.0 / 2.5, 3.4 / 2.5))
    unrated = [g for g in goals.runner_goals([dict(fine, limit_ms=None)], {}) if "limit" in g.name][0]
    assert unrated.measured is None and "no rated bandwidth" in unrated.detail


def run(job, wall=None, rc=0, elapsed=None):
    return dict(job=job, complete=wall is not None, wall_s=wall, elapsed_s=elapsed or wall, rc=rc, jobs=1,
                time_lines=[f"time: total {wall}s"] if wall else [])


def test_the_end_to_end_goals_one_run_each():
    runs = [run("main", 10.0), run("main", 7.5), run("main_cpu", 12.5), run("claims", None, "timeout", 240.0),
            run("llama8b", None, 1), run("tree", 30.0)]
    (cold, warm, vs_cpu_cold, vs_cpu, fuse, pool, cold_1t, cold_pool, eager, claims, big,
     tree) = goals.e2e_goals(runs)
    for shown in (fuse, pool, cold_1t, cold_pool, eager):                                  # shown, not judged
        assert shown.verdict == "-" and shown.detail == "not run"
    assert (cold.measured, cold.verdict, cold.detail) == (10.0, "NOT MET", "time: total 10.0s")
    assert (warm.measured, warm.verdict) == (7.5, "MET")
    assert vs_cpu_cold.measured == pytest.approx(0.8) and vs_cpu_cold.verdict == "MET"   # 10.0 / 12.5
    assert vs_cpu.measured == pytest.approx(0.6) and vs_cpu.verdict == "MET" and "CPU 12.5 s" in vs_cpu.detail
    assert claims.measured == 240.0 and claims.verdict == "NOT MET" and "at least 240 s" in claims.detail
    assert big.measured is None and big.verdict == "-" and big.detail == "failed (exit 1)"
    assert tree.measured == 30.0 and tree.verdict == "-"                                  # measured, no goal
    assert all(x.interval is None for x in goals.e2e_goals(runs))


def test_a_replay_sweeps_live_checks_are_summed_over_its_jobs():
    sweep = dict(run("claims", 36.0), timings=[dict(waves=4.0, live_check=2.5), dict(waves=2.0, live_check=1.0),
                                               dict(waves=1.0, live_check=0.0), None])
    claims = [g for g in goals.e2e_goals([sweep]) if g.name.startswith("claims")][0]
    assert claims.detail == "time: total 36.0s; live check 3.5 s of 7.0 s of waves over 3 job(s)"
    live = [g for g in goals.e2e_goals([dict(run("main", 5.0), timings=[dict(waves=1.0, live_check=0.0)])])][0]
    assert live.detail == "time: total 5.0s"                                   # a live run: nothing added
