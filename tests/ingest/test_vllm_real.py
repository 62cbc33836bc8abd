"""Ingest of what vLLM 0.32.0's server really answered (tests/fixtures/vllm_0.32, README.md there says
how each file was captured): summary and detailed, streamed and not, a request with no verify step,
/metrics before and after, and a server with per-request metrics off. The expected counts are read
from the raw answers with plain json here, never through the ingest."""
import json
from pathlib import Path

import pandas as pd
import pytest

from atlas_ab.analysis.__main__ import main
from atlas_ab.ingest import ingest
from atlas_ab.ingest.responses import read_records
from atlas_ab.ingest.vllm import unit_from

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "vllm_0.32"
ZERO_DOC = 3           # max_tokens 1: the prefill's token only
ERR = "atlas_ab.analysis: error: "


def spec_of(record: dict) -> dict:
    """metrics.speculative_decoding of one stored record, non-streamed or streamed (final usage chunk)."""
    body = record["response"] if "response" in record else [c for c in record["stream"] if c.get("usage")][-1]
    return body["metrics"]["speculative_decoding"]


def raw(path: Path) -> dict[int, dict]:
    return {r["doc_id"]: spec_of(r) for r in map(json.loads, path.read_text().splitlines())}


def counts(run: Path) -> pd.DataFrame:
    c = pd.read_parquet(run / "counts").drop(columns=["unit", "file"])
    return c.sort_values("doc_id").reset_index(drop=True)


def steps(run: Path) -> pd.DataFrame:
    return pd.read_parquet(run / "steps").sort_values(["doc_id", "turn", "step"]).reset_index(drop=True)


def telemetry(run: Path) -> dict:
    return json.loads((run / "manifest.json").read_text())["telemetry"]


def cli(capsys, *argv) -> tuple[int, list[str]]:
    code = main([str(a) for a in argv])
    return code, capsys.readouterr().err.splitlines()


@pytest.mark.parametrize("name", ["responses", "stream"])
def test_summary_mode_is_a_request_grain_run_with_exact_counts(tmp_path, capsys, name):
    f = FIX / "summary" / f"{name}.jsonl"
    code, err = cli(capsys, "ingest", "vllm", f, "--out", tmp_path / "run", "--strict")
    assert code == 0 and not [l for l in err if l.startswith(ERR)]
    t = telemetry(tmp_path / "run")
    assert t["format"] == "vllm per-request summary" and t["grain"] == "requests"
    assert "step_order" in t["not_available"] and "position_pairing" in t["not_available"]
    assert t["notes"][0] == "1 request(s) had no verify step: missing, not rate 0"
    want = {d: s for d, s in raw(f).items() if d != ZERO_DOC}
    c = counts(tmp_path / "run")
    assert c["doc_id"].tolist() == sorted(want)
    for _, row in c.iterrows():
        s = want[row["doc_id"]]
        assert s.get("per_step_accepted") is None           # summary: no per-step arrays, null or absent
        assert (row["n_steps"], row["draft_tokens"], row["accepted_tokens"], row["k_max"]) == (
            s["num_spec_steps"], s["num_draft_tokens"], s["num_accepted_draft_tokens"], s["num_spec_tokens"])
        assert list(row["hist"]) == s["acceptance_histogram"]
    assert c["n_steps"].tolist() == [14, 14, 12] and c["accepted_tokens"].tolist() == [18, 17, 20]
    # k fixed at 2 (drafted == 2 x steps), so the joint is known: each histogram expanded into rows, in no
    # step order and with no position (tables.py)
    s = steps(tmp_path / "run")
    assert "position" not in s.columns and (s["k"] == 2).all()
    for doc, rows in s.groupby("doc_id"):
        h = want[doc]["acceptance_histogram"]
        assert [int((rows["accept_len"] == j).sum()) for j in range(len(h))] == h


@pytest.mark.parametrize("name", ["responses", "stream"])
def test_detailed_mode_step_rows_sum_to_the_response(tmp_path, capsys, name):
    f = FIX / "detailed" / f"{name}.jsonl"
    code, err = cli(capsys, "ingest", "vllm", f, "--out", tmp_path / "run", "--strict")
    assert code == 0 and not [l for l in err if l.startswith(ERR)]
    t = telemetry(tmp_path / "run")
    # the zero-step request's null arrays do not make the run "mixed" (stats.py to_dict drops empty arrays)
    assert t["format"] == "vllm per-request detailed" and t["grain"] == "steps"
    want = raw(f)
    assert want[ZERO_DOC]["per_step_accepted"] is None if name == "responses" else \
        "per_step_accepted" not in want[ZERO_DOC]
    s = steps(tmp_path / "run")
    assert sorted(s["doc_id"].unique()) == [0, 1, 2] and len(s) == 40
    for doc, rows in s.groupby("doc_id"):
        w = want[doc]
        assert rows["accept_len"].tolist() == w["per_step_accepted"]
        assert rows["k"].tolist() == w["per_step_drafted"]
        assert int(rows["accept_len"].sum()) == w["num_accepted_draft_tokens"]
        assert int(rows["k"].sum()) == w["num_draft_tokens"] and len(rows) == w["num_spec_steps"]
    assert s.groupby("doc_id")["accept_len"].sum().tolist() == [18, 17, 20]


