"""`python -m atlas_ab` as a user runs it: subprocesses, one-line errors, kill -9 + resume, joblib sweeps.

Every test here is `slow` (`pytest -m "not slow"` leaves them out): each runs the CLI end to end,
with the fake runner (tests/helpers/fakerunner.py) or the real runner on a tiny checkpoint written
to a temp dir. The fast tier's one `python -m atlas_ab` subprocess is
tests/analysis/test_verdicts.py::test_a_refused_rerun_leaves_nothing_in_the_run_it_refused.
"""
import json
import os
import signal
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from atlas_ab.telemetry.schema import TIMING_COLUMNS
from tests.helpers.cli import cli, env_with as _env

ROOT = Path(__file__).resolve().parents[2]
FAKE = ["runner.engine._target_=tests.helpers.fakerunner.FakeRunner", "runner.device=cpu"]


def manifest(d: Path) -> dict:
    return json.loads((d / "manifest.json").read_text())


def steps_of(d: Path) -> pa.Table:
    m = manifest(d)
    t = pa.concat_tables([pq.read_table(d / s["steps"]) for s in m["shards"]])
    # timings are the run's own (a resumed wave times its first steps as warm-up again)
    t = t.drop([c for c in TIMING_COLUMNS if c in t.column_names])
    return t.sort_by([("doc_id", "ascending"), ("turn", "ascending"), ("step", "ascending")])



# -- one-line errors -------------------------------------------------------------

BAD = {
    "unknown arm": (["+arm=nosuch"], "unknown arm 'nosuch'"),
    "unknown lever key": (["+arm=refeed_on", "arm.bogus=1"], "bogus"),
    "wrong type": (["+arm=k1", "arm.num_drafts=two"], "num_drafts"),
    "out of range": (["+arm=refeed_on", "arm.draft_conf=1.5"], "out of range"),
    "refeed without catchup": (["+arm=refeed_on", "arm.catchup=false"], "requires catchup"),
    "missing checkpoint": (["+arm=baseline", "model=path", "model.path=/nonexistent/ckpt"], "not found"),
    "corrupt checkpoint": (["+arm=baseline", "model=path", "model.path={corrupt}"], "config.json"),
    "unwritable run dir": (["+arm=baseline", "hydra.run.dir=/proc/atlas_ab/run"], "cannot write"),
}


def _bad_inputs_are_one_line_and_leave_no_data(tmp_path, names):
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "config.json").write_text("{not json")
    (corrupt / "model.safetensors").write_bytes(b"\x00" * 16)
    procs = {}
    for name in names:
        args = [a.format(corrupt=corrupt) for a in BAD[name][0]]
        run_dir = tmp_path / "runs" / name.replace(" ", "_")
        if not any(a.startswith("hydra.run.dir=") for a in args):
            args.append(f"hydra.run.dir={run_dir}")
        # the checkpoint cases go through the real runner (it must raise AtlasError)
        extra = [] if "checkpoint" in name else FAKE
        procs[name] = (cli("workload=tiny", *extra, *args, wait=False), run_dir)
    for name, (p, run_dir) in procs.items():
        out, err = p.communicate(timeout=300)
        lines = err.strip().splitlines()
        assert p.returncode == 2, (name, p.returncode, err[-2000:])
        assert len(lines) == 1 and lines[0].startswith("atlas_ab: error: "), (name, err)
        assert BAD[name][1] in lines[0], (name, lines[0])
        assert "Traceback" not in err
        if run_dir.exists():  # Hydra made it: it must say failed and hold no steps
            assert manifest(run_dir)["status"] == "failed", name
            assert not (run_dir / "steps").exists() or not any((run_dir / "steps").iterdir()), name


@pytest.mark.slow        # six CLI processes; tests/run/test_faults.py runs each case in-process through main()
def test_bad_inputs_are_one_line_and_leave_no_data(tmp_path):
    _bad_inputs_are_one_line_and_leave_no_data(tmp_path, [n for n in BAD if "checkpoint" not in n])


@pytest.mark.slow        # the real runner's engine (and torch) loads in each; test_store.py checks them in-process
def test_bad_checkpoints_are_one_line_and_leave_no_data(tmp_path):
    _bad_inputs_are_one_line_and_leave_no_data(tmp_path, [n for n in BAD if "checkpoint" in n])


