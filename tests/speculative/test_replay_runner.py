"""Replay mode through the session and the real runner (default model, tiny workload, CPU fp32),
and the trajectory cache: built once, atomically, safe when several jobs start together."""
import json
import multiprocessing
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from atlas_ab import AtlasError
from atlas_ab.run.session import run
from atlas_ab.speculative.trajectory import Trajectory
from atlas_ab.speculative.trajectory_store import TrajectoryStore, wave_file
from atlas_ab.telemetry.schema import TIMING_COLUMNS
from tests.helpers.compose import cfg_of

# one torch thread, as tests/conftest.py sets for every test: the default (every core) spins on a shared machine
BASE = ["workload=tiny", "runner.device=cpu", "runner.batch_width=2", "runner.progress=false", "runner.threads=1"]


def steps_of(d: Path) -> pa.Table:
    m = json.loads((d / "manifest.json").read_text())
    t = pa.concat_tables([pq.read_table(d / s["steps"]) for s in m["shards"]])
    return t.drop([*TIMING_COLUMNS, "target", "conf"]).sort_by([("doc_id", "ascending"), ("turn", "ascending"),
                                                          ("step", "ascending")])


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("trajectories")


def replay(arm, cache, d, *extra):
    return run(cfg_of(*BASE, f"+arm={arm}", "runner.mode=replay", f"runner.trajectories={cache}", *extra), d)


@pytest.mark.slow        # three runs of the real runner end to end (replay, live, a second arm's replay)
def test_replay_runs_record_their_trajectory_and_equal_live(tmp_path, cache):
    m = replay("refeed_on", cache, tmp_path / "a")
    assert m["status"] == "complete" and m["mode"] == "replay"
    r = m["replay"]
    assert r["built"] and r["build_s"] > 0 and r["hash"].startswith("sha256:")
    assert Path(r["path"]).parent == cache and (Path(r["path"]) / "meta.json").exists()
    assert r["bytes_per_position"] == 256 * 4 + 16          # d=256 fp32 + token, argmax, two margins
    # wave 0 also ran live (runner.replay_check_waves=1): no row and no text differs on CPU fp32
    c = m["replay_check"]
    assert c["waves"] == 1 and c["rows_matched"] > 0 and c["rows_differ"] == 0 and c["trajectories_left"] == 0
    assert "replay_check" in m["shards"][0] and "replay_check" not in m["shards"][1]
    assert m["gate"]["passed"] and m["gate"]["by"] == "live+replay"
    assert m["shards"][1]["gate"]["by"] == "replay"
    t = m["timings"]
    assert 0 < t["live_check"] < t["first_wave"] <= t["waves"]    # only wave 0 ran live, inside its wave
    steps = pa.concat_tables([pq.read_table(tmp_path / "a" / s["steps"]) for s in m["shards"]])
    # no timing passes for engine speed
    assert all(steps.column(c).null_count == steps.num_rows for c in TIMING_COLUMNS)
    live = run(cfg_of(*BASE, "+arm=refeed_on"), tmp_path / "live")
    assert live["mode"] == "live" and live["replay"] is None and live["gate"]["by"] == "live"
    assert steps_of(tmp_path / "a").equals(steps_of(tmp_path / "live"))   # discrete columns: equal on any CPU
    assert m["summary"] == live["summary"]
    # a second arm of the sweep reuses the stored trajectory
    m2 = replay("catchup_on", cache, tmp_path / "b", "runner.replay_check_waves=0")
    assert not m2["replay"]["built"] and m2["replay"]["build_s"] is None and m2["replay"]["hash"] == r["hash"]
    assert m2["gate"]["by"] == "replay" and m2.get("replay_check") is None
    assert m2["timings"]["live_check"] == 0.0 and live["timings"]["live_check"] == 0.0


@pytest.mark.slow        # two runs of the real runner end to end (a tree arm replayed, then live)
def test_a_tree_arm_replays_through_the_runner_and_equals_live(tmp_path, cache):
    m = replay("tree_top2", cache, tmp_path / "tree")
    assert m["status"] == "complete" and m["mode"] == "replay" and m["gate"]["by"] == "live+replay"
    c = m["replay_check"]      # wave 0 also ran live: no row and no text differs on CPU fp32
    assert c["rows_matched"] == c["rows_replay"] > 0 and c["rows_differ"] == 0 and c["trajectories_left"] == 0
    live = run(cfg_of(*BASE, "+arm=tree_top2"), tmp_path / "live")
    assert steps_of(tmp_path / "tree").equals(steps_of(tmp_path / "live"))   # tree_path included
    assert m["summary"] == live["summary"]


@pytest.mark.slow        # three runs of the real runner end to end (whole, crashed, resumed)
def test_replay_resumes_by_wave(tmp_path, cache, monkeypatch):
    from atlas_ab.run.runner import Runner
    full = tmp_path / "full"
    replay("ring_prefill_on", cache, full)
    orig = Runner.run_wave

    def crash_at_1(self, i, on_step=None):
        if i == 1:
            raise RuntimeError("crash")
        return orig(self, i, on_step)

    d = tmp_path / "crashed"
    monkeypatch.setattr(Runner, "run_wave", crash_at_1)
    with pytest.raises(RuntimeError):
        replay("ring_prefill_on", cache, d)
    monkeypatch.setattr(Runner, "run_wave", orig)
    m = replay("ring_prefill_on", cache, d, f"runner.resume={d}")
    assert m["status"] == "complete" and m["resumed"] and [s["wave"] for s in m["shards"]] == [0, 1]
    assert steps_of(d).equals(steps_of(full))


