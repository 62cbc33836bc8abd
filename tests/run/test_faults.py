"""Every fault and bad input of docs/faults.md, with the line the user sees (tests/helpers/faults.py).

The table's commands run in-process through `main()`, as do the faults a user causes to a run
directory where one process suffices; two runs racing, a read-only directory and a full disk run
the CLI as subprocesses (`slow`). The read-only directory and the full disk are real: a read-only
bind mount and a small tmpfs, each in a private mount namespace (`unshare -m`, which needs root
or CAP_SYS_ADMIN; the tests skip without it).
"""
import ast
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import faults, synth
from tests.helpers.cli import cli as run_cli, env_with as _env

ROOT = Path(__file__).resolve().parents[2]
TABLE = [c for c in faults.CASES.values() if c.argv is not None]
# A run case costs a whole Hydra main(); the fast tier runs one per check the CLI makes (the arm, a key,
# a type, a lever rule, the workload, a checkpoint, the run directory, resume) and the whole suite the rest.
FAST_RUN_CASES = {"run.unknown-arm", "run.typo-runner", "run.wrong-type-bool", "run.refeed-without-catchup",
                  "run.gen-tokens-1", "run.missing-checkpoint", "run.corrupt-checkpoint", "run.unwritable-parent",
                  "run.resume-missing"}
TABLE_PARAMS = [pytest.param(c, id=c.id, marks=[pytest.mark.slow] if c.argv[0] == "atlas_ab"
                             and c.id not in FAST_RUN_CASES else []) for c in TABLE]


def cli(*args, env=None, wait=True):
    return run_cli(*faults.FAKE, *args, env=env, wait=wait)


def manifest(d: Path) -> dict:
    return json.loads((d / "manifest.json").read_text())


def files_of(d: Path) -> dict:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def errors(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.strip()]


# -- the doc is the table the tests run ----------------------------------------------------

def test_the_faults_doc_is_generated_from_the_cases():
    doc = (ROOT / "docs" / "faults.md").read_text()
    assert doc == faults.render(), "docs/faults.md is stale: python -m tests.helpers.faults > docs/faults.md"


def test_every_case_names_a_test_that_checks_it():
    sources = {}
    for c in faults.CASES.values():
        path, _, name = c.test.partition("::")
        text = sources.setdefault(path, (ROOT / path).read_text())
        fn = next((n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == name), None)
        assert fn is not None, f"{c.id}: {c.test} does not exist"
        if c.argv is None:
            assert f'"{c.id}"' in ast.get_source_segment(text, fn), f"{c.id}: {c.test} does not check its line"


# -- the table: bad input, one line --------------------------------------------------------

@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    """What the table's commands name: a corrupt checkpoint and the analysis' runs."""
    tmp = tmp_path_factory.mktemp("faults")
    (tmp / "corrupt").mkdir()
    (tmp / "corrupt" / "config.json").write_text("{not json")
    (tmp / "corrupt" / "model.safetensors").write_bytes(b"\x00" * 16)
    a = synth.write_run(tmp / "a", synth.simulate_steps(600, n_docs=12, seed=1), "catchup_on")
    b = synth.write_run(tmp / "b", synth.simulate_steps(600, p_cond=(0.66, 0.72), n_docs=12, seed=2), "refeed_on")
    shutil.copytree(a, tmp / "a_copy")
    ungated = synth.write_run(tmp / "ungated", synth.simulate_steps(600, n_docs=12, seed=3), "catchup_on")
    m = manifest(ungated)
    m["gate"] = {"status": "not run", "passed": None, "checked_sequences": 0}
    (ungated / "manifest.json").write_text(json.dumps(m))
    running = synth.write_run(tmp / "running", synth.simulate_steps(600, n_docs=12, seed=4), "refeed_on",
                              status="running")
    prereg = ROOT / "analysis/prereg/refeed_p2_uncond.yaml"
    locked = {}
    for name, edit in (("locked_a", ""), ("locked_b", "\n# edited after the first arm ran\n")):
        text = prereg.read_text() + edit
        run = shutil.copytree(a if name == "locked_a" else b, tmp / name)
        m = manifest(run)
        m.update(run_dir=str(run), preregs=[{"path": str(prereg), "text": text,
                                             "sha256": hashlib.sha256(text.encode()).hexdigest()}])
        (run / "manifest.json").write_text(json.dumps(m))
        locked[name] = run
    return {"tmp": tmp, "a": a, "b": b, "a_copy": tmp / "a_copy", "ungated": ungated, "running": running,
            "prereg": prereg, **locked}


