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
from atlas_ab.ingest.engine_units import UNKNOWN, Unit, Where, check_unit, fixed_k
from atlas_ab.ingest.jsonio import read_text
from atlas_ab.ingest.responses import Record, read_records

# the spec-decode object's fields (vllm/v1/metrics/stats.py RequestSpecDecodeMetrics.to_dict)
SUMMARY = {"mean_acceptance_length", "draft_acceptance_rate", "acceptance_histogram", "num_spec_steps",
           "num_accepted_draft_tokens", "num_draft_tokens", "num_spec_tokens"}
DETAILED = {"per_step_accepted", "per_step_drafted"}
# the offline dataclass RequestSpecDecodeMetrics itself (RequestOutput.outputs[0].spec_decode_metrics)
OFFLINE = {"num_spec_tokens", "histogram", "num_draft_tokens", "per_step_accepted", "per_step_drafted"}
#: fields of the spec-decode object that are known and not read, with why
IGNORED = {
    "acceptance_histogram_by_draft_length": "the histogram split by draft length (current main); its layout is "
                                            "not in the sources read, so the joint is taken from the other fields",
    "histogram_by_draft_length": "the offline dataclass's histogram split by draft length (current main); not read",
}
ENABLE = "start vLLM with --per-request-spec-decode-metrics summary|detailed"


def _close(x: float, y: float) -> bool:
    return math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-9)


def _stream_choices(rec: Record) -> list[tuple[int, dict]]:
    """(choice index, speculative_decoding_stats) of a stream's terminal choices (the earlier
    per-choice variant puts the stats on the chunk that finishes each choice)."""
    found: dict[int, dict] = {}
    for c in rec.stream:
        for ch in (c.get("choices") or []) if isinstance(c, dict) else []:
            if isinstance(ch, dict) and ch.get("speculative_decoding_stats") is not None:
                found[int(ch.get("index", 0))] = ch["speculative_decoding_stats"]
    return sorted(found.items())


def _locate(rec: Record) -> list[tuple[dict, dict | None, str, Where]]:
    """[(spec-decode object, usage, where it was found, where)] of one record: one entry, or one
    per choice for the earlier per-choice variant (which allows n > 1). Refuses n > 1 where vLLM
    reports nothing per choice, and streams without the chunk that carries the metrics."""
    w = rec.where
    if rec.stream is not None:
        chunks = [c for c in rec.stream if isinstance(c, dict)]
        usage = [c for c in chunks if c.get("usage")]
        final = usage[-1] if usage else {}
        spec = final.get("metrics", {}).get("speculative_decoding") if isinstance(final.get("metrics"), dict) \
            else None
        per_choice = _stream_choices(rec)
        if spec is None and per_choice:  # the earlier variant: on each choice's terminal chunk
            return [(st, final.get("usage") if len(per_choice) == 1 else None,
                     f"choices[{i}].speculative_decoding_stats", w if len(per_choice) == 1 else w.at(
                         f"{w.request} choice {i}")) for i, st in per_choice]
        idx = {ch.get("index", 0) for c in chunks for ch in (c.get("choices") or []) if isinstance(ch, dict)}
        if any(i != 0 for i in idx):
            raise w.error(f"streamed response with n > 1 (choice indexes {sorted(idx)}) and no per-choice "
                          "speculative_decoding_stats: vLLM's metrics.speculative_decoding covers n == 1 only")
        if not usage:
            raise w.error("streamed response without the final usage chunk: vLLM attaches "
                          "metrics.speculative_decoding to it (set stream_options.include_usage: true "
                          "or start vLLM with --enable-force-include-usage)")
        if spec is None:
            raise w.error(f"missing in the final usage chunk ({ENABLE})", "metrics.speculative_decoding")
        return [(spec, final["usage"], "metrics.speculative_decoding", w)]
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
        return [(o["spec_decode_metrics"], usage, "outputs[0].spec_decode_metrics", w)]
    if "spec_decode_metrics" in body and "choices" not in body:  # the bare dataclass
        return [(body["spec_decode_metrics"], body.get("usage"), "spec_decode_metrics", w)]
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        raise w.error("not a vLLM completion response (no choices, no outputs)", "choices")
    metrics = body.get("metrics")
    per_choice = [(i, ch["speculative_decoding_stats"]) for i, ch in enumerate(choices)
                  if isinstance(ch, dict) and ch.get("speculative_decoding_stats") is not None]
    if not (isinstance(metrics, dict) and metrics.get("speculative_decoding") is not None) and per_choice:
        if len(per_choice) != len(choices):
            raise w.error(f"{len(per_choice)} of {len(choices)} choices carry speculative_decoding_stats",
                          "choices")
        if len(choices) == 1:
            return [(per_choice[0][1], body.get("usage"), "choices[0].speculative_decoding_stats", w)]
        if rec.doc_id is not None:
            raise w.error(f"{len(choices)} choices under one (doc_id, turn): the contract keys a request by "
                          "(doc_id, turn), so the choices cannot be told apart; send n = 1", "choices")
        # usage covers every choice together: per-choice token counts are not known
        return [(st, None, f"choices[{i}].speculative_decoding_stats", w.at(f"{w.request} choice {i}"))
                for i, st in per_choice]
    if len(choices) > 1:
        raise w.error(f"response with n = {len(choices)} choices: vLLM reports per-request spec-decode "
                      "metrics for n == 1 only (metrics.speculative_decoding is null for n > 1)", "choices")
    if isinstance(metrics, dict) and metrics.get("speculative_decoding") is not None:
        return [(metrics["speculative_decoding"], body.get("usage"), "metrics.speculative_decoding", w)]
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


