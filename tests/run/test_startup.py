"""run/startup.py (a run's wall time by phase, printed and in the manifest) and
runtime/compile_cache.py (where inductor's and Triton's caches persist)."""
import json
import subprocess
import sys
import textwrap

import pytest

from atlas_ab.run import startup
from atlas_ab.run.startup import PHASES, StartupClock, startup_line
from atlas_ab.runtime import compile_cache
from tests.helpers import faults
from tests.helpers.cli import ROOT, cli, env_with


class Tick:
    """A clock that reads the values it is given, in order."""

    def __init__(self, *values):
        self.values = list(values)

    def __call__(self):
        return self.values.pop(0)


def test_the_phases_are_the_marks_differences_from_the_process_start(monkeypatch):
    # process 1.5 s old when the clock starts at t=10; imported at 12, built at 13.25, summary at 20
    monkeypatch.setattr(startup, "SESSIONS", [0])
    clock = StartupClock(clock=Tick(10.0, 12.0, 13.25, 20.0), process_age=lambda: 1.5)
    clock.imported()
    clock.built({"TRITON_CACHE_DIR": {"dir": "/c/triton", "set_by": "runner.compile_cache", "files": 0}})
    clock.wave_done(4.0)
    clock.wave_done(1.5)
    t = clock.timings()
    assert set(PHASES) <= set(t)
    assert (t["import"], t["model"], t["first_wave"], t["waves"], t["total"]) == (3.5, 1.25, 4.0, 5.5, 11.5)
    assert t["compile"] == 0.0 and t["capture"] == 0.0        # this test process captured nothing
    assert startup_line(t) == ("time: total 11.5s: import 3.5s, model 1.2s, waves 5.5s (the first 4.0s; "
                               "compile 0.0s, capture 0.0s in all), the rest 1.2s; caches cold")


def test_the_kernels_triton_built_during_the_run_are_counted(monkeypatch, tmp_path):
    """kernels_built: the binaries Triton's cache gained between the engine's build and the summary
    (one per kernel it compiled: a cold start's hidden cost), named in the time line when any."""
    monkeypatch.setattr(startup, "SESSIONS", [0])
    tc = tmp_path / "triton"
    (tc / "a").mkdir(parents=True)
    (tc / "a" / "old.cubin").write_bytes(b"")             # there before the run: not counted
    clock = StartupClock(clock=Tick(10.0, 12.0, 13.25, 20.0), process_age=lambda: 1.5)
    clock.imported()
    clock.built({"TRITON_CACHE_DIR": {"dir": str(tc), "set_by": "runner.compile_cache", "files": 1}})
    for i in range(3):
        (tc / f"k{i}").mkdir()
        (tc / f"k{i}" / "attend.cubin").write_bytes(b"")
        (tc / f"k{i}" / "attend.json").write_text("{}")   # metadata: not a kernel
    clock.wave_done(4.0)
    t = clock.timings()
    assert t["kernels_built"] == 3
    assert startup_line(t).endswith("; caches warm, Triton built 3 kernels")
    assert compile_cache.kernels(tmp_path / "none") == 0


def test_a_replay_runs_live_check_is_shown_inside_its_waves(monkeypatch):
    # two waves of 4.0 and 1.5 s, the first checked live for 2.5 of its 4.0 s
    monkeypatch.setattr(startup, "SESSIONS", [0])
    clock = StartupClock(clock=Tick(10.0, 12.0, 13.25, 20.0), process_age=lambda: 1.5)
    clock.imported()
    clock.built()
    clock.wave_done(4.0, live_check=2.5)
    clock.wave_done(1.5)
    t = clock.timings()
    assert (t["waves"], t["live_check"]) == (5.5, 2.5)
    assert startup_line(t) == ("time: total 11.5s: import 3.5s, model 1.2s, waves 5.5s (the first 4.0s; "
                               "compile 0.0s, capture 0.0s, live check 2.5s in all), the rest 1.2s")


def test_a_sweeps_later_job_counts_from_its_own_start(monkeypatch):
    monkeypatch.setattr(startup, "SESSIONS", [1])       # a job before it ran in this process
    clock = StartupClock(clock=Tick(10.0, 10.5, 20.0), process_age=lambda: 30.0)
    clock.imported()
    t = clock.timings()
    assert t["import"] == 0.5 and t["total"] == 10.0


def test_a_run_without_marks_prints_dashes_not_numbers(monkeypatch):
    monkeypatch.setattr(startup, "SESSIONS", [0])
    clock = StartupClock(clock=Tick(0.0, 2.0), process_age=lambda: None)
    t = clock.timings()
    assert t["import"] is None and t["model"] is None and t["first_wave"] is None and t["total"] == 2.0
    assert startup_line(t).startswith("time: total 2.0s: import -, model -, waves 0.0s (the first -;")
    assert startup_line(t).endswith("the rest -")


