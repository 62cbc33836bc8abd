"""Each engine's format in, the figures its grain makes exact out (hand-checked), and the
figures it cannot give refused with the reason."""
import json
import math

import pyarrow.parquet as pq
import pytest

from atlas_ab import AtlasError
from atlas_ab.analysis.__main__ import main
from atlas_ab.analysis.comparison import exact_difference, figure
from atlas_ab.analysis.runs import load_run, load_units
from atlas_ab.ingest import ingest
from tests.helpers.engine_fixtures import (
    llamacpp_response,
    sglang_meta,
    sglang_response,
    trtllm_entry,
    trtllm_iterations,
    trtllm_prom,
    vllm_prom,
    vllm_response,
    vllm_spec,
    vllm_stream,
)


def jsonl(path, records):
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return path


def wrapped(doc, turn, response=None, stream=None, extra=None):
    r = {"doc_id": doc, "turn": turn}
    if stream is not None:
        r["stream"] = stream
    else:
        r["response"] = response
    if extra is not None:
        r["extra"] = extra
    return r


# --- vLLM -------------------------------------------------------------------------------------

def test_vllm_variants_are_recognised(tmp_path):
    """The current metrics.speculative_decoding, the earlier choices[].speculative_decoding_stats
    (sparse histogram), a stream's final usage chunk and an offline RequestOutput dump give the
    same steps."""
    ks, accs = [2, 2, 2, 2], [2, 0, 1, 2]
    spec = vllm_spec(ks, accs, 2, detailed=True)
    cur = vllm_response("a b", 50, 10, spec)
    old = vllm_response("a b", 50, 10, spec, variant="stats")
    stream = vllm_stream("a b", 50, 10, spec)
    offline = {"request_id": "0", "prompt_token_ids": list(range(50)),
               "outputs": [{"index": 0, "text": "a b", "token_ids": list(range(10)),
                            "spec_decode_metrics": {"num_spec_tokens": 2, "histogram": [1, 1, 2],
                                                    "num_draft_tokens": 8, "per_step_accepted": accs,
                                                    "per_step_drafted": ks}}]}
    outs = []
    for i, recs in enumerate([[wrapped(0, 0, cur)], [wrapped(0, 0, old)], [wrapped(0, 0, stream=stream)],
                              [wrapped(0, 0, offline)]]):
        run = ingest("vllm", [jsonl(tmp_path / f"{i}.jsonl", recs)], tmp_path / f"r{i}").out
        outs.append(load_run(run, optional=("position",)).steps)
    for df in outs:
        assert df["accept_len"].tolist() == accs and df["k"].tolist() == ks
        # positions: prompt 50, then 1 + accept_len per step
        assert df["position"].tolist() == [50, 53, 54, 56]


def test_vllm_zero_step_requests_are_missing_not_zero(tmp_path):
    spec0 = vllm_spec([], [], 2)  # vLLM: all-zero histogram, mean_acceptance_length 1.0, rate 0.0
    assert spec0["mean_acceptance_length"] == 1.0 and spec0["draft_acceptance_rate"] == 0.0
    spec = vllm_spec([2, 2], [1, 2], 2)
    f = jsonl(tmp_path / "r.jsonl", [wrapped(0, 0, vllm_response("x", 9, 1, spec0)),
                                     wrapped(1, 0, vllm_response("x", 9, 6, spec))])
    res = ingest("vllm", [f], tmp_path / "run")
    assert res.units == 1 and res.dropped == 1
    c = load_units(res.out)
    assert figure(c, "p1").value == 1.0 and figure(c, "p2").value == 0.5
    assert any("missing, not rate 0" in n for n in res.telemetry.notes)


def test_vllm_summary_with_varying_k_bounds(tmp_path):
    # k varied: 3 steps drafted (2, 1, 2) = 5 tokens, histogram [1, 1, 1]; K = 2
    spec = {"mean_acceptance_length": 2.0, "draft_acceptance_rate": 3 / 5, "acceptance_histogram": [1, 1, 1],
            "num_spec_steps": 3, "num_accepted_draft_tokens": 3, "num_draft_tokens": 5, "num_spec_tokens": 2}
    res = ingest("vllm", [jsonl(tmp_path / "r.jsonl", [vllm_response("x", 9, 8, spec)])], tmp_path / "run")
    assert res.steps == 0 and res.telemetry.grain == "requests" and res.telemetry.clusters == "request"
    c = load_units(res.out)
    assert figure(c, "p1").value == pytest.approx(2 / 3)
    assert figure(c, "tokens_per_step").value == pytest.approx(2.0)
    assert figure(c, "draft_acceptance_rate").value == pytest.approx(0.6)
    p2 = figure(c, "p2")
    # #(k >= 2) in [max(#(a>=2)=1, ceil((5 - 3) / 1) = 2), min(3, floor((5 - 3) / 1) = 2)] = 2: here exact
    assert p2.status == "bounds" and p2.low == p2.high == 0.5
    assert figure(c, "p2_cond").status == "refused"