# -- kill -9 and resume (fake runner) -------------------------------------------------

def _kill_after_first_shard(p, d: Path, timeout=120):
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            m = manifest(d)
            if m["shards"]:
                os.kill(p.pid, signal.SIGKILL)
                p.communicate()
                return m
        except (OSError, ValueError, KeyError):
            pass
        if p.poll() is not None:
            break
        time.sleep(0.02)
    p.kill()
    out, err = p.communicate()
    raise AssertionError(f"run ended before its first shard could be killed: {p.returncode} {err[-1500:]}")


def _kill_resume_compare(tmp_path, base, env_killed):
    full, killed = tmp_path / "full", tmp_path / "killed"
    p = cli(*base, f"hydra.run.dir={killed}", env=env_killed, wait=False)
    m = _kill_after_first_shard(p, killed)
    assert p.returncode == -signal.SIGKILL
    m = manifest(killed)
    assert m["status"] == "running" and 1 <= len(m["shards"]) < m["waves"]["total"]
    rc, out, err = cli(*base, f"runner.resume={killed}")
    assert rc == 0, err
    assert f"run: {killed}" in out and "resumed" in out
    rc, out2, err = cli(*base, f"hydra.run.dir={full}")
    assert rc == 0, err
    mk, mf = manifest(killed), manifest(full)
    assert mk["status"] == mf["status"] == "complete" and mk["resumed"] and not mf["resumed"]
    assert [s["wave"] for s in mk["shards"]] == list(range(mf["waves"]["total"]))
    # bit for bit: both processes take the default thread count and run each wave in the same shapes
    assert steps_of(killed).equals(steps_of(full))
    assert mk["rows"] == mf["rows"] and mk["workload"]["hash"] == mf["workload"]["hash"]
    # the original config is kept; the resume's own is filed beside it
    assert (killed / ".hydra" / "config.yaml").exists() and list((killed / ".hydra").glob("resume-*/config.yaml"))
    return mk


@pytest.mark.slow        # end to end: a run killed -9 in a subprocess, resumed, and rerun whole
def test_kill9_then_resume_matches_uninterrupted_fake(tmp_path):
    base = ["+arm=refeed_on", "workload=tiny", "runner.batch_width=1", *FAKE]
    _kill_resume_compare(tmp_path, base, _env(FAKE_RUNNER_KILL_AT=2))


@pytest.mark.slow        # three CLI runs end to end (tests/run/test_store.py checks the refusal in-process)
def test_resume_refuses_changed_config_in_one_line(tmp_path):
    d = tmp_path / "r"
    rc, _, err = cli("+arm=refeed_on", "workload=tiny", "runner.batch_width=1", *FAKE, f"hydra.run.dir={d}",
                     env=_env(FAKE_RUNNER_CRASH_AT=1))
    assert rc != 0 and manifest(d)["status"] == "failed"
    rc, _, err = cli("+arm=refeed_on", "workload=tiny", "runner.batch_width=2", *FAKE, f"runner.resume={d}")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "runner.batch_width" in err
    rc, _, err = cli("+arm=refeed_on", "workload=tiny", *FAKE, f"runner.resume={tmp_path}/nothing")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "no manifest.json" in err


# -- sweeps -----------------------------------------------------------------------

def _check_sweep(sweep: Path, arms):
    dirs = sorted(p for p in sweep.iterdir() if p.is_dir())
    assert [d.name.split("_", 1)[1] for d in dirs] == arms
    ms = [manifest(d) for d in dirs]
    assert all(m["status"] == "complete" for m in ms)
    assert len({m["workload"]["hash"] for m in ms}) == 1 and len({m["model"]["hash"] for m in ms}) == 1
    assert [m["arm"] for m in ms] == arms
    return ms


