"""Issue 21: what the engines emit today, each case built from the engine's documented output
(the source is cited beside each). Two were silently wrong (a restart between scrapes, a
verify step with zero drafts); the rest were refused although the engines emit them.

The rule for fields: an unknown field or metric name is ignored, noted in the manifest
(`telemetry.ignored`) and in one warning line; `--strict` refuses it. A known field with a
wrong type or an impossible value stays fatal, naming file, line, request and field."""
import json

import pytest

from atlas_ab import AtlasError
from atlas_ab.analysis.__main__ import main
from atlas_ab.analysis.comparison import figure
from atlas_ab.analysis.runs import load_run, load_units
from atlas_ab.ingest import ingest
from tests.helpers.engine_fixtures import sglang_meta, sglang_response, vllm_response, vllm_spec

ERR = "atlas_ab.analysis: error: "
WARN = "atlas_ab.analysis: warning: "


def jsonl(path, *records):
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return path


def errors(capsys, argv):
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err.splitlines()
    return code, [l for l in err if l.startswith(ERR)], [l for l in err if l.startswith(WARN)]


# ---- silently wrong: a restart between two scrapes --------------------------------------------
# prometheus_client writes, for every counter, `<name>_created <unix time>` beside `<name>_total`:
# the time this process created it (vllm/v1/spec_decode/metrics.py SpecDecodingProm builds its
# counters with prometheus_client.Counter). A server restarted between the scrapes has a new one.

def vllm_scrape(drafts, draft_tokens, accepted, per_pos, created):
    lab = 'engine="0",model_name="m"'
    out = []
    for name, v, doc in (("num_drafts", drafts, "Number of spec decoding drafts."),
                         ("num_draft_tokens", draft_tokens, "Number of draft tokens."),
                         ("num_accepted_tokens", accepted, "Number of accepted tokens.")):
        out += [f"# HELP vllm:spec_decode_{name}_total {doc}", f"# TYPE vllm:spec_decode_{name}_total counter",
                f"vllm:spec_decode_{name}_total{{{lab}}} {float(v)}",
                f"vllm:spec_decode_{name}_created{{{lab}}} {created}"]
    out += ["# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.",
            "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter"]
    for i, v in enumerate(per_pos):
        out += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="{i}"}} {float(v)}',
                f'vllm:spec_decode_num_accepted_tokens_per_pos_created{{{lab},position="{i}"}} {created}']
    return "\n".join(out) + "\n"


def test_restart_between_scrapes_is_refused(tmp_path, capsys):
    before, after = tmp_path / "before.prom", tmp_path / "after.prom"
    before.write_text(vllm_scrape(100, 200, 90, [60, 30], created="1.7646e+09"))
    # the server restarted and served more than before: every counter is larger after, the
    # difference (1000 - 100 drafts, ...) would subtract two processes' counts
    after.write_text(vllm_scrape(1000, 2000, 1300, [800, 500], created="1.7647e+09"))
    code, err, _ = errors(capsys, ["ingest", "prometheus", before, after, "--out", tmp_path / "run"])
    assert code == 2 and len(err) == 1
    assert "restarted between the scrapes" in err[0] and "vllm:spec_decode_num_drafts_created" in err[0]
    assert "ingest the after-scrape alone" in err[0] and not (tmp_path / "run").exists()
    # a counter that goes down says the same
    after.write_text(vllm_scrape(50, 100, 40, [30, 10], created="1.7646e+09"))
    code, err, _ = errors(capsys, ["ingest", "prometheus", before, after, "--out", tmp_path / "run"])
    assert code == 2 and "restarted between the scrapes" in err[0] and "went down" in err[0]
    # the same process: the difference
    after.write_text(vllm_scrape(1100, 2200, 1390, [860, 530], created="1.7646e+09"))
    c = load_units(ingest("prometheus", [before, after], tmp_path / "same").out)
    assert figure(c, "p1").value == 800 / 1000 and figure(c, "p2_cond").value == 500 / 800