def test_the_cache_dirs_go_under_the_root_unless_the_environment_names_them(tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path), "TRITON_CACHE_DIR": "/mine"}
    got = compile_cache.persist("auto", env)
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "atlas_ab" / "inductor")
    assert env["TRITON_CACHE_DIR"] == "/mine"
    assert got["TORCHINDUCTOR_CACHE_DIR"] == {"dir": str(tmp_path / "atlas_ab" / "inductor"),
                                              "set_by": "runner.compile_cache", "files": 0}
    assert got["TRITON_CACHE_DIR"]["set_by"] == "environment"
    assert env["TORCHINDUCTOR_FX_GRAPH_CACHE"] == "1" and env["TORCHINDUCTOR_AUTOGRAD_CACHE"] == "1"
    assert env["TORCHINDUCTOR_COMPILE_THREADS"] == "1"        # inductor compiles in the process
    mine = {"XDG_CACHE_HOME": str(tmp_path), "TORCHINDUCTOR_COMPILE_THREADS": "8"}
    compile_cache.persist("auto", mine)
    assert mine["TORCHINDUCTOR_COMPILE_THREADS"] == "8"       # the user's environment wins
    (tmp_path / "atlas_ab" / "inductor" / "fxgraph").mkdir(parents=True)
    (tmp_path / "atlas_ab" / "inductor" / "fxgraph" / "entry").write_text("x")
    assert compile_cache.persist("auto", env)["TORCHINDUCTOR_CACHE_DIR"]["files"] == 1     # now warm


def test_none_leaves_the_libraries_defaults_and_a_path_is_expanded(tmp_path, monkeypatch):
    env = {}
    got = compile_cache.persist("none", env)
    assert env == {} and {v["set_by"] for v in got.values()} == {"default"}
    monkeypatch.setenv("HOME", str(tmp_path))
    env = {}
    compile_cache.persist("~/cc", env)
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "cc" / "triton")


def test_a_root_that_cannot_be_written_leaves_the_defaults(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    env = {}
    got = compile_cache.persist(str(tmp_path / "file"), env)
    assert "TRITON_CACHE_DIR" not in env and got["TRITON_CACHE_DIR"]["set_by"] == "default"


def test_a_run_prints_its_phases_and_keeps_them_in_the_manifest(tmp_path):
    d = tmp_path / "run"
    code, out, err = cli(*faults.FAKE, f"hydra.run.dir={d}")
    assert code == 0, err
    t = json.loads((d / "manifest.json").read_text())["timings"]
    assert set(PHASES) <= set(t) and all(t[k] is not None and t[k] >= 0 for k in PHASES), t
    assert t["import"] <= t["total"] and t["first_wave"] <= t["waves"] <= t["total"]
    line = [ln for ln in out.splitlines() if ln.startswith("time: total ")]
    assert len(line) == 1 and f"import {t['import']:.1f}s" in line[0], out


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="inductor's C++ backend")
def test_a_second_process_finds_the_first_ones_compiled_region_in_the_cache(tmp_path):
    """Two processes compile the same @fused region through inductor's C++ backend with the cache
    root set by compile_cache.persist: the first writes FX-graph entries under it, the second adds
    none (it loads them) and both give the eager result."""
    prog = textwrap.dedent(f"""
        import json, os, sys, torch
        from atlas_ab.runtime import compile_cache, fusion
        got = compile_cache.persist({str(tmp_path / 'cc')!r})
        @fusion.fused
        def region(x, k: int):
            return torch.where(x > k, x.cumsum(0), x * 2)
        x = torch.arange(16)
        same = region(x, 5, fuse=True).tolist() == region.eager(x, 5).tolist()
        print(json.dumps({{"same": same, "files_before": got["TORCHINDUCTOR_CACHE_DIR"]["files"],
                          "compile_s": fusion.compile_seconds()}}))
    """)
    env = env_with(OMP_NUM_THREADS=1)
    for var in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        env.pop(var, None)

    def run():
        p = subprocess.run([sys.executable, "-c", prog], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=900)
        assert p.returncode == 0, p.stderr[-2000:]
        return json.loads(p.stdout.strip().splitlines()[-1])

    fx = tmp_path / "cc" / "inductor" / "fxgraph"
    first = run()
    entries = sorted(p.relative_to(fx) for p in fx.rglob("*") if p.is_file())
    second = run()
    assert first["same"] and second["same"]
    assert first["files_before"] == 0 and second["files_before"] > 0
    assert entries and sorted(p.relative_to(fx) for p in fx.rglob("*") if p.is_file()) == entries
    assert first["compile_s"] > 0 and second["compile_s"] > 0     # both compiled (the second from the cache)