@pytest.mark.parametrize("case", TABLE_PARAMS)
def test_every_bad_input_prints_its_line(case, paths):
    program, *argv = [a.format(**paths) for a in case.argv]
    run_dir = paths["tmp"] / f"run-{case.id}"
    if program == "atlas_ab":
        extra = ["runner.device=cpu", "workload=tiny", "runner.threads=1"] if case.real else list(faults.FAKE)
        if not any(a.startswith("hydra.run.dir=") or a.startswith("runner.resume=") for a in argv):
            argv.append(f"hydra.run.dir={run_dir}")
        argv = extra + argv
    code, err = faults.main_of(program, argv)
    lines = [ln for ln in errors(err) if ": warning: " not in ln]
    assert code == 2 and len(lines) == 1, (case.id, code, err[-2000:])
    faults.check(case.id, lines[0], **paths, run=run_dir)
    if run_dir.exists():        # Hydra made it: it says failed and holds no data, no lock
        assert manifest(run_dir)["status"] == "failed", case.id
        assert not (run_dir / "steps").exists() and not (run_dir / ".lock").exists(), case.id


# -- faults a user causes to a run directory -------------------------------------------------

@pytest.mark.slow        # two CLI processes racing for one run directory, end to end
def test_two_runs_started_together_one_completes_the_other_touches_nothing(tmp_path):
    d = tmp_path / "r"
    args = ["+arm=baseline", "runner.batch_width=1", f"hydra.run.dir={d}"]
    ps = [cli(*args, env=_env(FAKE_RUNNER_SLEEP=0.3), wait=False) for _ in range(2)]
    res = [(p.returncode, out, err) for p in ps for out, err in [p.communicate(timeout=300)]]
    assert sorted(r[0] for r in res) == [0, 2], res
    refused = errors(next(r[2] for r in res if r[0] == 2))
    assert len(refused) == 1, refused
    if "is in use by" in refused[0]:
        faults.check("run.two-at-once", refused[0], run=d)
    else:   # it started after the first had finished
        faults.check("run.rerun-into-complete", refused[0], run=d)
    m = manifest(d)
    assert m["status"] == "complete" and [s["wave"] for s in m["shards"]] == [0, 1, 2, 3]
    assert "failed" not in (d / "run.log").read_text()
    assert sorted(p.name for p in d.iterdir()) == [".hydra", "manifest.json", "run.log", "steps"]
    assert sorted(p.name for p in (d / ".hydra").iterdir()) == ["config.yaml", "hydra.yaml", "overrides.yaml"]


def test_a_refused_run_leaves_the_run_it_refused_byte_identical(tmp_path):
    d = tmp_path / "r"
    code, err = faults.main_of("atlas_ab", [*faults.FAKE, "+arm=baseline", f"hydra.run.dir={d}"])
    assert code == 0, err
    before = files_of(d)
    code, err = faults.main_of("atlas_ab", [*faults.FAKE, "+arm=baseline", f"hydra.run.dir={d}"])
    assert code == 2 and len(errors(err)) == 1, err
    faults.check("run.rerun-into-complete", errors(err)[0], run=d)
    assert files_of(d) == before
    code, err = faults.main_of("atlas_ab", [*faults.FAKE, "+arm=baseline", "arm.num_drafts=3", f"runner.resume={d}"])
    assert code == 2 and len(errors(err)) == 1, err
    faults.check("run.resume-config-differs", errors(err)[0], run=d)
    assert files_of(d) == before


