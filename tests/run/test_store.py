"""Run store, manifest, resume and config composition, in-process with the fake runner (fast)."""
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from atlas_ab import AtlasError
from atlas_ab.atomic import write_table
from atlas_ab.config.paths import CONF_DIR, PACKAGE_ROOT, resolve_path
from atlas_ab.run.session import acceptance_summary, run
from atlas_ab.run.store import RunStore, aggregate_gate, config_diff
from atlas_ab.telemetry.schema import TIMING_COLUMNS
from tests.helpers.compose import cfg_of

FAKE = "runner.engine._target_=tests.helpers.fakerunner.FakeRunner"
BASE = [FAKE, "workload=tiny", "runner.device=cpu", "runner.batch_width=1", "runner.progress=false"]


def steps_of(run_dir: Path) -> pa.Table:
    m = json.loads((run_dir / "manifest.json").read_text())
    t = pa.concat_tables([pq.read_table(run_dir / s["steps"]) for s in m["shards"]])
    # timings are the run's own (a resumed wave times its first steps as warm-up again)
    t = t.drop([c for c in TIMING_COLUMNS if c in t.column_names])
    return t.sort_by([("doc_id", "ascending"), ("turn", "ascending"), ("step", "ascending")])


def manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())


# -- composition ---------------------------------------------------------------

ARMS = sorted(p.stem for p in (CONF_DIR / "arm").glob("*.yaml"))


def test_every_arm_composes_validates_and_shares_the_workload():
    assert {"baseline", "catchup_on", "refeed_on", "shift_m1", "shift_p1", "draft_conf_050", "draft_conf_066",
            "draft_conf_099", "shadow_topk_4", "oracle_p2", "drafter_prefill_on", "k1", "k3", "dense",
            "draft_model"} <= set(ARMS)
    from atlas_ab.config.structured import validate_arm
    workloads = set()
    for name in ARMS:
        cfg = cfg_of(f"+arm={name}")
        arm = validate_arm(OmegaConf.to_object(cfg.arm))
        assert arm.name == name
        workloads.add(json.dumps(OmegaConf.to_container(cfg.workload), sort_keys=True))
    assert len(workloads) == 1
    refeed = OmegaConf.to_object(cfg_of("+arm=refeed_on").arm)
    assert refeed.catchup and refeed.refeed and refeed.fingerprints_on
    assert OmegaConf.to_object(cfg_of("+arm=shift_m1").arm).refeed_shift == -1
    assert OmegaConf.to_object(cfg_of("+arm=dense").arm).row_space == "dense"
    assert OmegaConf.to_object(cfg_of("+arm=draft_model").arm).proposer == "draft_model"


def test_groups_and_presets():
    d = cfg_of()
    assert (d.workload.n_docs, d.workload.turns, d.workload.chunk_tokens, d.workload.gen_tokens) == (16, 8, 64, 32)
    t = cfg_of("workload=tiny")
    assert (t.workload.n_docs, t.workload.turns, t.workload.chunk_tokens, t.workload.gen_tokens) == (4, 2, 16, 8)
    assert (d.runner.device, d.runner.dtype, d.runner.batch_width) == ("auto", "auto", 16)
    assert d.model.path == "atlas_ab/models/default" and d.model.draft_path == "atlas_ab/models/draft"
    assert cfg_of("model=gpu").model.init == "random" and cfg_of("model=gpu").model.path is None
    # the default checkpoint's config carries no architecture: its config.json decides
    assert all(d.model[k] is None for k in ("hidden_size", "num_hidden_layers", "vocab_size"))
    s = cfg_of("+study=refeed")
    assert list(s.study.arms) == ["catchup_on", "refeed_on"]
    assert list(s.study.preregs) == ["refeed_p2_uncond"]


@pytest.mark.parametrize("override,match", [
    ("+arm=nosuch", "arm/nosuch"), ("arm.bogus=1", "bogus"), ("arm.num_drafts=abc", "num_drafts"),
    ("workload.n_doc=3", "n_doc"), ("runner.batch_width=wide", "batch_width"),
])
def test_composition_rejects_unknown_keys_and_types(override, match):
    with pytest.raises(Exception, match=match):
        cfg_of(override)


def test_paths_resolve_against_the_package_not_the_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_path("atlas_ab/models/default") == str(PACKAGE_ROOT / "atlas_ab/models/default")
    (tmp_path / "mine").mkdir()
    assert resolve_path("mine") == str(tmp_path / "mine")
    assert resolve_path("/abs/x") == "/abs/x" and resolve_path(None) is None


