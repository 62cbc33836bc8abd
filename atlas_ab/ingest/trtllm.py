"""TensorRT-LLM: per-request perf metrics and per-iteration stats -> units.

Per request: trtllm-serve's GET /perf_metrics (tensorrt_llm/serve/openai_server.py,
`get_perf_metrics`; needs `return_perf_metrics: true` in the LLM API options) returns
[{"request_id", "perf_metrics": {..., "speculative_decoding": {"acceptance_rate",
"total_accepted_draft_tokens", "total_draft_tokens"}}}], the last key only when the request
drafted. Token totals only: no step count, no histogram, no per-depth counts, so only the
draft acceptance rate is exact per request.

Per iteration: the iteration stats (`/metrics` of trtllm-serve with enable_iter_perf_stats;
struct SpecDecodingStats in cpp/include/tensorrt_llm/executor/types.h) carry
"specDecodingStats": {"numDraftTokens", "numAcceptedTokens", "numRequestsWithDraftTokens",
"acceptanceLength", "iterLatencyMS", "draftOverhead"}: summed over iterations they are
global counters with the number of verify steps (one per request with drafts per
iteration), so tokens/step is exact there, still no p_i.

The per-position Prometheus counters (trtllm_spec_decode_{drafted,accepted}_tokens_total)
are read by the `prometheus` source.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from atlas_ab import AtlasError
from atlas_ab.ingest.engine_units import UNKNOWN, Unit, Where, check_unit
from atlas_ab.ingest.jsonio import json_items
from atlas_ab.ingest.responses import Record, read_records

PER_REQUEST = {"acceptance_rate", "total_accepted_draft_tokens", "total_draft_tokens"}
ITERATION = {"numDraftTokens", "numAcceptedTokens", "numRequestsWithDraftTokens", "acceptanceLength",
             "iterLatencyMS", "draftOverhead"}


def _entry_unit(entry: dict, w: Where, doc_id=None, turn=None) -> Unit:
    if "perf_metrics" not in entry:
        raise w.error("missing (a /perf_metrics entry)", "perf_metrics")
    pm = entry["perf_metrics"]
    if not isinstance(pm, dict):
        raise w.error(f"expected an object, got {type(pm).__name__}", "perf_metrics")
    rid = entry.get("request_id")
    u = Unit(where=w.at(f"{w.request} (request_id {rid})" if w.request else f"request_id {rid}"),
             unit=str(rid), doc_id=doc_id, turn=turn)
    spec = pm.get("speculative_decoding")
    if spec is None:  # trtllm-serve omits it when the request drafted nothing
        u.draft_tokens = u.accepted_tokens = 0
        return u
    w = u.where
    if not isinstance(spec, dict):
        raise w.error(f"expected an object, got {type(spec).__name__}", "perf_metrics.speculative_decoding")
    u.ignored = {f: UNKNOWN for f in sorted(set(spec) - PER_REQUEST)}
    for f in sorted(PER_REQUEST):
        if f not in spec:
            raise w.error("missing in perf_metrics.speculative_decoding", f)
    u.draft_tokens = w.count(spec["total_draft_tokens"], "total_draft_tokens")
    u.accepted_tokens = w.count(spec["total_accepted_draft_tokens"], "total_accepted_draft_tokens")
    rate = spec["acceptance_rate"]
    if u.draft_tokens and (not isinstance(rate, (int, float)) or
                           not math.isclose(float(rate), u.accepted_tokens / u.draft_tokens, rel_tol=1e-6)):
        raise w.error(f"{rate!r} disagrees with the token totals", "acceptance_rate")
    return check_unit(u)


def unit_from(rec: Record) -> Unit:
    w = rec.where
    if rec.extra is not None:  # the collector's record: the response plus its /perf_metrics entry
        entry = rec.extra.get("perf_metrics") if isinstance(rec.extra, dict) else None
        if not isinstance(entry, dict):
            raise w.error("missing the request's /perf_metrics entry", "extra.perf_metrics")
        return _entry_unit(entry, w, rec.doc_id, rec.turn)
    return _entry_unit(rec.body or {}, w, rec.doc_id, rec.turn)


def _decoded(path: Path, items) -> list:
    """Iteration stats as `LLM.get_stats()` returns them: each a JSON string (the example in
    tensorrt_llm/llmapi/llm.py's `get_stats` docstring), or already an object."""
    out = []
    for label, it in items:
        if isinstance(it, str):
            try:
                it = json.loads(it)
            except ValueError as e:
                raise Where(str(path), label).error(f"a string that is not JSON ({e})") from None
        out.append((label, it))
    return out


def _iteration_unit(path: Path, items) -> Unit:
    n = a = d = 0
    seen = 0
    ignored = {}
    for label, it in _decoded(path, items):
        w = Where(str(path), label)
        if not isinstance(it, dict):
            raise w.error(f"expected an iteration-stats object, got {type(it).__name__}")
        s = it.get("specDecodingStats")
        if s is None:
            continue
        if not isinstance(s, dict):
            raise w.error(f"expected an object, got {type(s).__name__}", "specDecodingStats")
        ignored.update({f: UNKNOWN for f in set(s) - ITERATION})
        for f in ("numDraftTokens", "numAcceptedTokens", "numRequestsWithDraftTokens"):
            if f not in s:
                raise w.error("missing in specDecodingStats", f)
        di = w.count(s["numDraftTokens"], "numDraftTokens")
        ai = w.count(s["numAcceptedTokens"], "numAcceptedTokens")
        ni = w.count(s["numRequestsWithDraftTokens"], "numRequestsWithDraftTokens")
        if di == 0:
            continue
        if ai > di or ni == 0:
            raise w.error(f"{ai} accepted of {di} drafted over {ni} requests with drafts", "specDecodingStats")
        al = s.get("acceptanceLength")
        if al is not None and not math.isclose(float(al), 1 + ai / ni, rel_tol=1e-4):
            raise w.error(f"{al!r} disagrees with 1 + numAcceptedTokens / numRequestsWithDraftTokens",
                          "acceptanceLength")
        n, a, d, seen = n + ni, a + ai, d + di, seen + 1
    if not seen:
        raise AtlasError(f"{path}: no iteration with specDecodingStats drafts")
    return Unit(where=Where(str(path)), unit="global", n_steps=n, draft_tokens=d, accepted_tokens=a,
                ignored=dict(sorted(ignored.items())))


def _is_iteration_file(items) -> bool:
    def looks(it):
        if isinstance(it, str):
            return '"specDecodingStats"' in it or '"iterLatencyMS"' in it
        return isinstance(it, dict) and ("specDecodingStats" in it or "iterLatencyMS" in it)
    return any(looks(it) for _, it in items)


def units(paths) -> tuple[list[Unit], str, tuple[str, ...]]:
    paths = [Path(p) for p in paths]
    kinds = {}
    for p in paths:
        kinds[p] = _is_iteration_file(json_items(p))
    if any(kinds.values()):
        if not all(kinds.values()):
            raise AtlasError(f"{next(p for p, k in kinds.items() if not k)}: iteration stats and per-request "
                             "perf metrics given together; ingest them apart")
        total = Unit(where=Where(str(paths[0])), unit="global", n_steps=0, draft_tokens=0, accepted_tokens=0)
        for p in paths:
            u = _iteration_unit(p, json_items(p))
            total.n_steps += u.n_steps
            total.draft_tokens += u.draft_tokens
            total.accepted_tokens += u.accepted_tokens
            total.ignored.update(u.ignored)
        return [total], "trtllm iteration stats (specDecodingStats)", ()
    us = [unit_from(r) for r in read_records(paths)]
    return us, "trtllm /perf_metrics per request", (
        "per-request perf metrics give drafted and accepted token totals only",)