@pytest.mark.parametrize("mode", ["summary", "detailed"])
def test_streamed_reads_as_the_same_request_unstreamed(tmp_path, mode):
    a = ingest("vllm", [FIX / mode / "responses.jsonl"], tmp_path / "plain")
    b = ingest("vllm", [FIX / mode / "stream.jsonl"], tmp_path / "streamed")
    assert (a.units, a.dropped, a.steps) == (b.units, b.dropped, b.steps) == (3, 1, 40)
    assert a.telemetry.to_dict() == b.telemetry.to_dict()
    pd.testing.assert_frame_equal(counts(a.out), counts(b.out))
    pd.testing.assert_frame_equal(steps(a.out), steps(b.out))


def test_summary_and_detailed_servers_count_the_same_requests_alike(tmp_path):
    a = ingest("vllm", [FIX / "summary" / "responses.jsonl"], tmp_path / "summary")
    b = ingest("vllm", [FIX / "detailed" / "responses.jsonl"], tmp_path / "detailed")
    pd.testing.assert_frame_equal(counts(a.out), counts(b.out))   # greedy: the same steps, read two ways


@pytest.mark.parametrize("path", ["summary/responses.jsonl", "summary/stream.jsonl", "detailed/responses.jsonl",
                                  "detailed/stream.jsonl"])
def test_zero_verify_steps_read_as_a_unit_with_no_step(path):
    rec = [r for r in read_records([FIX / path]) if r.doc_id == ZERO_DOC]
    assert len(rec) == 1
    (u,) = unit_from(rec[0])
    assert (u.n_steps, u.zero_steps, u.draft_tokens, u.accepted_tokens, u.k_max) == (0, 0, 0, 0, 2)
    assert u.hist == [0, 0, 0] and not u.has_steps
    assert (u.prompt_tokens, u.completion_tokens) == (96, 1)


def test_a_file_of_zero_step_requests_only_is_refused_in_one_line(tmp_path, capsys):
    line = [l for l in (FIX / "detailed" / "responses.jsonl").read_text().splitlines()
            if json.loads(l)["doc_id"] == ZERO_DOC]
    f = tmp_path / "zero.jsonl"
    f.write_text(line[0] + "\n")
    code, err = cli(capsys, "ingest", "vllm", f, "--out", tmp_path / "run")
    assert code == 2 and len(err) == 1 and "every request had zero speculative steps" in err[0]
    assert not (tmp_path / "run").exists()


def _sums(*files: Path) -> tuple[int, int, int, list[int]]:
    """(drafts, draft tokens, accepted, accepted per position) of every request in the files, from the raw JSON."""
    n = d = a = 0
    pos = [0, 0]
    for f in files:
        for s in raw(f).values():
            n, d, a = n + s["num_spec_steps"], d + s["num_draft_tokens"], a + s["num_accepted_draft_tokens"]
            for j, c in enumerate(s["acceptance_histogram"]):
                for i in range(j):
                    pos[i] += c
    return n, d, a, pos


def test_metrics_before_and_after_give_the_requests_between(tmp_path, capsys):
    d = FIX / "detailed"
    code, err = cli(capsys, "ingest", "prometheus", d / "metrics_before.prom", d / "metrics_after.prom",
                    "--out", tmp_path / "delta", "--strict")
    assert code == 0 and not [l for l in err if l.startswith(ERR)]
    assert telemetry(tmp_path / "delta")["grain"] == "counters"
    (row,) = counts(tmp_path / "delta").to_dict("records")
    between = _sums(d / "responses.jsonl", d / "stream.jsonl")
    assert between == (80, 160, 110, [66, 44])
    assert (row["n_steps"], row["draft_tokens"], row["accepted_tokens"], list(row["accepted"])) == between
    # the before-scrape alone: the totals since the start, i.e. the warm-up request's
    before = ingest("prometheus", [d / "metrics_before.prom"], tmp_path / "before")
    (b,) = counts(before.out).to_dict("records")
    assert (b["n_steps"], b["draft_tokens"], b["accepted_tokens"], list(b["accepted"])) == \
        _sums(d / "warmup.jsonl") == (8, 16, 8, [6, 2])


def test_metrics_off_is_refused_naming_the_flag(tmp_path, capsys):
    code, err = cli(capsys, "ingest", "vllm", FIX / "none" / "responses.jsonl", "--out", tmp_path / "run")
    assert code == 2 and len(err) == 1 and err[0].startswith(ERR)
    assert "--per-request-spec-decode-metrics summary|detailed" in err[0] and "metrics.speculative_decoding" in err[0]
    assert not (tmp_path / "run").exists()

