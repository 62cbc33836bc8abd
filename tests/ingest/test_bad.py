"""Every bad input is one line on stderr naming the file, the request and the field, exit 2;
nothing that reads as a result is left behind."""
import copy
import json

import pytest

from atlas_ab.analysis.__main__ import main
from atlas_ab.analysis.runs import load_run
from tests.helpers.engine_fixtures import (
    llamacpp_response,
    sglang_meta,
    sglang_response,
    trtllm_entry,
    vllm_prom,
    vllm_response,
    vllm_spec,
    vllm_stream,
)

ERR = "atlas_ab.analysis: error: "
SPEC = vllm_spec([2, 2, 2], [2, 0, 1], 2)
GOOD = vllm_response("x", 30, 7, SPEC)


def one_error(capsys, argv, must=()):
    code = main([str(a) for a in argv])
    err = [l for l in capsys.readouterr().err.splitlines() if not l.startswith("atlas_ab.analysis: warning:")]
    assert code == 2 and len(err) == 1 and err[0].startswith(ERR), err
    for m in must:
        assert m in err[0], err[0]
    return err[0]


def lines(path, *objs):
    path.write_text("\n".join(json.dumps(o) for o in objs) + "\n")
    return path


def vllm_with(**changes):
    body = copy.deepcopy(GOOD)
    spec = body["metrics"]["speculative_decoding"]
    for k, v in changes.items():
        if v is None:
            spec.pop(k)
        else:
            spec[k] = v
    return body


@pytest.mark.parametrize("body,must", [
    (vllm_with(num_spec_steps=None), ["line 2", "field 'num_spec_steps'", "missing"]),
    (vllm_with(acceptance_histogram=[1, 1]), ["field 'acceptance_histogram'", "num_spec_tokens 2 + 1"]),
    (vllm_with(mean_acceptance_length=3.0), ["field 'mean_acceptance_length'", "disagrees"]),
    (vllm_with(per_step_drafted=[2, 2]), ["per-step arrays differ in length"]),
    (vllm_with(num_draft_tokens=-1), ["field 'num_draft_tokens'", "negative"]),
    (dict(GOOD, choices=GOOD["choices"] * 2), ["n = 2 choices", "n == 1 only"]),
    (dict(GOOD, metrics={"speculative_decoding": None}),
     ["field 'metrics.speculative_decoding'", "--per-request-spec-decode-metrics"]),
])
def test_vllm_bad_fields(tmp_path, capsys, body, must):
    f = lines(tmp_path / "r.jsonl", {"doc_id": 0, "turn": 0, "response": GOOD},
              {"doc_id": 1, "turn": 0, "response": body})
    one_error(capsys, ["ingest", "vllm", f, "--out", tmp_path / "run"], [str(f), *must])
    assert not (tmp_path / "run").exists()  # nothing written before the files were read