#: request fields that turn on structured output, the only source of a step whose drafts were all
#: invalidated (docs of `--per-request-spec-decode-stats`: num_draft_tokens is "after subtracting
#: drafts invalidated by structured-output constraints")
STRUCTURED = ("guided_json", "guided_regex", "guided_choice", "guided_grammar", "structured_outputs",
              "structural_tag")


def structured(request: dict | None) -> bool | None:
    """Whether the request asked for structured output (None: the client did not keep the request)."""
    if request is None:
        return None
    fmt = request.get("response_format")
    return any(request.get(k) is not None for k in STRUCTURED) or (
        isinstance(fmt, dict) and fmt.get("type") not in (None, "text"))


def _zero_steps(u: Unit, request: dict | None = None) -> None:
    """Separate verify steps without a draft (k = 0) from the others; see engine_units.py. Without
    structured output no step can lose all its drafts."""
    if u.steps_k is not None:
        zero = sum(k == 0 for k in u.steps_k)
        u.zero_steps, u.n_steps = zero, len(u.steps_k) - zero
        if zero:
            u.hist = u.histogram()
        return
    n, D, K = u.n_steps, u.draft_tokens, u.k_max
    if not n or D is None or not K or D == n * K or structured(request) is False:
        return
    most = n - -(-D // K)  # steps that can have carried no draft: the rest hold D drafts, at most K each
    if most > 0:
        u.n_recorded, u.n_steps, u.zero_steps, u.zero_max = n, None, None, most


def unit_from(rec: Record) -> list[Unit]:
    return [_unit(rec, *found) for found in _locate(rec)]


def _unit(rec: Record, spec, usage, found: str, w: Where) -> Unit:
    if not isinstance(spec, dict):
        raise w.error(f"expected an object, got {type(spec).__name__}", found)
    offline = "histogram" in spec and "acceptance_histogram" not in spec
    known = OFFLINE if offline else SUMMARY | DETAILED
    ignored = {f: IGNORED.get(f, UNKNOWN) for f in sorted(set(spec) - known)}
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
             k_max=k, hist=hist, extra={"hist_field": hname}, ignored=ignored)
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
    arrays = [f for f in sorted(DETAILED) if spec.get(f) is not None]
    if len(arrays) == 1:
        raise w.error("detailed metrics need both per-step arrays", (DETAILED - set(arrays)).pop())
    # summary mode: a 0.32 server answers both null; the offline dataclass defaults both to [] and []
    summary_mode = not arrays or (spec.get("per_step_accepted") == [] and spec.get("per_step_drafted") == []
                                  and n > 0)
    if "per_step_accepted" in spec and not summary_mode:
        u.steps_a = w.counts(spec["per_step_accepted"], "per_step_accepted")
        u.steps_k = w.counts(spec["per_step_drafted"], "per_step_drafted")
    if usage is not None:
        if not isinstance(usage, dict):
            raise w.error("expected an object", "usage")
        u.prompt_tokens = w.count(usage.get("prompt_tokens"), "usage.prompt_tokens", allow_none=True)
        u.completion_tokens = w.count(usage.get("completion_tokens"), "usage.completion_tokens", allow_none=True)
    check_unit(u)
    _zero_steps(u, rec.request)
    u.k_fixed = fixed_k(u)
    return u


# ---- the server log line ------------------------------------------------------------------

LINE = re.compile(r"SpecDecoding metrics:\s*(.*)$")
#: the earlier line, of v0 (vllm/engine/metrics.py `_format_spec_decode_metrics_str`) and of v1
#: before "SpecDecoding metrics:" (the first vllm/v1/spec_decode/metrics.py, SpecDecodingMetrics.log)
OLD_LINE = re.compile(r"Speculative metrics:\s*(.*)$")
_NUM = r"([-+]?(?:\d+(?:\.\d*)?|\.\d+|nan))"
FIELDS = {  # key as printed -> our name (vllm/v1/spec_decode/metrics.py, SpecDecodingLogging.log)
    "Accepted": "accepted", "Drafted": "drafted", "Mean acceptance length": "mal",
    "Per-position acceptance rate": "per_pos", "Avg Draft acceptance rate": "rate",
    "Draft acceptance rate": "rate", "Accepted throughput": None, "Drafted throughput": None,
}
OLD_FIELDS = {"Draft acceptance rate": "rate", "System efficiency": "efficiency",
              "Number of speculative tokens": "k", "Number of accepted tokens": "Accepted",
              "Number of draft tokens": "Drafted", "Number of emitted tokens": "emitted"}