def test_vllm_log_line_gives_token_totals_only(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(
        "INFO 11-29 10:00:00 [loggers.py:123] Engine 000: Avg prompt throughput: 10.0 tokens/s\n"
        "INFO 11-29 10:00:10 [metrics.py:96] SpecDecoding metrics: Mean acceptance length: 2.25, Accepted "
        "throughput: 12.50 tokens/s, Drafted throughput: 20.00 tokens/s, Accepted: 125 tokens, Drafted: 200 "
        "tokens, Per-position acceptance rate: 0.700, 0.550, Avg Draft acceptance rate: 62.5%\n"
        # an older order and wording of the same line
        "INFO 11-29 10:00:20 [metrics.py:60] SpecDecoding metrics: Draft acceptance rate: 50.0%, "
        "Accepted: 25 tokens, Drafted: 50 tokens\n")
    res = ingest("vllm", [log], tmp_path / "run")
    t = res.telemetry
    assert t.grain == "counters" and t.exact == ("draft_acceptance_rate",)
    c = load_units(res.out)
    assert figure(c, "draft_acceptance_rate").value == 150 / 250
    assert figure(c, "p1").status == figure(c, "tokens_per_step").status == "refused"


# --- SGLang ------------------------------------------------------------------------------------

def test_sglang_histogram_writes_steps_and_recomputes_tokens(tmp_path):
    ks, accs = [3] * 4, [3, 0, 1, 3]
    meta = sglang_meta(ks, accs, 3, P=40, C=12)  # C = 1 + 4 + 0 + 1 + 2 ... as the engine counts
    assert meta["spec_accept_length"] == 12 / 4  # counts the prefill's token: not used
    f = jsonl(tmp_path / "r.jsonl", [wrapped(2, 1, sglang_response("x", meta))])
    res = ingest("sglang", [f], tmp_path / "run")
    assert res.telemetry.grain == "requests" and res.steps == 4
    st = load_run(res.out).steps
    assert sorted(st["accept_len"]) == [0, 1, 3, 3] and set(st["k"]) == {3}
    c = load_units(res.out)
    assert figure(c, "tokens_per_step").value == 1 + 7 / 4
    assert figure(c, "p3_cond").value == 2 / 2 and figure(c, "p2").value == 2 / 4


def test_sglang_older_names_without_histogram(tmp_path):
    meta = sglang_meta([2] * 5, [2, 2, 1, 0, 0], 2, P=10, C=11, version="old")
    assert "spec_accept_token_num" in meta and "spec_correct_drafts_histogram" not in meta
    res = ingest("sglang", [jsonl(tmp_path / "r.jsonl", [{"text": "x", "meta_info": meta}])], tmp_path / "run")
    c = load_units(res.out)
    assert figure(c, "tokens_per_step").value == 1 + 5 / 5
    assert figure(c, "draft_acceptance_rate").value == 5 / 10
    assert figure(c, "p1").status == "refused" and "token totals only" in figure(c, "p1").reason


# --- TensorRT-LLM ------------------------------------------------------------------------------

def test_trtllm_perf_metrics_and_iteration_stats(tmp_path):
    entries = [trtllm_entry(1, [3, 3], [3, 1]), trtllm_entry(2, [3], [0]), trtllm_entry(3, [], [])]
    (tmp_path / "perf.json").write_text(json.dumps(entries))
    res = ingest("trtllm", [tmp_path / "perf.json"], tmp_path / "run")
    assert res.units == 2 and res.dropped == 1  # request 3 drafted nothing: missing
    c = load_units(res.out)
    dar = figure(c, "draft_acceptance_rate")
    assert dar.value == 4 / 9 and dar.iid_se is None
    # requests as clusters, under the analysis' rule for every run (stats.MIN_CLUSTERS): 2 are too few
    assert dar.cluster_se is None and "fewer than 10" in dar.rate.cluster_note
    (tmp_path / "perf12.json").write_text(json.dumps([trtllm_entry(i, [3, 3], [i % 4, 0]) for i in range(12)]))
    assert figure(load_units(ingest("trtllm", [tmp_path / "perf12.json"], tmp_path / "r12").out),
                  "draft_acceptance_rate").cluster_se is not None
    for m in ("p1", "tokens_per_step", "p2_cond"):
        assert figure(c, m).status == "refused"
    (tmp_path / "iter.json").write_text(json.dumps(trtllm_iterations([(6, 4, 2), (0, 0, 0), (3, 0, 1)])))
    res = ingest("trtllm", [tmp_path / "iter.json"], tmp_path / "iter")
    c = load_units(res.out)
    tok = figure(c, "tokens_per_step")
    assert tok.value == (3 + 4) / 3 and tok.cluster_se is None and res.telemetry.clusters is None


# --- llama.cpp / ik_llama.cpp ------------------------------------------------------------------

def test_llamacpp_totals_and_ik_by_depth(tmp_path):
    plain = jsonl(tmp_path / "p.jsonl", [wrapped(0, 0, llamacpp_response("x", [4, 2, 3], [1, 2, 0], 9, 7))])
    c = load_units(ingest("llamacpp", [plain], tmp_path / "plain").out)
    assert figure(c, "draft_acceptance_rate").value == 3 / 9
    assert figure(c, "p1").status == "refused"
    # ik_llama.cpp: exact per-depth counts with k varying: p_i exact, p_i_cond refused
    ks, accs = [4, 2, 3, 1], [1, 2, 0, 1]
    ik = jsonl(tmp_path / "ik.jsonl", [wrapped(0, 0, llamacpp_response("x", ks, accs, 9, 9, by_depth=True))])
    res = ingest("llamacpp", [ik], tmp_path / "ik")
    assert res.telemetry.format.startswith("ik_llama") and res.steps == 0
    c = load_units(res.out)
    assert figure(c, "p1").value == 3 / 4 and figure(c, "p2").value == 1 / 3 and figure(c, "p3").value == 0 / 2
    assert figure(c, "tokens_per_step").value == 1 + 4 / 4
    assert figure(c, "p2_cond").status == "refused"
    # every step drafted every depth: k fixed, the steps are written out
    ks, accs = [2, 2, 2], [2, 0, 1]
    fx = jsonl(tmp_path / "fx.jsonl", [wrapped(0, 0, llamacpp_response("x", ks, accs, 9, 7, by_depth=True))])
    res = ingest("llamacpp", [fx], tmp_path / "fx")
    assert res.steps == 3 and sorted(load_run(res.out).steps["accept_len"]) == [0, 1, 2]


# --- Prometheus --------------------------------------------------------------------------------

def test_vllm_counters_before_after(tmp_path):
    (tmp_path / "before.prom").write_text(vllm_prom(100, 200, 90, [60, 30]))
    (tmp_path / "after.prom").write_text(vllm_prom(1100, 2200, 1390, [860, 530]))
    res = ingest("prometheus", [tmp_path / "before.prom", tmp_path / "after.prom"], tmp_path / "run")
    t = res.telemetry
    assert t.grain == "counters" and t.clusters is None and "cluster_sd" in t.not_available
    c = load_units(res.out)
    p1, p2, cond = figure(c, "p1"), figure(c, "p2"), figure(c, "p2_cond")
    assert (p1.value, p1.n) == (0.8, 1000) and p1.iid_se == pytest.approx(math.sqrt(0.8 * 0.2 / 1000))
    assert p1.cluster_se is None and p2.value == 0.5 and cond.value == 500 / 800
    assert figure(c, "tokens_per_step").value == 1 + 1300 / 1000
    # a second arm: binomial sd only, no cluster sd, no bootstrap
    (tmp_path / "b.prom").write_text(vllm_prom(1000, 2000, 1400, [850, 550]))
    b = load_units(ingest("prometheus", [tmp_path / "b.prom"], tmp_path / "b").out)
    d = exact_difference(c, b, "p2")
    assert d.cluster_se is None and d.bootstrap is None and d.se == pytest.approx(
        math.hypot(math.sqrt(0.25 / 1000), math.sqrt(0.55 * 0.45 / 1000)))


def test_vllm_counters_with_varying_k_and_trtllm_positions(tmp_path):
    (tmp_path / "v.prom").write_text(vllm_prom(100, 180, 100, [70, 30]))  # 180 < 100 x 2: k varied
    c = load_units(ingest("prometheus", [tmp_path / "v.prom"], tmp_path / "v").out)
    # a draft whose tokens grammar invalidated counts with 0 tokens (tests/ingest/test_as_emitted.py),
    # so up to 100 - ceil(180 / 2) = 10 drafts may have drafted nothing: #(k >= 1) in [90, 100]
    p1 = figure(c, "p1")
    assert p1.status == "bounds" and (p1.low, p1.high) == (0.7, 70 / 90)
    p2 = figure(c, "p2")  # #(k >= 2) in [max(30, ceil((180 - 100) / 1)) = 80, min(100, floor(180 / 2))]
    assert p2.status == "bounds" and (p2.low, p2.high) == (30 / 90, 30 / 80)
    (tmp_path / "t.prom").write_text(trtllm_prom([100, 80, 50], [70, 40, 10]))
    c = load_units(ingest("prometheus", [tmp_path / "t.prom"], tmp_path / "t").out)
    assert [figure(c, f"p{i}").value for i in (1, 2, 3)] == [0.7, 0.5, 0.2]
    assert figure(c, "p2_cond").status == "refused" and figure(c, "tokens_per_step").value == 1 + 120 / 100


# --- the reference engine log ---------------------------------------------------------------------

def test_atlas_log_events_and_fingerprints(tmp_path, capsys):
    log = tmp_path / "serve.log"
    log.write_text(
        "2026-07-21T10:00:00Z  INFO atlas::glm: GLM_MTP_DBG ctx row slot=0 key=0 tok=17 fp_hidden=00000000000000ff\n"
        "2026-07-21T10:00:00Z  INFO atlas::glm: GLM_MTP_DBG ctx row slot=1 key=1 tok=18 fp_hidden=ffffffffffffffff\n"
        "2026-07-21T10:00:01Z  INFO atlas::glm: GLM_MTP_DBG propose position=3 drafter_rows=2 tok=19 "
        "fp_target=cbf29ce484222325\n"
        "unrelated line\n"
        "2026-07-21T10:00:02Z  INFO atlas::glm: GLM_MTP_DBG propose position=5 drafter_rows=5 tok=20 "
        "fp_target=0000000000000001\n"
        "2026-07-21T10:00:03Z  INFO atlas::glm: GLM_MTP_DBG ctx row slot=5 key=5 tok=21 fp_hidden=0000000000000002\n")
    res = ingest("atlas-log", [log], tmp_path / "run")
    ev = pq.read_table(tmp_path / "run" / "events" / "part-00000.parquet").to_pandas()
    assert ev["kind"].tolist() == ["context", "context", "propose", "propose", "context"]
    assert ev["turn"].tolist() == [0, 0, 0, 0, 1] and ev["step"].tolist() == [-1, -1, 0, 1, -1]
    assert ev["fp"].tolist()[:3] == [255, -1, 0xcbf29ce484222325 - (1 << 64)]
    assert ev["position"].tolist()[2:4] == [3, 5] and ev["rope"].tolist()[0] == -1
    assert res.telemetry.grain == "events"
    assert main(["fingerprints", str(tmp_path / "run"), "--row-space", "dense"]) == 0
    assert "context (drafter prefill rows): 3 rows" in capsys.readouterr().out
    with pytest.raises(AtlasError, match="fingerprint events only"):
        load_run(tmp_path / "run")


def test_docs_counts_table_is_the_schema():
    from pathlib import Path

    from atlas_ab.ingest import ignored_markdown

    assert ignored_markdown() in (Path(__file__).parents[2] / "docs" / "ingest.md").read_text()

    from atlas_ab.telemetry.schema import COUNT_COLUMNS, markdown_table

    docs = (Path(__file__).parents[2] / "docs" / "ingest.md").read_text()
    assert markdown_table(COUNT_COLUMNS, required=False) in docs


def test_no_positions_without_carried_documents(tmp_path):
    spec = vllm_spec([2, 2], [1, 2], 2)
    res = ingest("vllm", [jsonl(tmp_path / "r.jsonl", [vllm_response("x", 9, 6, spec)] * 2)], tmp_path / "run")
    t = res.telemetry
    assert t.clusters == "request" and "cannot be matched" in t.why_not("position_pairing")
    assert "position" not in load_run(res.out).steps.columns


def test_registry_and_one_reader():
    """Every source is one module with one signature; the collector and the ingest read JSON,
    JSON lines and SSE with the same functions."""
    import importlib
    import inspect

    from atlas_ab.collect import client
    from atlas_ab.ingest import SOURCES, jsonio, responses

    for name, path in SOURCES.items():
        mod = importlib.import_module(path)
        entry = getattr(mod, "units", None) or mod.events
        assert list(inspect.signature(entry).parameters)[0] == "paths", name
        assert set(getattr(mod, "OPTIONS", ())) <= set(inspect.signature(entry).parameters), name
    assert client.sse_payloads is jsonio.sse_payloads and responses.json_items is jsonio.json_items
    with pytest.raises(AtlasError, match="applies to sglang only, not to vllm"):
        from atlas_ab.ingest import source_units
        source_units("vllm", [], k=3)