# ---- silently wrong: a verify step with zero drafts --------------------------------------------
# vLLM subtracts the drafts structured-output grammar invalidated before it observes a step
# (vllm/v1/core/sched/scheduler.py `make_spec_decoding_stats`: `num_draft_tokens -=
# num_invalid_spec_tokens`; the per-request docs: num_draft_tokens is "after subtracting drafts
# invalidated by structured-output constraints"), so a step can be recorded with k = 0.
# Here: 26 recorded steps, one of them with k = 0, the 25 others k = 3.

KS = [3, 3, 0] + [3] * 23
ACCS = [1, 2, 0] + [0] * 7 + [1] * 4 + [2] * 8 + [3] * 4   # verify steps: 7 x 0, 5 x 1, 9 x 2, 4 x 3


def zero_draft_spec(detailed):
    spec = vllm_spec(KS, ACCS, 3, detailed=detailed)
    assert spec["num_spec_steps"] == 26 and spec["num_draft_tokens"] == 75
    assert spec["acceptance_histogram"] == [8, 5, 9, 4]  # the k = 0 step accepted nothing
    return spec


def test_zero_draft_step_summary_is_bounded_not_wrong(tmp_path):
    f = jsonl(tmp_path / "r.jsonl", vllm_response("x", 40, 80, zero_draft_spec(detailed=False)))
    c = load_units(ingest("vllm", [f], tmp_path / "run").out)
    p1, p3 = figure(c, "p1"), figure(c, "p3")
    # the truth: p1 = 18 / 25 = 0.72, p3 = 4 / 25 = 0.16; taking #(k >= 1) = 26 steps gave 0.6923
    assert p1.status == "bounds" and p1.low <= 0.72 <= p1.high
    assert p1.low == pytest.approx(18 / 26) and p1.high == pytest.approx(18 / 25)
    assert p3.status == "bounds" and p3.low <= 0.16 <= p3.high
    assert p3.low == pytest.approx(4 / 25) and p3.high == pytest.approx(4 / 23)
    tok = figure(c, "tokens_per_step")
    assert tok.status == "refused" and "k = 0" in tok.reason
    assert figure(c, "draft_acceptance_rate").value == 35 / 75


def test_zero_draft_step_detailed_is_exact(tmp_path):
    f = jsonl(tmp_path / "r.jsonl", {"doc_id": 0, "turn": 0,
                                     "response": vllm_response("x", 40, 62, zero_draft_spec(detailed=True))})
    res = ingest("vllm", [f], tmp_path / "run")
    c = load_units(res.out)
    assert figure(c, "p1").value == 18 / 25 and figure(c, "p3").value == 4 / 25
    assert figure(c, "tokens_per_step").value == 1 + 35 / 25
    # the k = 0 step is a row of its own, in no denominator, and it commits one token
    st = load_run(res.out, optional=("position",)).steps
    assert st["k"].tolist()[:3] == [3, 3, 0] and st["position"].tolist()[:4] == [40, 42, 45, 46]


def test_structured_output_off_means_no_zero_draft_step(tmp_path):
    # a client that kept its request shows no structured output: no step lost all its drafts, so a
    # summary with drafted < steps x k has k varied, and #(k >= 1) is the step count
    spec = vllm_spec([2, 1, 1, 1], [1, 1, 0, 1], 2, detailed=False)  # 5 drafts over 4 steps: one may be empty
    rec = {"doc_id": 0, "turn": 0, "request": {"model": "m", "temperature": 0},
           "response": vllm_response("x", 9, 8, spec)}
    c = load_units(ingest("vllm", [jsonl(tmp_path / "r.jsonl", rec)], tmp_path / "plain").out)
    assert figure(c, "p1").status == "exact" and figure(c, "p1").value == 3 / 4
    rec["request"]["response_format"] = {"type": "json_object"}
    c = load_units(ingest("vllm", [jsonl(tmp_path / "s.jsonl", rec)], tmp_path / "json").out)
    assert figure(c, "p1").status == "bounds"


# ---- vLLM: refused, though vLLM emits it -------------------------------------------------------