def _fields(body: str, known=FIELDS) -> dict[str, str]:
    """'Key: value, Key: value, ...' -> {key: value}; a value may itself hold commas
    (the per-position list), so split only before a known key."""
    keys = sorted(known, key=len, reverse=True)
    pat = re.compile(r"(?:^|,\s*)(" + "|".join(re.escape(k) for k in keys) + r"):\s*")
    marks = list(pat.finditer(body))
    out = {}
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(body)
        out[m.group(1)] = body[m.end():end].strip().rstrip(",.")
    return out


def _counts(f: dict, keys: tuple[str, str], w: Where) -> tuple[int, int]:
    for key in keys:
        if key not in f:
            raise w.error("missing in the speculative metrics line", key)
    try:
        return tuple(int(re.match(r"(\d+)", f[k]).group(1)) for k in keys)
    except (AttributeError, ValueError):
        raise w.error(f"unreadable counts {f[keys[0]]!r} / {f[keys[1]]!r}", keys[0]) from None


def log_units(path: Path) -> list[Unit]:
    """One global unit of a vLLM server log. 'SpecDecoding metrics' lines count one logging
    interval each and are summed. 'Speculative metrics' lines of v0 print the rejection
    sampler's totals since the server started (its counters are never reset), so the last line
    is the total; those of the first v1 print one interval each (system efficiency always nan)."""
    text = read_text(path)
    acc = dr = lines = 0
    old = []
    for n, line in enumerate(text.splitlines(), 1):
        w = Where(str(path), f"line {n}")
        m = LINE.search(line)
        if m:
            a, d = _counts(_fields(m.group(1)), ("Accepted", "Drafted"), w)
            acc, dr, lines = acc + a, dr + d, lines + 1
            continue
        m = OLD_LINE.search(line)
        if m:
            f = _fields(m.group(1), OLD_FIELDS)
            a, d = _counts(f, ("Number of accepted tokens", "Number of draft tokens"), w)
            old.append((w, a, d, f.get("System efficiency", "nan").strip().lower() != "nan"))
    if old and lines:
        raise AtlasError(f"{path}: both 'SpecDecoding metrics' and 'Speculative metrics' lines: two vLLM "
                         "versions in one log")
    note = None
    if old and any(v0 for *_, v0 in old):  # v0: running totals since start
        for (_, a0, d0, _), (w1, a1, d1, _) in zip(old, old[1:]):
            if a1 < a0 or d1 < d0:
                raise w1.error(f"the totals went down ({a0}/{d0} -> {a1}/{d1}): the server restarted; "
                               "give the log from the restart on", "Number of accepted tokens")
        _, acc, dr, _ = old[-1]
        lines = len(old)
        note = "v0 'Speculative metrics' lines print totals since the server started: the last one is used"
    elif old:  # the first v1: one interval per line
        acc, dr, lines = sum(a for _, a, _, _ in old), sum(d for _, _, d, _ in old), len(old)
    if not lines:
        raise AtlasError(f"{path}: no 'SpecDecoding metrics:' or 'Speculative metrics:' line")
    return [Unit(where=Where(str(path)), unit="global", draft_tokens=dr, accepted_tokens=acc,
                 extra={"log_lines": lines, "log_note": note})]


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
        n_lines, notes = 0, []
        for p in logs:
            u = log_units(p)[0]
            total.draft_tokens += u.draft_tokens
            total.accepted_tokens += u.accepted_tokens
            n_lines += u.extra["log_lines"]
            if u.extra["log_note"]:
                notes.append(f"{p}: {u.extra['log_note']}")
        notes.insert(0, f"{n_lines} speculative metrics log line(s): their rates are rounded per interval and "
                        "the number of drafts is not printed; scrape /metrics before and after for p_i")
        return [total], "vllm server log (speculative metrics lines)", tuple(notes)
    us = [u for r in read_records(paths) for u in unit_from(r)]
    # a request with no verify step tells neither mode: 0.32's to_dict adds the per-step arrays only when
    # non-empty (vllm/v1/metrics/stats.py RequestSpecDecodeMetrics.to_dict), so detailed answers it null too
    told = [u for u in us if u.has_steps or u.n_steps != 0]
    detailed = sum(u.has_steps for u in told)
    fmt = ("per-request detailed" if detailed == len(told) and told else
           "per-request summary" if detailed == 0 else "per-request, detailed and summary mixed")
    return us, f"vllm {fmt}", ()