def test_stream_without_final_usage(tmp_path, capsys):
    f = lines(tmp_path / "s.jsonl", {"doc_id": 0, "turn": 0,
                                     "stream": vllm_stream("a b", 30, 7, SPEC, final_usage=False)})
    one_error(capsys, ["ingest", "vllm", f, "--out", tmp_path / "run"],
              [str(f), "(doc 0 turn 0)", "without the final usage chunk", "include_usage"])
    # an SSE file of a stream with n > 1
    chunks = vllm_stream("a b", 30, 7, SPEC)
    chunks[0]["choices"].append(dict(chunks[0]["choices"][0], index=1))
    sse = tmp_path / "s.sse"
    sse.write_text("".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n")
    one_error(capsys, ["ingest", "vllm", sse, "--out", tmp_path / "run"], [str(sse), "n > 1"])


def test_other_engines_bad_fields(tmp_path, capsys):
    meta = sglang_meta([2, 2], [1, 2], 2, 10, 6)
    meta["spec_accepted_drafts"] = 99  # an alias disagreeing with the canonical field
    f = lines(tmp_path / "g.jsonl", sglang_response("x", meta))
    one_error(capsys, ["ingest", "sglang", f, "--out", tmp_path / "g"],
              [str(f), "field 'spec_accepted_drafts'", "disagrees with spec_num_correct_drafts"])
    meta = sglang_meta([2, 2], [1, 2], 2, 10, 6)
    meta["spec_new_thing"] = 1  # unknown: refused with --strict only (tests/ingest/test_as_emitted.py)
    f = lines(tmp_path / "g2.jsonl", sglang_response("x", meta))
    one_error(capsys, ["ingest", "sglang", f, "--out", tmp_path / "g", "--strict"],
              ["field 'spec_new_thing'", "unknown"])
    f = lines(tmp_path / "g3.jsonl", {"id": "x", "choices": [{"index": 0, "message": {"content": "x"}}]})
    one_error(capsys, ["ingest", "sglang", f, "--out", tmp_path / "g"], ["field 'meta_info'", "return_meta_info"])
    e = trtllm_entry(7, [2], [1])
    e["perf_metrics"]["speculative_decoding"]["extra"] = 1
    (tmp_path / "t.json").write_text(json.dumps([e]))
    one_error(capsys, ["ingest", "trtllm", tmp_path / "t.json", "--out", tmp_path / "t", "--strict"],
              ["request_id 7", "field 'extra'"])
    r = llamacpp_response("x", [2, 2], [1, 0], 9, 4, by_depth=True)
    r["timings"]["draft_by_depth"][0]["draft_n"] = 5
    f = lines(tmp_path / "l.jsonl", r)
    one_error(capsys, ["ingest", "llamacpp", f, "--out", tmp_path / "l"], ["field 'timings.draft_by_depth'", "sums"])


def test_counters_and_files(tmp_path, capsys):
    (tmp_path / "a.prom").write_text(vllm_prom(100, 200, 90, [60, 30]))
    (tmp_path / "b.prom").write_text(vllm_prom(50, 100, 40, [30, 10]))
    one_error(capsys, ["ingest", "prometheus", tmp_path / "a.prom", tmp_path / "b.prom", "--out", tmp_path / "p"],
              ["went down between the scrapes"])
    (tmp_path / "c.prom").write_text("vllm:spec_decode_num_drafts_total 10\n")
    one_error(capsys, ["ingest", "prometheus", tmp_path / "c.prom", "--out", tmp_path / "p"],
              ["vllm:spec_decode_num_draft_tokens_total", "missing"])
    (tmp_path / "bad.jsonl").write_text(json.dumps(GOOD) + "\n{not json\n")
    one_error(capsys, ["ingest", "vllm", tmp_path / "bad.jsonl", "--out", tmp_path / "p"], ["line 2", "not JSON"])
    one_error(capsys, ["ingest", "vllm", tmp_path / "nope.jsonl", "--out", tmp_path / "p"], ["no such file"])
    f = lines(tmp_path / "mix.jsonl", {"doc_id": 0, "turn": 0, "response": GOOD}, GOOD)
    one_error(capsys, ["ingest", "vllm", f, "--out", tmp_path / "p"], ["line 2", "carries no doc_id"])
    f = lines(tmp_path / "dup.jsonl", {"doc_id": 0, "turn": 0, "response": GOOD},
              {"doc_id": 0, "turn": 0, "response": GOOD})
    one_error(capsys, ["ingest", "vllm", f, "--out", tmp_path / "p"], ["(doc_id, turn) = (0, 0) already used"])
    log = tmp_path / "x.log"
    log.write_text("GLM_MTP_DBG propose position=1 tok=2\n")
    one_error(capsys, ["ingest", "atlas-log", log, "--out", tmp_path / "p"], [str(log), "line 1", "neither known form"])


def test_existing_run_refused_and_manifest_complete_last(tmp_path, capsys, monkeypatch):
    f = lines(tmp_path / "r.jsonl", {"doc_id": 0, "turn": 0, "response": GOOD})
    assert main(["ingest", "vllm", str(f), "--out", str(tmp_path / "run")]) == 0
    capsys.readouterr()
    one_error(capsys, ["ingest", "vllm", f, "--out", tmp_path / "run"], ["already holds a run"])
    # a crash while writing the tables leaves a 'running' run that the analysis refuses
    import atlas_ab.ingest.write as w

    def boom(path, table):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(w, "write_table", boom)
    one_error(capsys, ["ingest", "vllm", f, "--out", tmp_path / "crash"], ["No space left on device"])
    assert json.loads((tmp_path / "crash" / "manifest.json").read_text())["status"] == "running"
    with pytest.raises(Exception, match="not 'complete'"):
        load_run(tmp_path / "crash")