def test_vllm_histogram_by_draft_length_is_noted_not_fatal(tmp_path, capsys):
    # current main's per-request object adds `acceptance_histogram_by_draft_length` (the offline
    # dataclass: `histogram_by_draft_length`); its layout is not in the sources read: not used
    spec = vllm_spec([2, 2, 2], [2, 0, 1], 2)
    spec["acceptance_histogram_by_draft_length"] = [[0], [0, 0], [1, 1, 1]]
    f = jsonl(tmp_path / "r.jsonl", vllm_response("x", 30, 7, spec))
    code, err, warn = errors(capsys, ["ingest", "vllm", f, "--out", tmp_path / "run", "--strict"])
    assert code == 0 and not err and not warn  # known, not read: no warning, not refused by --strict
    m = json.loads((tmp_path / "run" / "manifest.json").read_text())["telemetry"]
    assert "acceptance_histogram_by_draft_length" in m["ignored"]
    assert figure(load_units(tmp_path / "run"), "p1").value == 2 / 3


def test_vllm_offline_dataclass_in_summary_mode(tmp_path):
    # dataclasses.asdict(RequestOutput): RequestSpecDecodeMetrics' per_step_* lists default to
    # empty, so a summary-mode object carries [] and [] (vllm/v1/metrics/stats.py)
    out = {"request_id": "0", "prompt_token_ids": list(range(20)),
           "outputs": [{"index": 0, "text": "a", "token_ids": list(range(9)),
                        "spec_decode_metrics": {"num_spec_tokens": 2, "histogram": [1, 1, 2], "num_draft_tokens": 8,
                                                "per_step_accepted": [], "per_step_drafted": [],
                                                "histogram_by_draft_length": [[0], [0, 0], [1, 1, 2]]}}]}
    res = ingest("vllm", [jsonl(tmp_path / "r.jsonl", out)], tmp_path / "run")
    assert res.telemetry.format == "vllm per-request summary" and res.steps == 4
    assert "histogram_by_draft_length" in res.telemetry.ignored
    c = load_units(res.out)
    assert figure(c, "p1").value == 3 / 4 and figure(c, "p2").value == 2 / 4


