"""vLLM: per-request spec-decode metrics (and its server log line) -> units.

Per request (`--per-request-spec-decode-metrics summary|detailed`, vLLM PR #48915; the
class is `RequestSpecDecodeMetrics` in vllm/v1/metrics/stats.py, filled per verify step
in vllm/v1/core/sched/scheduler.py, only for steps that carried drafts). Where it rides:

  response["metrics"]["speculative_decoding"]         OpenAI chat/completions, n == 1 only;
                                                      streamed: on the final usage chunk
  choice["speculative_decoding_stats"]                the earlier `--per-request-spec-decode-stats`
                                                      variant (histogram a sparse {"j": count} map)
  output["spec_decode_metrics"]                       offline `RequestOutput.outputs[0]` (dataclass
                                                      fields: `histogram`, no derived rates)

Global: the "SpecDecoding metrics: ..." log line of vllm/v1/spec_decode/metrics.py
(SpecDecodingLogging.log), parsed field by field by its key (the order changed between
versions). Its rates are rounded per logging interval and it never prints the number of
drafts, so only drafted and accepted token totals are exact from it.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

from atlas_ab import AtlasError
from atlas_ab.ingest.records import Record, read_records, read_text
from atlas_ab.ingest.units import Unit, Where, check_unit, fixed_k

# the spec-decode object's fields (vllm/v1/metrics/stats.py RequestSpecDecodeMetrics.to_dict)
SUMMARY = {"mean_acceptance_length", "draft_acceptance_rate", "acceptance_histogram", "num_spec_steps",
           "num_accepted_draft_tokens", "num_draft_tokens", "num_spec_tokens"}
DETAILED = {"per_step_accepted", "per_step_drafted"}
# the offline dataclass RequestSpecDecodeMetrics itself (RequestOutput.outputs[0].spec_decode_metrics)
OFFLINE = {"num_spec_tokens", "histogram", "num_draft_tokens", "per_step_accepted", "per_step_drafted"}
ENABLE = "start vLLM with --per-request-spec-decode-metrics summary|detailed"


def _close(x: float, y: float) -> bool:
    return math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-9)


def _locate(rec: Record) -> tuple[dict, dict | None, str, Where]:
    """(spec-decode object, usage, where it was found, where) of one record; refuses n > 1
    and streams without their final usage chunk."""
    w = rec.where
    if rec.stream is not None:
        chunks = [c for c in rec.stream if isinstance(c, dict)]
        idx = {ch.get("index", 0) for c in chunks for ch in (c.get("choices") or []) if isinstance(ch, dict)}
        if any(i != 0 for i in idx):
            raise w.error(f"streamed response with n > 1 (choice indexes {sorted(idx)}): vLLM reports "
                          "per-request spec-decode metrics for n == 1 only")
        usage = [c for c in chunks if c.get("usage")]
        if not usage:
            raise w.error("streamed response without the final usage chunk: vLLM attaches "
                          "metrics.speculative_decoding to it (set stream_options.include_usage: true "
                          "or start vLLM with --enable-force-include-usage)")
        final = usage[-1]
        spec = (final.get("metrics") or {}).get("speculative_decoding") if isinstance(final.get("metrics"), dict) \
            else None
        if spec is None:  # the earlier variant: on the terminal chunk's choice
            for c in reversed(chunks):
                for ch in c.get("choices") or []:
                    if isinstance(ch, dict) and ch.get("speculative_decoding_stats") is not None:
                        return ch["speculative_decoding_stats"], final["usage"], "choice.speculative_decoding_stats", w
            raise w.error(f"missing in the final usage chunk ({ENABLE})", "metrics.speculative_decoding")
        return spec, final["usage"], "metrics.speculative_decoding", w
    body = rec.body
    if "outputs" in body and isinstance(body["outputs"], list):  # an offline RequestOutput dump
        outs = body["outputs"]
        if len(outs) != 1:
            raise w.error(f"RequestOutput with {len(outs)} outputs (n > 1): vLLM reports per-request "
                          "spec-decode metrics for n == 1 only", "outputs")
        o = outs[0]
        if not isinstance(o, dict) or o.get("spec_decode_metrics") is None:
            raise w.error(f"missing ({ENABLE})", "outputs[0].spec_decode_metrics")
        usage = {"prompt_tokens": len(body["prompt_token_ids"]) if isinstance(body.get("prompt_token_ids"), list)
                 else None,
                 "completion_tokens": len(o["token_ids"]) if isinstance(o.get("token_ids"), list) else None}
        return o["spec_decode_metrics"], usage, "outputs[0].spec_decode_metrics", w
    if "spec_decode_metrics" in body and "choices" not in body:  # the bare dataclass
        return body["spec_decode_metrics"], body.get("usage"), "spec_decode_metrics", w
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        raise w.error("not a vLLM completion response (no choices, no outputs)", "choices")
    if len(choices) > 1:
        raise w.error(f"response with n = {len(choices)} choices: vLLM reports per-request spec-decode "
                      "metrics for n == 1 only (metrics.speculative_decoding is null for n > 1)", "choices")
    metrics = body.get("metrics")
    if isinstance(metrics, dict) and metrics.get("speculative_decoding") is not None:
        return metrics["speculative_decoding"], body.get("usage"), "metrics.speculative_decoding", w
    old = choices[0].get("speculative_decoding_stats") if isinstance(choices[0], dict) else None
    if old is not None:
        return old, body.get("usage"), "choices[0].speculative_decoding_stats", w
    raise w.error(f"missing or null ({ENABLE})", "metrics.speculative_decoding")


def _hist(spec: dict, name: str, w: Where, k: int | None) -> list[int]:
    h = spec.get(name)
    if isinstance(h, dict):  # the earlier variant: sparse, string keys, zero counts omitted
        try:
            items = {int(j): c for j, c in h.items()}
        except ValueError:
            raise w.error(f"non-integer key in {sorted(h)}", name) from None
        top = max(items, default=0) if k is None else k
        if any(j < 0 or j > top for j in items):
            raise w.error(f"key outside 0..{top}", name)
        return [w.count(items.get(j, 0), f"{name}[{j}]") for j in range(top + 1)]
    out = w.counts(h, name)
    if k is not None and len(out) != k + 1:
        raise w.error(f"has {len(out)} entries, num_spec_tokens {k} + 1 expected", name)
    return out


def unit_from(rec: Record) -> Unit:
    spec, usage, found, w = _locate(rec)
    if not isinstance(spec, dict):
        raise w.error(f"expected an object, got {type(spec).__name__}", found)
    offline = "histogram" in spec and "acceptance_histogram" not in spec
    known = OFFLINE if offline else SUMMARY | DETAILED
    unknown = sorted(set(spec) - known)
    if unknown:
        raise w.error(f"unknown field in {found} (known: {', '.join(sorted(known))})", unknown[0])
    need = ("num_spec_tokens", "histogram", "num_draft_tokens") if offline else tuple(sorted(SUMMARY))
    for f in need:
        if f not in spec:
            raise w.error(f"missing in {found}", f)
    k = w.count(spec["num_spec_tokens"], "num_spec_tokens")
    hname = "histogram" if offline else "acceptance_histogram"
    hist = _hist(spec, hname, w, k)
    n, acc = sum(hist), sum(j * c for j, c in enumerate(hist))
    u = Unit(where=w, unit=w.request or "0", doc_id=rec.doc_id, turn=rec.turn, n_steps=n,
             draft_tokens=w.count(spec["num_draft_tokens"], "num_draft_tokens"), accepted_tokens=acc,
             k_max=k, hist=hist, extra={"hist_field": hname})
    if not offline:
        u.n_steps = w.count(spec["num_spec_steps"], "num_spec_steps")
        u.accepted_tokens = w.count(spec["num_accepted_draft_tokens"], "num_accepted_draft_tokens")
        # the derived rates must be what the counts say (vLLM: 1.0 and 0.0 for zero steps)
        mal = 1 + u.accepted_tokens / u.n_steps if u.n_steps else 1.0
        dar = u.accepted_tokens / u.draft_tokens if u.draft_tokens else 0.0
        for f, want in (("mean_acceptance_length", mal), ("draft_acceptance_rate", dar)):
            got = spec[f]
            if not isinstance(got, (int, float)) or isinstance(got, bool) or not _close(float(got), want):
                raise w.error(f"{got!r} disagrees with the counts ({want:.6g})", f)
    if ("per_step_accepted" in spec) != ("per_step_drafted" in spec):
        missing = "per_step_drafted" if "per_step_accepted" in spec else "per_step_accepted"
        raise w.error("detailed metrics need both per-step arrays", missing)
    if "per_step_accepted" in spec:
        u.steps_a = w.counts(spec["per_step_accepted"], "per_step_accepted")
        u.steps_k = w.counts(spec["per_step_drafted"], "per_step_drafted")
    if usage is not None:
        if not isinstance(usage, dict):
            raise w.error("expected an object", "usage")
        u.prompt_tokens = w.count(usage.get("prompt_tokens"), "usage.prompt_tokens", allow_none=True)
        u.completion_tokens = w.count(usage.get("completion_tokens"), "usage.completion_tokens", allow_none=True)
    check_unit(u)
    u.k_fixed = fixed_k(u)
    return u


# ---- the server log line ------------------------------------------------------------------

LINE = re.compile(r"SpecDecoding metrics:\s*(.*)$")
_NUM = r"([-+]?(?:\d+(?:\.\d*)?|\.\d+|nan))"
FIELDS = {  # key as printed -> our name (vllm/v1/spec_decode/metrics.py, SpecDecodingLogging.log)
    "Accepted": "accepted", "Drafted": "drafted", "Mean acceptance length": "mal",
    "Per-position acceptance rate": "per_pos", "Avg Draft acceptance rate": "rate",
    "Draft acceptance rate": "rate", "Accepted throughput": None, "Drafted throughput": None,
}


def _fields(body: str) -> dict[str, str]:
    """'Key: value, Key: value, ...' -> {key: value}; a value may itself hold commas
    (the per-position list), so split only before a known key."""
    keys = sorted(FIELDS, key=len, reverse=True)
    pat = re.compile(r"(?:^|,\s*)(" + "|".join(re.escape(k) for k in keys) + r"):\s*")
    marks = list(pat.finditer(body))
    out = {}
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(body)
        out[m.group(1)] = body[m.end():end].strip().rstrip(",")
    return out


def log_units(path: Path) -> list[Unit]:
    """One global unit summing every 'SpecDecoding metrics' line of a vLLM server log."""
    text = read_text(path)
    acc = dr = lines = 0
    for n, line in enumerate(text.splitlines(), 1):
        m = LINE.search(line)
        if not m:
            continue
        w = Where(str(path), f"line {n}")
        f = _fields(m.group(1))
        for key in ("Accepted", "Drafted"):
            if key not in f:
                raise w.error("missing in the SpecDecoding metrics line", key)
        try:
            acc += int(re.match(r"(\d+)", f["Accepted"]).group(1))
            dr += int(re.match(r"(\d+)", f["Drafted"]).group(1))
        except (AttributeError, ValueError):
            raise w.error(f"unreadable counts {f['Accepted']!r} / {f['Drafted']!r}", "Accepted") from None
        lines += 1
    if not lines:
        raise AtlasError(f"{path}: no 'SpecDecoding metrics:' line")
    return [Unit(where=Where(str(path)), unit="global", draft_tokens=dr, accepted_tokens=acc,
                 extra={"log_lines": lines})]


def is_log(path: Path) -> bool:
    """A server log, not responses: text that is neither JSON nor a server-sent-event stream."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            head = f.read(1 << 12).lstrip()
    except OSError as e:
        raise AtlasError(f"{path}: unreadable ({e.strerror or e})") from None
    return bool(head) and not head.startswith(("{", "[", "data:"))


def units(paths) -> tuple[list[Unit], str, tuple[str, ...]]:
    paths = [Path(p) for p in paths]
    logs = [p for p in paths if is_log(p)]
    if logs:
        if len(logs) != len(paths):
            raise AtlasError(f"{logs[0]}: a vLLM server log given with response files; ingest them apart")
        total = Unit(where=Where(str(logs[0])), unit="global", draft_tokens=0, accepted_tokens=0)
        n_lines = 0
        for p in logs:
            u = log_units(p)[0]
            total.draft_tokens += u.draft_tokens
            total.accepted_tokens += u.accepted_tokens
            n_lines += u.extra["log_lines"]
        note = (f"{n_lines} 'SpecDecoding metrics' log line(s): their rates are rounded per interval and "
                "the number of drafts is not printed; scrape /metrics before and after for p_i")
        return [total], "vllm server log (SpecDecoding metrics lines)", (note,)
    us = [unit_from(r) for r in read_records(paths)]
    detailed = sum(u.has_steps for u in us)
    fmt = ("per-request detailed" if detailed == len(us) else
           "per-request summary" if detailed == 0 else "per-request, detailed and summary mixed")
    return us, f"vllm {fmt}", ()