def test_launcher_configs_compose():
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        slurm = compose("config", overrides=["hydra/launcher=slurm", "+arm=baseline"], return_hydra_config=True)
        job = compose("config", overrides=["hydra/launcher=local_gpus"], return_hydra_config=True)
    assert "submitit" in slurm.hydra.launcher._target_ and slurm.hydra.launcher.gpus_per_node == 1
    assert "joblib" in job.hydra.launcher._target_ and job.hydra.launcher.n_jobs >= 1
    ray = OmegaConf.load(CONF_DIR / "hydra" / "launcher" / "ray.yaml")  # plugin not installed: parse only
    assert ray.defaults == ["ray"] and ray.ray.remote.num_gpus == 1


# -- the store -----------------------------------------------------------------

def test_atomic_writes_leave_no_tmp(tmp_path):
    t = pa.table({"x": [1, 2]})
    write_table(tmp_path / "a.parquet", t)
    assert pq.read_table(tmp_path / "a.parquet").equals(t) and not list(tmp_path.glob("*.tmp"))


def test_gate_aggregate_and_config_diff():
    g = aggregate_gate([{"checked_sequences": 2, "divergences": 0, "passed": True, "margins": [1.0]},
                        {"checked_sequences": 2, "divergences": 1, "passed": False, "margins": [],
                         "first_divergence": {"doc_id": 3}}])
    assert (g["checked_sequences"], g["divergences"], g["passed"], g["status"]) == (4, 1, False, "failed")
    assert g["margins"] == [1.0] and g["first_divergence"] == {"doc_id": 3}
    ok = aggregate_gate([{"checked_sequences": 2, "divergences": 0, "passed": True}])
    assert (ok["passed"], ok["status"]) == (True, "passed")
    # a gate that checked nothing is "not run", never "passed"
    for none in ([], [{"checked_sequences": 0, "passed": None}], [{"checked_sequences": 0, "passed": True}]):
        assert (aggregate_gate(none)["passed"], aggregate_gate(none)["status"]) == (None, "not run")
    a = {"runner": {"progress": True, "resume": None, "seed": 0}, "arm": {"k": 1}}
    b = {"runner": {"progress": False, "resume": "/x", "seed": 0}, "arm": {"k": 2}}
    assert config_diff(a, b) == ["arm.k: 1 -> 2"]


def test_complete_run_manifest(tmp_path):
    m = run(cfg_of(*BASE, "+arm=refeed_on"), tmp_path / "r")
    d = tmp_path / "r"
    assert m["status"] == "complete" and not m["resumed"]
    assert [s["wave"] for s in m["shards"]] == [0, 1, 2, 3]
    assert sorted(p.name for p in (d / "steps").iterdir()) == [f"part-{i:05d}.parquet" for i in range(4)]
    assert all(s["events"] for s in m["shards"])  # refeed has a ring: fingerprints on
    assert m["rows"]["steps"] == sum(s["rows"] for s in m["shards"]) == steps_of(d).num_rows
    for key in ("arm", "levers", "row_space", "proposer", "model", "workload", "code", "versions", "device",
                "dtype", "seed", "started", "finished", "gate", "preregs", "config", "mode"):
        assert key in m, key
    assert m["levers"]["refeed"] and m["levers"]["fingerprints"] is True
    assert m["engine"] == "tests.helpers.fakerunner.FakeRunner"     # the class runner.engine._target_ named
    assert m["model"]["hash"].startswith("sha256:") and m["workload"]["hash"].startswith("sha256:")
    assert m["gate"]["passed"] is True and m["gate"]["checked_sequences"] == 4
    assert m["code"]["hash"].startswith("sha256:") and m["code"]["files"] > 100
    assert set(m["code"]) == {"hash", "files", "commit", "commit_why"} and "git" not in m
    assert {"p1", "p2_uncond", "p2_cond", "tokens_per_step", "n_steps"} <= set(m["summary"])
    assert not list(d.rglob("*.tmp"))


def test_the_analysis_reads_the_run(tmp_path):
    from atlas_ab.analysis.runs import load
    run(cfg_of(*BASE, "+arm=baseline"), tmp_path / "r")
    r = load.load_run(tmp_path / "r")
    assert r.status == "complete"


def test_summary_matches_pandas_definition():
    t = pa.table({"doc_id": [0, 0, 0, 0], "turn": [0, 0, 1, 1], "step": [0, 1, 0, 1], "k": [2, 2, 2, 0],
                  "accept_len": [2, 1, 0, 0]})
    s = acceptance_summary(t)
    assert s["n_steps"] == 4 and s["n_serial"] == 1
    assert s["p1"] == pytest.approx(2 / 3) and s["p2_uncond"] == pytest.approx(1 / 3)
    assert s["p2_cond"] == pytest.approx(1 / 2) and s["tokens_per_step"] == pytest.approx(2.0)


