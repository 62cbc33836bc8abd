"""`python -m atlas_ab.collect` against fake engines on 127.0.0.1 (tests/helpers/engine_fixtures.py):
the A/B end to end (two arms -> report --prereg, mcnemar), each engine's format, retries,
resume, and the refusals (one line, exit 2)."""
import json

import pytest

from atlas_ab.analysis.__main__ import main as analysis
from atlas_ab.analysis.comparison import figure
from atlas_ab.analysis.runs import load_run, load_units
from atlas_ab.collect.cli import main as collect
from tests.helpers.engine_fixtures import FakeEngine, reply_for

ERR = "atlas_ab.collect: error: "
SMALL = ["--workload", "tiny", "--set", "n_docs=4", "--set", "gen_tokens=30", "--no-progress"]


def run(fe, tmp, arm, *extra):
    return collect(["--url", fe.url, "--arm", arm, "--out", str(tmp / arm), *SMALL, *extra])


def one_error(capsys, code, must=()):
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith(ERR), err
    for m in must:
        assert m in err[0], err[0]
    return err[0]


@pytest.mark.slow          # two collections against a stand-in server, then the report (~1.9 s)
def test_vllm_ab_end_to_end(tmp_path, capsys):
    with FakeEngine("vllm", p_cond=(0.55, 0.6), fail_first=2) as fe:
        assert run(fe, tmp_path, "catchup_on", "--concurrency", "3") == 0
        sent = fe.requests
    with FakeEngine("vllm", p_cond=(0.8, 0.85)) as fe:
        assert run(fe, tmp_path, "refeed_on", "--stream") == 0
    capsys.readouterr()
    # greedy, n = 1, a fixed seed, bounded retries (2 x 503 then fine), the greedy probe (2), multi-turn
    assert len(sent) == 8 + 2 + 2 and all(b["temperature"] == 0 and b["n"] == 1 and b["seed"] == 0 for b in sent)
    assert sent[2] == sent[3] and sent[2]["max_tokens"] == 30          # the same request twice
    turn1 = [b for b in sent if len(b["messages"]) == 3]
    assert len(turn1) == 4
    first = json.dumps(turn1[0]["messages"][:1])
    assert turn1[0]["messages"][1] == {"role": "assistant", "content": reply_for(first, 6)}
    a, b = (json.loads((tmp_path / arm / "manifest.json").read_text()) for arm in ("catchup_on", "refeed_on"))
    for m in (a, b):
        assert m["status"] == "complete" and m["telemetry"]["grain"] == "steps"
        assert m["engine"]["version"] == "9.9.9-fake" and m["engine"]["reported_model"] == "fake-model"
    assert a["collect"]["prompts_hash"] == b["collect"]["prompts_hash"]
    assert a["collect"]["params"]["stream"] is False and b["collect"]["params"]["stream"] is True
    assert a["workload"]["hash"] == b["workload"]["hash"] and a["arm"] == "catchup_on"
    prereg = tmp_path / "p.yaml"
    prereg.write_text("name: t\nhypothesis: x\nprimary_metric: p2_uncond\ndirection: increase\nmin_effect: 0.01\n"
                      "threshold_sd: 2\ndecides: cluster\narms: {control: catchup_on, treatment: refeed_on}\n"
                      "min_n_per_arm: 30\n")
    assert analysis(["report", str(tmp_path / "refeed_on"), str(tmp_path / "catchup_on"), "--prereg", str(prereg),
                     "--out", str(tmp_path / "rep"), "--bootstrap", "200", "--evaluate-unlocked"]) == 0
    capsys.readouterr()
    rep = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert rep["verdicts"][0]["status"] in ("MET", "NOT MET", "UNDERPOWERED") and rep["telemetry"]["refeed_on"]
    # same prompts, same greedy text: steps pair on (doc_id, turn, position)
    assert analysis(["mcnemar", str(tmp_path / "catchup_on"), str(tmp_path / "refeed_on"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["n_pairs"] > 20


def test_resume_after_the_server_died(tmp_path, capsys):
    with FakeEngine("vllm", fail_after=2 + 3) as fe:   # the greedy probe, then 3 answers
        code = run(fe, tmp_path, "arm", "--retries", "0", "--concurrency", "1")
    one_error(capsys, code, ["HTTP 500", "engine died"])
    m = json.loads((tmp_path / "arm" / "manifest.json").read_text())
    raw = (tmp_path / "arm" / "raw" / "responses.jsonl").read_text()
    assert m["status"] == "running" and len(raw.splitlines()) == 3
    with FakeEngine("vllm") as fe:
        code = run(fe, tmp_path, "arm")
        one_error(capsys, code, ["unfinished collection", "--resume"])
        assert run(fe, tmp_path, "arm", "--resume") == 0
        resent = fe.requests
    with FakeEngine("vllm") as fe:
        assert run(fe, tmp_path, "whole") == 0
    assert len(resent) == 2 + 5  # the probe again (the server may have restarted), then only what was missing
    a, b = load_run(tmp_path / "arm", optional=("position",)), load_run(tmp_path / "whole", optional=("position",))
    cols = ["doc_id", "turn", "step", "k", "accept_len", "position"]
    assert a.steps[cols].equals(b.steps[cols])


def test_refusals(tmp_path, capsys):
    with FakeEngine("vllm", mode="none") as fe:  # the server runs without per-request metrics
        one_error(capsys, run(fe, tmp_path, "a"), ["metrics.speculative_decoding", "--per-request-spec-decode-metrics"])
    with FakeEngine("vllm", final_usage=False) as fe:
        one_error(capsys, run(fe, tmp_path, "b", "--stream"), ["without the final usage chunk"])
    with FakeEngine("vllm", owned_by="openai") as fe:  # cannot tell the engine from /v1/models
        one_error(capsys, run(fe, tmp_path, "c"), ["owned_by='openai'", "--engine"])
    one_error(capsys, collect(["--url", "http://127.0.0.1:9/v1", "--arm", "d", "--out", str(tmp_path / "d"),
                               *SMALL]), ["cannot reach the server"])


def test_other_engines(tmp_path, capsys):
    with FakeEngine("sglang", K=3) as fe:
        assert run(fe, tmp_path, "sg") == 0
        assert all(b.get("return_meta_info") is True for b in fe.requests)
    t = load_run(tmp_path / "sg").telemetry
    assert t.grain == "requests" and "p_i_cond" in t.exact and "position_pairing" in t.not_available
    with FakeEngine("trtllm") as fe:
        assert run(fe, tmp_path, "trt", "--engine", "trtllm") == 0
    c = load_units(tmp_path / "trt")
    assert figure(c, "draft_acceptance_rate").status == "exact" and figure(c, "p1").status == "refused"
    with FakeEngine("llamacpp", K=3, vary_k=True, by_depth=True) as fe:
        assert run(fe, tmp_path, "ik") == 0
    c = load_units(tmp_path / "ik")
    assert figure(c, "p2").status == "exact" and figure(c, "p2_cond").status == "refused"
    assert analysis(["report", str(tmp_path / "ik"), "--out", str(tmp_path / "rep"), "--bootstrap", "0"]) == 0
    assert "not available" in (tmp_path / "rep" / "report.md").read_text()


def test_prompts_file(tmp_path, capsys):
    p = tmp_path / "prompts.jsonl"
    p.write_text(json.dumps({"doc_id": 7, "turns": ["def f(x):", "    return x"]}) + "\n"
                 + json.dumps({"prompt": "import os", "max_tokens": 12}) + "\n")
    with FakeEngine("vllm") as fe:
        assert collect(["--url", fe.url, "--arm", "u", "--out", str(tmp_path / "u"), "--prompts", str(p),
                        "--max-tokens", "20", "--api", "completions", "--no-progress"]) == 0
        bodies = fe.requests
    assert sorted(b["max_tokens"] for b in bodies) == [12, 20, 20, 20, 20]   # the probe: doc 7's first turn twice
    assert any(b["prompt"].startswith("def f(x):") and "return x" in b["prompt"] for b in bodies)
    steps = load_run(tmp_path / "u").steps
    assert sorted(set(zip(steps["doc_id"], steps["turn"]))) == [(1, 0), (7, 0), (7, 1)]