def test_a_corrupt_trajectory_is_refused_in_one_line(tmp_path, cache):
    m = replay("baseline", cache, tmp_path / "a", "runner.replay_check_waves=0")
    victim = Path(m["replay"]["path"]) / wave_file(1)
    data = bytearray(victim.read_bytes())
    data[-1] ^= 1
    victim.write_bytes(bytes(data))
    with pytest.raises(AtlasError, match="sha256 is not the one recorded"):
        replay("baseline", cache, tmp_path / "b", "runner.replay_check_waves=0")


# -- the cache on its own: concurrency and atomicity --------------------------------------

def tiny_trajectory(i: int) -> Trajectory:
    return Trajectory(doc_ids=np.array([i]), tokens=np.arange(6, dtype=np.int32)[None],
                      argmax=np.zeros((1, 6), np.int32),
                      hiddens=torch.full((1, 6, 4), float(i)), ext=np.zeros((1, 1, 8), np.int32),
                      gen_start=np.array([[3]]), margins=np.zeros((1, 6, 2), np.float32), gen_tokens=3)


def _ensure(root, marks, out):
    def build(i):
        with open(marks, "a") as f:
            f.write(f"build {i}\n")
        time.sleep(0.5)              # long enough for the other job to arrive and wait
        return tiny_trajectory(i)
    out.put(TrajectoryStore(root, {"model_hash": "m", "workload_hash": "w"}).ensure(2, build))


@pytest.mark.slow        # concurrent processes
def test_jobs_starting_together_build_once_and_read_the_same(tmp_path):
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    marks = tmp_path / "marks"
    jobs = [ctx.Process(target=_ensure, args=(tmp_path / "cache", marks, out)) for _ in range(3)]
    for j in jobs:
        j.start()
    infos = [out.get(timeout=60) for _ in jobs]
    for j in jobs:
        j.join(timeout=60)
    assert marks.read_text().splitlines() == ["build 0", "build 1"]       # one builder, once
    assert sorted(i["built"] for i in infos) == [False, False, True]
    assert len({i["hash"] for i in infos}) == 1
    assert all(i["waited_s"] > 0.3 for i in infos if not i["built"])
    store = TrajectoryStore(tmp_path / "cache", {"model_hash": "m", "workload_hash": "w"})
    assert float(store.load(1).hiddens[0, 0, 0]) == 1.0
    assert not list((tmp_path / "cache").glob(".*tmp*"))


def test_a_builder_that_dies_leaves_nothing_that_reads_as_a_trajectory(tmp_path):
    store = TrajectoryStore(tmp_path, {"model_hash": "m"})

    def dies(i):
        if i == 1:
            raise RuntimeError("killed mid-build")
        return tiny_trajectory(i)
    with pytest.raises(RuntimeError):
        store.ensure(2, dies)
    assert not store.dir.exists() and not list(tmp_path.glob(".*tmp*"))
    (tmp_path / f".{store.key}.tmp-999999").mkdir()           # debris of a killed (-9) builder
    info = store.ensure(2, tiny_trajectory)
    assert info["built"] and not list(tmp_path.glob(".*tmp*"))
    # another key never reads it
    other = TrajectoryStore(tmp_path, {"model_hash": "other"})
    assert other.key != store.key


def test_mode_and_check_waves_are_validated():
    from atlas_ab.config.structured import RunnerConfig, validate_runner
    with pytest.raises(AtlasError, match="runner.mode='fast' must be one of live, replay"):
        validate_runner(RunnerConfig(mode="fast"))
    with pytest.raises(AtlasError, match="replay_check_waves"):
        validate_runner(RunnerConfig(replay_check_waves=-1))


@pytest.mark.slow        # four runs of the real runner end to end (each weightless family replayed, then live)
@pytest.mark.parametrize("family", ["ngram", "suffix"])
def test_a_weightless_family_replays_through_the_runner_and_equals_live(tmp_path, family):
    """Suffix decoding carries its global tree from wave to wave: the live check of wave 0 starts
    from the tree the replay of wave 0 started from, and wave 1 from the one it left (proposers/base.py,
    `carried`); so replay and live build one tree, and their steps are equal."""
    # its own trajectories: the module's cache holds one test_a_corrupt_trajectory_is_refused_in_one_line corrupts
    m = replay(family, tmp_path / "trajectories", tmp_path / "rep")
    assert m["status"] == "complete" and m["gate"]["by"] == "live+replay" and len(m["shards"]) >= 2
    c = m["replay_check"]
    assert c["rows_matched"] == c["rows_replay"] > 0 and c["rows_differ"] == 0 and c["trajectories_left"] == 0
    live = run(cfg_of(*BASE, f"+arm={family}"), tmp_path / "live")
    assert steps_of(tmp_path / "rep").equals(steps_of(tmp_path / "live"))
    assert m["summary"] == live["summary"]