def test_crash_then_resume_equals_uninterrupted(tmp_path, monkeypatch):
    full = tmp_path / "full"
    run(cfg_of(*BASE, "+arm=refeed_on"), full)
    d = tmp_path / "crashed"
    monkeypatch.setenv("FAKE_RUNNER_CRASH_AT", "2")
    with pytest.raises(RuntimeError):
        run(cfg_of(*BASE, "+arm=refeed_on"), d)
    m = manifest(d)
    assert m["status"] == "failed" and [s["wave"] for s in m["shards"]] == [0, 1] and "fake crash" in m["error"]
    # debris of a half-written shard is ignored and overwritten
    (d / "steps" / "part-00002.parquet.tmp").write_bytes(b"garbage")
    (d / "steps" / "part-00002.parquet").write_bytes(b"garbage")
    monkeypatch.delenv("FAKE_RUNNER_CRASH_AT")
    m = run(cfg_of(*BASE, "+arm=refeed_on", f"runner.resume={d}", "runner.progress=true"), d)
    assert m["status"] == "complete" and m["resumed"] is True and m["resumes"][0]["shards_kept"] == 2
    assert [s["wave"] for s in m["shards"]] == [0, 1, 2, 3]
    assert steps_of(d).equals(steps_of(full))
    assert m["rows"] == manifest(full)["rows"] and m["summary"] == manifest(full)["summary"]


def test_a_session_runs_waves_up_to_a_cap_stops_and_a_resume_completes_it(tmp_path):
    """What a study driver uses: open, waves up to a cap, stop (`stopped`, final for the analysis),
    and a resume of that run continues from its stored waves to the steps of an uninterrupted run."""
    from atlas_ab.analysis.runs import load_run
    from atlas_ab.run.session import Job, RunSession

    full = tmp_path / "full"
    run(cfg_of(*BASE, "+arm=refeed_on"), full)
    d = tmp_path / "stopped"
    s = RunSession(cfg_of(*BASE, "+arm=refeed_on"), Job(d), out=open(os.devnull, "w")).open()
    try:
        s.run_waves(upto=1)
        s.run_waves(upto=2)
        s.run_waves(upto=2)           # nothing left below the cap: a no-op
        s.note("sequential", {"looks": [1, 2]})
        m = s.stop({"by": "a_study", "at_wave": 2, "decisions": {"q": "MET"}})
    finally:
        s.close()
    assert m["status"] == "stopped" and [x["wave"] for x in m["shards"]] == [0, 1]
    assert m["stopped"] == {"by": "a_study", "at_wave": 2, "decisions": {"q": "MET"}}
    assert m["sequential"] == {"looks": [1, 2]} and m["summary"]["n_steps"] == m["rows"]["steps"] > 0
    assert not (d / ".lock").exists()
    assert len(load_run(d).steps) == m["rows"]["steps"]          # final, like complete
    m = run(cfg_of(*BASE, "+arm=refeed_on", f"runner.resume={d}"), d)
    assert m["status"] == "complete" and "stopped" not in m and m["resumes"][-1]["from_status"] == "stopped"
    assert [x["wave"] for x in m["shards"]] == [0, 1, 2, 3]
    assert steps_of(d).equals(steps_of(full)) and m["summary"] == manifest(full)["summary"]


def test_a_failed_lossless_gate_fails_the_run_loudly(tmp_path, monkeypatch):
    d = tmp_path / "g"
    monkeypatch.setenv("FAKE_RUNNER_GATE_FAIL", "1")
    with pytest.raises(AtlasError, match="lossless gate failed: doc 1 turn 0 token 3"):
        run(cfg_of(*BASE, "+arm=baseline"), d)
    m = manifest(d)
    assert m["status"] == "failed" and m["gate"]["passed"] is False
    from atlas_ab.analysis.runs import load_run
    with pytest.raises(AtlasError):
        load_run(d)                       # the analysis refuses it unless --allow-incomplete


def test_resume_refuses_a_different_config(tmp_path, monkeypatch):
    d = tmp_path / "r"
    monkeypatch.setenv("FAKE_RUNNER_CRASH_AT", "1")
    with pytest.raises(RuntimeError):
        run(cfg_of(*BASE, "+arm=refeed_on"), d)
    monkeypatch.delenv("FAKE_RUNNER_CRASH_AT")
    before = (d / "manifest.json").read_text()
    with pytest.raises(AtlasError, match=r"config differs.*arm.refeed_shift"):
        run(cfg_of(*BASE, "+arm=refeed_on", "arm.refeed_shift=1", f"runner.resume={d}"), d)
    with pytest.raises(AtlasError, match=r"config differs.*workload.seed"):
        run(cfg_of(*BASE, "+arm=refeed_on", "workload.seed=1", f"runner.resume={d}"), d)
    assert (d / "manifest.json").read_text() == before  # the interrupted run is untouched


