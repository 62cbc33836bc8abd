"""The collector pairs only what is really paired, refuses in one line, and waits as a user
expects (issue 18 section 7; issue 19 sections 3-4, the collector; issue 21 "The collector"),
against the stand-in server of tests/helpers/engine_fixtures.py. Each engine behaviour cites
the engine source it comes from."""
import json

import pytest

from atlas_ab.analysis.__main__ import main as analysis
from atlas_ab.collect import client as collect_client
from atlas_ab.collect.cli import main as collect
from tests.helpers.engine_fixtures import FakeEngine
from tests.ingest.test_collect import ERR, SMALL, one_error, run

AERR = "atlas_ab.analysis: error: "


def errors(capsys, prefix=ERR):
    err = capsys.readouterr().err.strip().splitlines()
    return [line for line in err if line.startswith(prefix)], err


# ---- greedy, the probe, completion hashes (issue 18 section 7) -------------------------------

def test_a_server_that_samples_is_refused_before_anything_is_written(tmp_path, capsys):
    with FakeEngine("vllm", sampling=True) as fe:
        line = one_error(capsys, run(fe, tmp_path, "a"), ["answered the same greedy request", "differently twice",
                                                          "temperature 0", "seed 0", "it samples"])
        assert len(fe.requests) == 2 and fe.requests[0] == fe.requests[1]
    assert not (tmp_path / "a").exists(), line