def _namespace_ok() -> bool:
    try:
        return subprocess.run(["unshare", "-m", "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


needs_namespace = pytest.mark.skipif(not _namespace_ok(), reason="needs `unshare -m` (root or CAP_SYS_ADMIN)")


def in_namespace(script: str, **env) -> subprocess.CompletedProcess:
    """Run a shell script in a private mount namespace (its mounts vanish with it)."""
    return subprocess.run(["unshare", "-m", "sh", "-c", script], cwd=ROOT, env=_env(**env), capture_output=True,
                          text=True, timeout=600)


def _atlas(args: str, out: Path) -> str:
    """A shell line: run the arm, its stderr to `out`, its exit status to `out`.rc."""
    fake = " ".join(faults.FAKE)
    return f'"{sys.executable}" -m atlas_ab {fake} {args} 2>"{out}" >/dev/null; echo $? > "{out}.rc"\n'


@pytest.mark.slow        # the CLI end to end (three runs) in a mount namespace
@needs_namespace
def test_a_read_only_run_directory_is_one_line(tmp_path):
    d = tmp_path / "r"
    code, err = faults.main_of("atlas_ab", [*faults.FAKE, "+arm=baseline", f"hydra.run.dir={d}"])
    assert code == 0, err
    before = files_of(d)
    script = f'mount --bind "{d}" "{d}" || exit 97\nmount -o remount,bind,ro "{d}" || exit 97\n'
    for name, args in (("fresh", f"+arm=baseline hydra.run.dir={d}"), ("resume", f"+arm=baseline runner.resume={d}"),
                       ("auto", f"+arm=baseline hydra.run.dir={d} runner.resume=auto")):
        script += _atlas(args, tmp_path / name)
    r = in_namespace(script)
    assert r.returncode == 0, r.stderr
    for name in ("fresh", "resume", "auto"):
        err = (tmp_path / name).read_text()
        assert (tmp_path / f"{name}.rc").read_text().strip() == "2" and len(errors(err)) == 1, (name, err[-2000:])
        faults.check("run.read-only", errors(err)[0], run=d)
    assert files_of(d) == before


@pytest.mark.slow        # the CLI end to end on a full tmpfs in a mount namespace
@needs_namespace
def test_a_full_disk_at_the_start_names_the_directory(tmp_path):
    mnt = tmp_path / "disk"
    mnt.mkdir()
    d = mnt / "r"
    script = (f'mount -t tmpfs -o size=64k tmpfs "{mnt}" || exit 97\n'
              f'head -c 1000000 /dev/zero > "{mnt}/filler" 2>/dev/null || true\n'
              + _atlas(f"+arm=baseline hydra.run.dir={d}", tmp_path / "err"))
    r = in_namespace(script)
    assert r.returncode == 0, r.stderr
    err = (tmp_path / "err").read_text()
    assert (tmp_path / "err.rc").read_text().strip() == "2" and len(errors(err)) == 1, err[-2000:]
    faults.check("run.disk-full-at-start", errors(err)[0], run=d)


@pytest.mark.slow        # the CLI end to end, 64 waves twice, on a tmpfs that fills up
@needs_namespace
def test_a_disk_that_fills_up_fails_the_run_and_resume_completes_it(tmp_path):
    mnt = tmp_path / "disk"
    mnt.mkdir()
    d = mnt / "r"
    keep = tmp_path / "kept"
    args = "+arm=refeed_on workload.n_docs=64 runner.batch_width=1"
    # 1.4 MB: the store's 1 MiB reserve and some 40 of the 64 waves fit
    script = (f'mount -t tmpfs -o size=1400k tmpfs "{mnt}" || exit 97\n'
              + _atlas(f"{args} hydra.run.dir={d}", tmp_path / "full")
              + f'cp -r "{d}" "{keep}"\n'
              + f'mount -o remount,size=16m "{mnt}" || exit 97\n'
              + _atlas(f"{args} runner.resume={d}", tmp_path / "resumed")
              + f'cp "{d}/manifest.json" "{tmp_path}/resumed.json"\n')
    r = in_namespace(script)
    assert r.returncode == 0, r.stderr
    err = (tmp_path / "full").read_text()
    assert (tmp_path / "full.rc").read_text().strip() == "2" and len(errors(err)) == 1, err[-2000:]
    faults.check("run.disk-full-midway", errors(err)[0], run=d)
    m = manifest(keep)
    assert m["status"] == "failed" and m["error"] == errors(err)[0].split("error: ", 1)[1]
    assert 0 < len(m["shards"]) < 64 and not list(keep.rglob("*.tmp")) and not (keep / ".reserve").exists()
    assert (tmp_path / "resumed.rc").read_text().strip() == "0", (tmp_path / "resumed").read_text()[-2000:]
    m = json.loads((tmp_path / "resumed.json").read_text())
    assert m["status"] == "complete" and [s["wave"] for s in m["shards"]] == list(range(64))


def test_resume_of_a_complete_run_rebuilds_a_missing_shard(tmp_path, capsys):
    from atlas_ab.analysis.runs import load_run

    d = tmp_path / "r"
    args = [*faults.FAKE, "+arm=refeed_on", "runner.batch_width=1"]
    code, err = faults.main_of("atlas_ab", [*args, f"hydra.run.dir={d}"])
    assert code == 0, err
    full = manifest(d)
    shard = (d / "steps" / "part-00001.parquet").read_bytes()
    (d / "steps" / "part-00001.parquet").unlink()
    capsys.readouterr()
    code, err = faults.main_of("atlas_ab", [*args, f"runner.resume={d}"])
    out = capsys.readouterr().out
    assert code == 0, err
    warned = [ln for ln in (out + err).splitlines() if "WARNING" in ln]
    assert len(warned) == 1, out + err
    faults.check("run.missing-shard-resume", warned[0], run=d)
    assert f"run: {d}  (complete, 4 shards, {full['rows']['steps']} step rows, resumed)" in out
    m = manifest(d)
    assert m["status"] == "complete" and m["rows"] == full["rows"] and m["summary"] == full["summary"]
    assert (d / "steps" / "part-00001.parquet").read_bytes() == shard
    assert m["resumes"][-1]["rebuilt"] == [1] and m["resumes"][-1]["from_status"] == "complete"
    assert len(load_run(d).steps) == full["rows"]["steps"]