@pytest.mark.slow        # a joblib sweep end to end, two worker processes
def test_joblib_two_arm_sweep_fake(tmp_path):
    sweep = tmp_path / "sweep"
    rc, out, err = cli("-m", "hydra/launcher=local_gpus", "+arm=baseline,refeed_on", "workload=tiny", *FAKE,
                       f"hydra.sweep.dir={sweep}", env=_env(ATLAS_AB_N_JOBS=2))
    assert rc == 0, err
    assert "JoblibLauncher" in (sweep / "multirun.yaml").read_text() or "Joblib" in err
    _check_sweep(sweep, ["baseline", "refeed_on"])


# -- the real runner (slow) -------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_ckpt(tmp_path_factory):
    """A tiny MTP checkpoint with the embedded tokenizer (the real model may not be trained yet)."""
    torch = pytest.importorskip("torch")
    from atlas_ab.runtime import checkpoint
    from tests.helpers.tiny import tiny_models

    d = tmp_path_factory.mktemp("ckpt")
    trunk, mtp = tiny_models(vocab=4096)
    checkpoint.save(d, trunk.args, trunk, mtp, tokenizer_json=ROOT / "atlas_ab/models/default/tokenizer.json",
                    dtype=torch.float32)
    return d


@pytest.mark.slow
def test_real_run_refeed_on_tiny(tmp_path, tiny_ckpt):
    d = tmp_path / "run"
    rc, out, err = cli("+arm=refeed_on", "workload=tiny", "model=path", f"model.path={tiny_ckpt}",
                       f"hydra.run.dir={d}")
    assert rc == 0, err
    m = manifest(d)
    assert m["status"] == "complete" and m["rows"]["steps"] > 0 and m["shards"]
    assert m["gate"]["passed"] is True and m["levers"]["refeed"] and m["shards"][0]["events"]
    assert f"run: {d}" in out and "p2_uncond" in out and "lossless gate passed" in out
    assert (d / ".hydra" / "config.yaml").exists() and (d / "run.log").read_text()
    t = steps_of(d)
    assert {"doc_id", "turn", "step", "k", "accept_len"} <= set(t.column_names)


@pytest.mark.slow
def test_real_kill9_then_resume_matches_uninterrupted(tmp_path, tiny_ckpt):
    base = ["+arm=refeed_on", "workload=tiny", "workload.n_docs=3", "runner.batch_width=1", "model=path",
            f"model.path={tiny_ckpt}"]
    _kill_resume_compare(tmp_path, base, _env())


@pytest.mark.slow
def test_real_joblib_two_arm_sweep(tmp_path, tiny_ckpt):
    sweep = tmp_path / "sweep"
    rc, out, err = cli("-m", "hydra/launcher=local_gpus", "+arm=baseline,refeed_on", "workload=tiny",
                       "workload.n_docs=2", "model=path", f"model.path={tiny_ckpt}", f"hydra.sweep.dir={sweep}",
                       env=_env(ATLAS_AB_N_JOBS=2))
    assert rc == 0, err
    _check_sweep(sweep, ["baseline", "refeed_on"])


@pytest.mark.slow        # two CLI runs end to end (tests/config/test_lever_cli.py parses the env in-process)
def test_arm_env_takes_the_levers_from_atlas_mtp_variables(tmp_path):
    """`+arm=env` runs what the engine would run under ATLAS_MTP_*: parsed and clamped as the reference engine."""
    env = {**_env(), "ATLAS_MTP_CATCHUP": "1", "ATLAS_MTP_REFEED_ACCEPTED": "1",
           "ATLAS_MTP_REFEED_SHIFT": "9", "ATLAS_MTP_SHADOW_TOPK": "12"}
    d = tmp_path / "env"
    rc, out, err = cli("+arm=env", "workload=tiny", *FAKE, f"hydra.run.dir={d}", "runner.progress=false", env=env)
    assert rc == 0, err
    lv = manifest(d)["levers"]
    assert lv["catchup"] and lv["refeed"] and lv["refeed_shift"] == 4 and lv["shadow_topk"] == 8
    # REFEED without CATCHUP is refused here as on the Hydra path: one line, exit 2
    env = {**_env(), "ATLAS_MTP_REFEED_ACCEPTED": "1"}
    rc, out, err = cli("+arm=env", "workload=tiny", *FAKE, f"hydra.run.dir={tmp_path / 'bad'}", env=env)
    assert rc == 2 and "requires catchup" in err and len(err.strip().splitlines()) == 1
