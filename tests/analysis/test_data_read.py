"""The data read is the data written: each shard's row count and sha256 are in the manifest and
checked at load; a complete run's directory holds exactly the files its manifest lists."""
import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from atlas_ab.analysis.__main__ import main
from tests.helpers import faults, synth

ROOT = Path(__file__).resolve().parents[2]


def two_runs(tmp_path, shards=2):
    a = synth.write_run(tmp_path / "a", synth.simulate_steps(600, n_docs=12, seed=1), "catchup_on", shards=shards)
    b = synth.write_run(tmp_path / "b", synth.simulate_steps(600, p_cond=(0.66, 0.72), n_docs=12, seed=2),
                        "refeed_on", shards=shards)
    return a, b


def refused(capsys, *argv) -> str:
    code = main([str(a) for a in argv])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ": warning: " not in ln]
    assert code == 2 and len(err) == 1, err
    return err[0]


def test_the_manifest_lists_each_shards_rows_and_sha256(tmp_path):
    from atlas_ab.atomic import sha256_file

    a, _ = two_runs(tmp_path)
    for s in json.loads((a / "manifest.json").read_text())["shards"]:
        assert s["sha256"]["steps"] == sha256_file(a / s["steps"])
        assert s["rows"] == pq.read_metadata(a / s["steps"]).num_rows
    assert main(["compare", str(a), str(tmp_path / "b"), "--bootstrap", "0"]) == 0


def test_a_shard_swapped_from_another_arm_is_refused(tmp_path, capsys):
    a, b = two_runs(tmp_path)
    shutil.copyfile(a / "steps/part-00000.parquet", b / "steps/part-00000.parquet")   # same row count
    faults.check("read.swapped-shard", refused(capsys, "compare", a, b, "--bootstrap", "0"), b=b)


def test_a_shortened_shard_is_refused(tmp_path, capsys):
    a, b = two_runs(tmp_path)
    part = b / "steps/part-00000.parquet"
    t = pq.read_table(part)
    pq.write_table(t.slice(0, t.num_rows - 3), part)
    line = refused(capsys, "compare", a, b, "--bootstrap", "0")
    faults.check("read.shortened-shard", line, b=b)
    assert f"{t.num_rows - 3} rows, but manifest.json lists {t.num_rows}" in line


def test_a_shard_entry_removed_from_a_complete_manifest_is_refused(tmp_path, capsys):
    a, b = two_runs(tmp_path)
    m = json.loads((b / "manifest.json").read_text())
    listed = m["shards"]
    m["shards"] = listed[:1]
    (b / "manifest.json").write_text(json.dumps(m))
    faults.check("read.unlisted-shard", refused(capsys, "compare", a, b, "--bootstrap", "0"), b=b)
    (b / listed[1]["steps"]).unlink()             # the file gone too: the row total still tells
    line = refused(capsys, "compare", a, b, "--bootstrap", "0")
    faults.check("read.row-total", line, b=b)
    assert f"lists {m['rows']['steps']} step rows in all, but its shards hold {listed[0]['rows']}" in line


def test_a_run_written_before_shard_hashes_loads_with_one_warning(tmp_path, capsys):
    """Runs as written before shard hashes and code hashes (the 2026-11-29 claims runs): no sha256 in
    the manifest's shards, no `code`."""
    runs = []
    for name, seed in (("a", 1), ("b", 2)):
        r = synth.write_run(tmp_path / name, synth.simulate_steps(600, n_docs=12, seed=seed), "catchup_on",
                            shards=2, code_hash=None)
        m = json.loads((r / "manifest.json").read_text())
        for s in m["shards"]:
            s.pop("sha256", None)
        (r / "manifest.json").write_text(json.dumps(m))
        runs.append(r)
    # runs made before code hashes too: unknown code, compared only when told (code_check.py)
    assert main(["compare", *map(str, runs), "--bootstrap", "0", "--allow-mismatch"]) == 0
    warned = [ln for ln in capsys.readouterr().err.splitlines() if "sha256" in ln]
    assert len(warned) == 2, warned                  # one line per run
    for run, line in zip(runs, warned):
        faults.check("read.unhashed", line, run=run)


def test_an_engine_runs_counts_shard_is_checked_too(tmp_path):
    """Per-request counts (an ingested engine run) are read through the same check."""
    from atlas_ab import AtlasError
    from atlas_ab.analysis.runs import export, load_units
    from atlas_ab.ingest import ingest
    from tests.helpers.engine_fixtures import greedy_positions

    steps = greedy_positions(synth.simulate_steps(600, n_docs=6, turns=2, seed=5))
    export(synth.write_run(tmp_path / "steps", steps, "arm"), "histogram", tmp_path / "arm.jsonl")
    engine = ingest("vllm", [tmp_path / "arm.jsonl"], tmp_path / "engine", arm="arm").out
    shard = json.loads((engine / "manifest.json").read_text())["shards"][0]
    assert shard["sha256"]["counts"] and load_units(engine)
    part = engine / shard["counts"]
    t = pq.read_table(part)
    pq.write_table(t.slice(0, t.num_rows - 1), part)
    with pytest.raises(AtlasError, match=f"{part}: {t.num_rows - 1} rows, but manifest.json lists {t.num_rows}") as e:
        load_units(engine)
    faults.check("read.counts-shard", f"atlas_ab.analysis: error: {e.value}", run=engine)