def test_vllm_per_choice_variant_n_and_stream(tmp_path):
    # the earlier `--per-request-spec-decode-stats`: `choices[i].speculative_decoding_stats`, one
    # per choice (n > 1 allowed); streamed, on the terminal chunk's choice (its docs: "attached to
    # the terminal chunk's choice (the chunk carrying the finish reason)"), sparse histogram
    def stats(ks, accs):
        s = vllm_spec(ks, accs, 2, detailed=False)
        s["acceptance_histogram"] = {str(j): c for j, c in enumerate(s["acceptance_histogram"]) if c}
        return s
    body = {"id": "cmpl-1", "object": "text_completion", "model": "m",
            "choices": [{"index": 0, "text": "a", "finish_reason": "length",
                         "speculative_decoding_stats": stats([2, 2], [2, 1])},
                        {"index": 1, "text": "b", "finish_reason": "length",
                         "speculative_decoding_stats": stats([2, 2, 2], [0, 0, 2])}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 12}}
    res = ingest("vllm", [jsonl(tmp_path / "n2.jsonl", body)], tmp_path / "n2")
    assert res.units == 2
    c = load_units(res.out)
    assert figure(c, "p1").value == 3 / 5 and figure(c, "p2").value == 2 / 5
    chunks = [{"id": "c", "object": "text_completion", "choices": [{"index": 0, "text": "a", "finish_reason": None}]},
              {"id": "c", "object": "text_completion",
               "choices": [{"index": 0, "text": "b", "finish_reason": "length",
                            "speculative_decoding_stats": stats([2, 2], [2, 1])}]}]
    sse = tmp_path / "s.sse"
    sse.write_text("".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n")
    c = load_units(ingest("vllm", [sse], tmp_path / "stream").out)
    assert figure(c, "p1").value == 1.0 and figure(c, "p2").value == 1 / 2


def test_vllm_v0_and_unknown_prometheus_names(tmp_path, capsys):
    # v0 (vllm/engine/metrics.py): two gauges and three counters, no drafts counter
    v0 = tmp_path / "v0.prom"
    v0.write_text(
        "# HELP vllm:spec_decode_draft_acceptance_rate Speulative token acceptance rate.\n"
        "# TYPE vllm:spec_decode_draft_acceptance_rate gauge\n"
        'vllm:spec_decode_draft_acceptance_rate{model_name="m"} 0.6\n'
        "# TYPE vllm:spec_decode_efficiency gauge\n"
        'vllm:spec_decode_efficiency{model_name="m"} 0.55\n'
        'vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 600.0\n'
        'vllm:spec_decode_num_draft_tokens_total{model_name="m"} 1000.0\n'
        'vllm:spec_decode_num_emitted_tokens_total{model_name="m"} 900.0\n')
    res = ingest("prometheus", [v0], tmp_path / "v0")
    assert set(res.telemetry.ignored) == {"vllm:spec_decode_draft_acceptance_rate", "vllm:spec_decode_efficiency",
                                          "vllm:spec_decode_num_emitted_tokens_total"}
    c = load_units(res.out)
    assert figure(c, "draft_acceptance_rate").value == 0.6 and figure(c, "p1").status == "refused"
    # a name this reader does not know: one warning, in the manifest; --strict refuses it
    new = tmp_path / "new.prom"
    new.write_text(vllm_scrape(100, 200, 90, [60, 30], created="1.7e9")
                   + 'vllm:spec_decode_num_drafts_by_draft_length_total{engine="0",draft_length="2"} 100.0\n')
    code, err, warn = errors(capsys, ["ingest", "prometheus", new, "--out", tmp_path / "new"])
    assert code == 0 and len(warn) == 1 and "vllm:spec_decode_num_drafts_by_draft_length_total" in warn[0]
    assert figure(load_units(tmp_path / "new"), "p1").value == 0.6
    code, err, _ = errors(capsys, ["ingest", "prometheus", new, "--out", tmp_path / "strict", "--strict"])
    assert code == 2 and "field 'vllm:spec_decode_num_drafts_by_draft_length_total'" in err[0]


def test_vllm_older_log_lines(tmp_path):
    # v0 (vllm/engine/metrics.py `_format_spec_decode_metrics_str`): totals since the server
    # started (the rejection sampler's counters are never reset): the last line is the total
    v0 = tmp_path / "v0.log"
    v0.write_text(
        "INFO 06-01 10:00:00 metrics.py:351] Speculative metrics: Draft acceptance rate: 0.500, System efficiency: "
        "0.417, Number of speculative tokens: 2, Number of accepted tokens: 50, Number of draft tokens: 100, Number "
        "of emitted tokens: 125.\n"
        "INFO 06-01 10:00:05 metrics.py:351] Speculative metrics: Draft acceptance rate: 0.550, System efficiency: "
        "0.450, Number of speculative tokens: 2, Number of accepted tokens: 165, Number of draft tokens: 300, Number "
        "of emitted tokens: 405.\n")
    res = ingest("vllm", [v0], tmp_path / "v0run")
    assert figure(load_units(res.out), "draft_acceptance_rate").value == 165 / 300
    assert any("last one is used" in n for n in res.telemetry.notes)
    # the first v1 (vllm/v1/spec_decode/metrics.py SpecDecodingMetrics.log): the same words, one
    # logging interval per line, system efficiency always nan: summed
    v1 = tmp_path / "v1.log"
    v1.write_text(
        "INFO 02-01 10:00:00 [metrics.py:80] Speculative metrics: Draft acceptance rate: 0.500, System efficiency: "
        "nan, Number of speculative tokens: 2, Number of accepted tokens: 50, Number of draft tokens: 100, Number of "
        "emitted tokens: 0.\n"
        "INFO 02-01 10:00:05 [metrics.py:80] Speculative metrics: Draft acceptance rate: 0.700, System efficiency: "
        "nan, Number of speculative tokens: 2, Number of accepted tokens: 70, Number of draft tokens: 100, Number of "
        "emitted tokens: 0.\n")
    assert figure(load_units(ingest("vllm", [v1], tmp_path / "v1run").out),
                  "draft_acceptance_rate").value == 120 / 200


# ---- SGLang -------------------------------------------------------------------------------------

def test_sglang_current_fields_and_no_proposals(tmp_path, capsys):
    # SGLang's own fixture (test/srt/openai_server/basic/test_serving_completions.py `_spec_result`),
    # written by current `_calculate_spec_decoding_metrics`
    meta = {"id": "cmpl-spec-test", "prompt_tokens": 10, "completion_tokens": 2, "cached_tokens": 0,
            "finish_reason": {"type": "stop"}, "weight_version": "default", "spec_accept_rate": 0.5,
            "spec_accept_length": 2.0, "spec_cap_length": 1.0, "spec_block_accept_length": 0.5,
            "spec_num_correct_drafts": 1, "spec_num_proposed_drafts": 2, "spec_verify_ct": 1,
            "spec_correct_drafts_histogram": [0, 1], "spec_cap_lens_histogram": [0, 1]}
    f = jsonl(tmp_path / "r.jsonl", {"text": "choice-0", "meta_info": meta, "index": 0})
    code, err, warn = errors(capsys, ["ingest", "sglang", f, "--out", tmp_path / "run", "--strict"])
    assert code == 0 and not err and not warn
    t = json.loads((tmp_path / "run" / "manifest.json").read_text())["telemetry"]
    assert set(t["ignored"]) == {"spec_cap_length", "spec_cap_lens_histogram", "spec_block_accept_length"}
    c = load_units(tmp_path / "run")
    assert figure(c, "p1").value == 1.0 and figure(c, "p2").value == 0.0
    # histograms but no spec_verify_ct: no step verified drafts, the request is missing (not rate 0)
    none = {"id": "x", "prompt_tokens": 10, "completion_tokens": 4, "spec_correct_drafts_histogram": [],
            "spec_cap_lens_histogram": []}
    res = ingest("sglang", [jsonl(tmp_path / "n.jsonl", {"text": "a", "meta_info": meta},
                                  {"text": "b", "meta_info": none})], tmp_path / "none")
    assert res.units == 1 and res.dropped == 1


# ---- TensorRT-LLM -------------------------------------------------------------------------------

def test_trtllm_fresh_server_scrape_is_zero(tmp_path):
    # tensorrt_llm/metrics/collector.py creates the labelled counters on first use, so a fresh
    # server's /metrics prints their HELP/TYPE lines and no sample
    fresh = tmp_path / "before.prom"
    fresh.write_text("# HELP trtllm_spec_decode_drafted_tokens_total Total number of draft tokens\n"
                     "# TYPE trtllm_spec_decode_drafted_tokens_total counter\n"
                     "# HELP trtllm_spec_decode_accepted_tokens_total Total number of accepted tokens\n"
                     "# TYPE trtllm_spec_decode_accepted_tokens_total counter\n"
                     "# HELP trtllm_request_success_total Count of successfully processed requests.\n"
                     "# TYPE trtllm_request_success_total counter\n")
    after = tmp_path / "after.prom"
    after.write_text(fresh.read_text() + "".join(
        f'trtllm_spec_decode_{w}_tokens_total{{token_position="{i}",worker="0"}} {v}\n'
        for w, vals in (("drafted", (100, 80, 50)), ("accepted", (70, 40, 10))) for i, v in enumerate(vals)))
    c = load_units(ingest("prometheus", [fresh, after], tmp_path / "run").out)
    assert [figure(c, f"p{i}").value for i in (1, 2, 3)] == [0.7, 0.5, 0.2]


def test_trtllm_iteration_stats_as_json_strings(tmp_path):
    # tensorrt_llm/llmapi/llm.py `get_stats`: "a list of JSON strings", one per iteration
    its = [json.dumps({"iter": i, "iterLatencyMS": 10.0,
                       "specDecodingStats": {"numDraftTokens": d, "numAcceptedTokens": a,
                                             "numRequestsWithDraftTokens": r, "acceptanceLength": 1 + a / r,
                                             "iterLatencyMS": 1.0, "draftOverhead": 0.1}})
           for i, (d, a, r) in enumerate([(6, 4, 2), (3, 0, 1)])]
    (tmp_path / "stats.json").write_text(json.dumps(its))
    c = load_units(ingest("trtllm", [tmp_path / "stats.json"], tmp_path / "run").out)
    assert figure(c, "tokens_per_step").value == (3 + 4) / 3


# ---- llama.cpp --------------------------------------------------------------------------------

def test_llamacpp_metrics_counters(tmp_path):
    # tools/server/server-task.cpp, the /metrics text: three counters and the per-position one
    text = ("# HELP llamacpp:spec_decode_num_draft_tokens_total Total speculative draft tokens generated.\n"
            "# TYPE llamacpp:spec_decode_num_draft_tokens_total counter\n"
            "llamacpp:spec_decode_num_draft_tokens_total {d}\n"
            "# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter\n"
            "llamacpp:spec_decode_num_accepted_tokens_total {a}\n"
            "# TYPE llamacpp:spec_decode_num_drafts_total counter\n"
            "llamacpp:spec_decode_num_drafts_total {n}\n"
            "# HELP llamacpp:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position\n"
            "# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter\n"
            'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="0"}} {p0}\n'
            'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="1"}} {p1}\n')
    (tmp_path / "b.prom").write_text(text.format(d=0, a=0, n=0, p0=0, p1=0))
    (tmp_path / "a.prom").write_text(text.format(d=400, a=250, n=200, p0=150, p1=100))
    res = ingest("prometheus", [tmp_path / "b.prom", tmp_path / "a.prom"], tmp_path / "run")
    assert res.telemetry.format == "llamacpp prometheus counters"
    c = load_units(res.out)
    assert figure(c, "p1").value == 0.75 and figure(c, "p2").value == 0.5
    assert figure(c, "tokens_per_step").value == 1 + 250 / 200


# ---- the rule -----------------------------------------------------------------------------------

def test_unknown_field_warns_strict_refuses_bad_values_stay_fatal(tmp_path, capsys):
    spec = vllm_spec([2, 2, 2], [2, 0, 1], 2)
    good = {"doc_id": 0, "turn": 0, "response": vllm_response("x", 30, 7, spec)}
    new = {"doc_id": 1, "turn": 0, "response": vllm_response("x", 30, 7, {**spec, "acceptance_rate_new": 0.5})}
    f = jsonl(tmp_path / "r.jsonl", good, new)
    code, err, warn = errors(capsys, ["ingest", "vllm", f, "--out", tmp_path / "run"])
    assert code == 0 and len(warn) == 1 and "acceptance_rate_new" in warn[0] and "--strict" in warn[0]
    t = json.loads((tmp_path / "run" / "manifest.json").read_text())["telemetry"]
    assert t["ignored"] == {"acceptance_rate_new": "unknown to this reader"}
    code, err, _ = errors(capsys, ["ingest", "vllm", f, "--out", tmp_path / "strict", "--strict"])
    assert code == 2 and len(err) == 1 and not (tmp_path / "strict").exists()
    assert all(m in err[0] for m in (str(f), "line 2", "(doc 1 turn 0)", "field 'acceptance_rate_new'"))
    # SGLang and TensorRT-LLM alike
    meta = sglang_meta([2, 2], [1, 2], 2, 10, 6)
    meta["spec_new_thing"] = 1
    g = jsonl(tmp_path / "g.jsonl", sglang_response("x", meta))
    assert ingest("sglang", [g], tmp_path / "g").telemetry.ignored == {"spec_new_thing": "unknown to this reader"}
    with pytest.raises(AtlasError, match="field 'spec_new_thing'"):
        ingest("sglang", [g], tmp_path / "g2", strict=True)
    # a known field with an impossible value: fatal, naming file, line, request and field
    bad = {"doc_id": 1, "turn": 0, "response": vllm_response("x", 30, 7, {**spec, "num_accepted_draft_tokens": 9,
                                                                          "num_draft_tokens": 6})}
    code, err, _ = errors(capsys, ["ingest", "vllm", jsonl(tmp_path / "b.jsonl", good, bad), "--out", tmp_path / "b"])
    assert code == 2 and all(m in err[0] for m in ("b.jsonl", "line 2", "(doc 1 turn 0)", "field"))
    wrong = {"doc_id": 1, "turn": 0, "response": vllm_response("x", 30, 7, {**spec, "num_spec_steps": "3"})}
    code, err, _ = errors(capsys, ["ingest", "vllm", jsonl(tmp_path / "w.jsonl", good, wrong), "--out", tmp_path / "w"])
    assert code == 2 and "field 'num_spec_steps'" in err[0] and "non-negative integer" in err[0]