def test_pairs_and_mcnemar_refuse_requests_whose_texts_differ(tmp_path, capsys):
    # Two arms whose servers each decode deterministically (each passes the probe) but not the same
    # text on about half the prompts: what a server that samples with a per-start seed gives.
    with FakeEngine("vllm") as fe:
        assert run(fe, tmp_path, "a") == 0
    with FakeEngine("vllm", text_salt="other") as fe:
        assert run(fe, tmp_path, "b") == 0
    with FakeEngine("vllm", p_cond=(0.8, 0.85)) as fe:
        assert run(fe, tmp_path, "c") == 0
    capsys.readouterr()
    counts = lambda arm: __import__("pyarrow.parquet", fromlist=["x"]).read_table(   # noqa: E731
        next((tmp_path / arm / "counts").glob("*.parquet"))).to_pandas()
    ha, hb, hc = (counts(x).set_index(["doc_id", "turn"])["completion_sha256"].sort_index() for x in "abc")
    assert ha.str.startswith("sha256:").all() and (ha == hc).all()     # greedy arms: one text
    n_diff = int((ha != hb).sum())
    assert 0 < n_diff < len(ha)
    for verb in ("pairs", "mcnemar"):
        code = analysis([verb, str(tmp_path / "a"), str(tmp_path / "b")])
        lines, err = errors(capsys, AERR)
        assert code == 2 and len(lines) == 1, err
        assert f"the completions differ in {n_diff} of {len(ha)} requests" in lines[0]
        assert "--drop-differing" in lines[0]
        assert analysis([verb, str(tmp_path / "a"), str(tmp_path / "b"), "--drop-differing", "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["texts"]["differ"] == n_diff and out["texts"]["compared"] == len(ha)
    code = analysis(["pairs", str(tmp_path / "a"), str(tmp_path / "b"), "--drop-differing", "--json"])
    assert code == 0 and json.loads(capsys.readouterr().out)["matched"] == len(ha) - n_diff
    assert analysis(["pairs", str(tmp_path / "a"), str(tmp_path / "c"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["matched"] == len(ha)


def test_a_collected_run_names_the_provenance_it_checks(tmp_path, capsys):
    with FakeEngine("vllm") as fe:
        assert run(fe, tmp_path, "a") == 0
    with FakeEngine("vllm", p_cond=(0.8, 0.85)) as fe:
        assert run(fe, tmp_path, "b") == 0
    capsys.readouterr()
    assert analysis(["mcnemar", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    err = capsys.readouterr().err
    assert "no workload.hash/model.hash" not in err
    assert (f"{tmp_path / 'a'}: no model.hash (an engine run: the served weights are not hashed); "
            "workload.hash checked, model unchecked") in err


# ---- one-line refusals and messages (issue 19 sections 3-4) -----------------------------------

@pytest.mark.parametrize("option,value,must", [
    ("--timeout", "-1", "argument --timeout: expected a number of seconds > 0, got '-1'"),
    ("--timeout", "0", "argument --timeout"), ("--timeout", "nan", "argument --timeout"),
    ("--timeout", "inf", "argument --timeout"), ("--timeout", "ten", "argument --timeout"),
    ("--retries", "-1", "argument --retries: expected an integer >= 0, got '-1'"),
    ("--retries", "1.5", "argument --retries"),
    ("--concurrency", "0", "argument --concurrency: expected an integer >= 1, got '0'"),
    ("--max-tokens", "0", "argument --max-tokens: expected an integer >= 1, got '0'"),
    ("--set", "n_docs=-1", "n_docs=-1 is out of range"),
])
def test_every_numeric_option_is_refused_in_one_line(tmp_path, capsys, option, value, must):
    code = collect(["--url", "http://127.0.0.1:9/v1", "--arm", "x", "--out", str(tmp_path / "x"),
                    "--workload", "tiny", option, value])
    one_error(capsys, code, [must])


def test_a_resume_refusal_says_what_differs(tmp_path, capsys):
    with FakeEngine("vllm", fail_after=2 + 2) as fe:
        one_error(capsys, run(fe, tmp_path, "a", "--retries", "0", "--concurrency", "1"), ["engine died"])
    with FakeEngine("vllm") as fe:
        out = ["--url", fe.url, "--out", str(tmp_path / "a"), "--resume", "--no-progress"]
        line = one_error(capsys, collect([*out, "--arm", "a", "--workload", "tiny", "--set", "n_docs=4",
                                          "--set", "gen_tokens=30", "--api", "completions", "--ignore-eos"]))
        assert "the request parameters (api 'chat' -> 'completions', ignore_eos False -> True)" in line
        assert "the prompts" not in line and "the arm" not in line
        line = one_error(capsys, collect([*out, "--arm", "b", "--workload", "tiny", "--set", "n_docs=3",
                                          "--set", "gen_tokens=30"]))
        assert "the prompts (hash sha256:" in line and "the arm ('a' stored, 'b' now)" in line
        assert "request parameters" not in line


def test_a_server_that_answers_something_else_is_named(tmp_path, capsys):
    page = b"<html><body>502 Bad Gateway</body></html>"
    with FakeEngine("vllm", models_raw=(page, "text/html")) as fe:
        line = one_error(capsys, run(fe, tmp_path, "a"))
    assert "cannot reach" not in line
    assert f"answered HTTP 200 (text/html), not JSON: {page[:120]!r}" in line and "/v1/models" in line
    one_error(capsys, collect(["--url", "http://127.0.0.1:9/v1", "--arm", "d", "--out", str(tmp_path / "d"),
                               *SMALL]), ["cannot reach the server"])


@pytest.mark.slow          # waits out the collector's timeout (~1.3 s)
def test_a_hung_server_fails_after_one_wait_and_shows_it(tmp_path, capsys):
    with FakeEngine("vllm", hang_after=2, hang_s=2.5) as fe:     # the probe answers, then nothing does
        code = collect(["--url", fe.url, "--arm", "a", "--out", str(tmp_path / "a"), "--workload", "tiny",
                        "--set", "n_docs=1", "--set", "gen_tokens=30", "--timeout", "1.2", "--concurrency", "1"])
        sent = len(fe.requests)
    lines, err = errors(capsys)
    assert code == 2 and len(lines) == 1, err
    assert "no answer within --timeout 1.2 s (after 1 attempt(s))" in lines[0] and sent == 3
    assert any(line.startswith(f"{collect_client.PROG}: waiting: doc 0 turn 0 for ") and "(--timeout 1.2 s)" in line
               for line in err), err
    assert (collect_client.TIMEOUT_S, collect_client.RETRIES) == (60.0, 2)


# ---- the engines (issue 21, "The collector") --------------------------------------------------

def test_auto_recognises_tensorrt_llm(tmp_path, capsys):
    # tensorrt_llm/serve/openai_protocol.py: class ModelCard: owned_by: str = "tensorrt_llm"
    with FakeEngine("trtllm") as fe:
        assert run(fe, tmp_path, "t", "--concurrency", "1") == 0
    m = json.loads((tmp_path / "t" / "manifest.json").read_text())
    assert m["engine"]["name"] == "trtllm" and m["engine"]["owned_by"] == "tensorrt_llm"


@pytest.mark.slow          # waits for the streamed metrics (~1.9 s)
def test_streamed_tensorrt_llm_metrics_are_waited_for(tmp_path, capsys, monkeypatch):
    # tensorrt_llm/serve/openai_server.py, chat_stream_generator: `yield "data: [DONE]\n\n"` and only
    # then `await self._extract_metrics(res, raw_request)`, which appends the /perf_metrics entry
    with FakeEngine("trtllm", perf_delay=3) as fe:
        assert run(fe, tmp_path, "t", "--stream", "--concurrency", "1") == 0
    m = json.loads((tmp_path / "t" / "manifest.json").read_text())
    assert m["status"] == "complete" and m["collect"]["params"]["stream"] is True
    monkeypatch.setattr(collect_client, "PERF_WAIT_S", 0.3)
    with FakeEngine("trtllm", perf_delay=10 ** 6) as fe:       # never recorded: the flag is missing
        one_error(capsys, run(fe, tmp_path, "n", "--stream", "--concurrency", "1"),
                  ["GET /perf_metrics returned 0 entries", "none within 0.3 s", "return_perf_metrics: true"])


def test_sglang_is_not_streamed(tmp_path, capsys):
    # python/sglang/srt/entrypoints/openai/serving_chat.py: `if request.stream: ... if
    # request.return_meta_info: raise ValueError("return_meta_info is not supported with streaming. ...")`
    with FakeEngine("sglang") as fe:
        one_error(capsys, run(fe, tmp_path, "s", "--stream"),
                  ["--stream with sglang", "rejects return_meta_info when streaming", "without --stream"])
        assert fe.requests == []                                   # refused before any request
        assert run(fe, tmp_path, "s") == 0                         # non-streamed, return_meta_info: true
        assert all(b["return_meta_info"] is True and b["stream"] is False for b in fe.requests)


def test_a_server_serving_another_model_is_refused_before_anything_is_written(tmp_path, capsys):
    # --model names what the user meant to A/B; a server whose /v1/models lists something else would
    # answer 404 per request at best, at worst another model's acceptance under this arm's name
    with FakeEngine("vllm") as fe:
        line = one_error(capsys, run(fe, tmp_path, "a", "--model", "default"),
                         ["serves ['fake-model'], not --model 'default'", "another model"])
        assert fe.requests == []
    assert not (tmp_path / "a").exists(), line