def test_fresh_run_refuses_a_directory_holding_a_run(tmp_path):
    d = tmp_path / "r"
    run(cfg_of(*BASE, "+arm=baseline"), d)
    before = (d / "manifest.json").read_text()
    with pytest.raises(AtlasError, match="already holds a run"):
        run(cfg_of(*BASE, "+arm=baseline"), d)
    assert (d / "manifest.json").read_text() == before


@pytest.mark.parametrize("overrides,match", [
    (["+arm=refeed_on", "arm.draft_conf=1.5"], "out of range"),
    (["+arm=refeed_on", "arm.catchup=false"], "requires catchup"),
    (["+arm=baseline", "model.path=/nonexistent/ckpt"], "not found"),
    (["+arm=baseline", "model=path"], "model.path is required"),
    (["+arm=k1", "+study=refeed"], "not in study"),
    (["+arm=baseline", "runner.engine._target_=tests.helpers.nosuch.Runner"], "cannot be loaded"),
])
def test_bad_input_fails_before_loading_and_leaves_no_data(tmp_path, overrides, match):
    d = tmp_path / "r"
    d.mkdir()  # Hydra creates the directory before the task runs
    with pytest.raises(AtlasError, match=match):
        run(cfg_of(*BASE, *overrides), d)
    m = manifest(d)
    assert m["status"] == "failed" and m["shards"] == [] and match.split()[0] in m["error"]
    assert not (d / "steps").exists() or not list((d / "steps").iterdir())


def test_corrupt_checkpoint_is_one_line(tmp_path):
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "CORRUPT").write_text("")
    with pytest.raises(AtlasError, match="corrupt"):
        run(cfg_of(*BASE, "+arm=baseline", f"model.path={ck}"), tmp_path / "r")


def test_study_locks_its_prereg_before_running(tmp_path):
    pre = tmp_path / "p.yaml"
    pre.write_text((PACKAGE_ROOT / "analysis/prereg/refeed_p2_uncond.yaml").read_text())
    m = run(cfg_of(*BASE, "+arm=catchup_on", "+study=refeed", f"study.preregs=[{pre}]"), tmp_path / "r")
    import hashlib
    (entry,) = m["preregs"]
    assert entry["sha256"] == hashlib.sha256(pre.read_bytes()).hexdigest() == entry["source_sha256"]
    assert entry["text"] == pre.read_text() and Path(entry["locked_copy"]).read_text() == pre.read_text()
    assert m["study"] == {"name": "refeed", "arms": ["catchup_on", "refeed_on"]}
    with pytest.raises(AtlasError, match="pre-registration"):
        run(cfg_of(*BASE, "+arm=catchup_on", "+study=refeed", f"study.preregs=[{tmp_path}/missing.yaml]"),
            tmp_path / "r2")


def test_unwritable_run_dir_is_one_line(tmp_path):
    if os.geteuid() == 0:
        d = Path("/proc/atlas_ab_cannot_write")
    else:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        d = ro / "r"
    with pytest.raises(AtlasError, match="not writable"):
        run(cfg_of(*BASE, "+arm=baseline"), d)


def test_store_rejects_duplicate_wave(tmp_path):
    s = RunStore(tmp_path)
    s.start({"arm": "x"})
    t = pa.table({"doc_id": pa.array([0], pa.int64())})
    s.add_shard(0, [0], t, None, None, 1, 0.1)
    with pytest.raises(AtlasError, match="already stored"):
        s.add_shard(0, [0], t, None, None, 1, 0.1)


def test_resume_auto_continues_the_job_dir_or_starts_fresh(tmp_path, monkeypatch):
    d = tmp_path / "0_refeed_on"
    monkeypatch.setenv("FAKE_RUNNER_CRASH_AT", "1")
    with pytest.raises(RuntimeError):
        run(cfg_of(*BASE, "+arm=refeed_on"), d, job_num=0, multirun=True)
    monkeypatch.delenv("FAKE_RUNNER_CRASH_AT")
    m = run(cfg_of(*BASE, "+arm=refeed_on", "runner.resume=auto"), d, job_num=0, multirun=True)
    assert m["status"] == "complete" and m["resumed"] and m["resumes"][0]["from_status"] == "failed"
    fresh = run(cfg_of(*BASE, "+arm=baseline", "runner.resume=auto"), tmp_path / "1_baseline", multirun=True)
    assert fresh["status"] == "complete" and not fresh["resumed"]
    with pytest.raises(AtlasError, match="resume a sweep"):
        run(cfg_of(*BASE, "+arm=baseline", f"runner.resume={d}"), tmp_path / "2_x", multirun=True)
