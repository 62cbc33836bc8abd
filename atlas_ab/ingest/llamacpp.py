"""llama.cpp and ik_llama.cpp: the response's `timings` -> units.

llama.cpp's server (tools/server/server.cpp; the `timings` object of a finished task,
`result_timings::to_json`) adds `draft_n` and `draft_n_accepted` when the request drafted
(absent: nothing drafted). Token totals only: the draft length varies per step (the draft
stops below --draft-p-min), so neither the step count nor any p_i follows.

ik_llama.cpp (examples/server, the same `timings`) adds `draft_by_depth`: [{"depth",
"draft_n", "draft_n_accepted"}], one row per depth that drafted: draft_n = #(k >= depth),
draft_n_accepted = #(accept_len >= depth). Those are exact per-request, per-depth counts:
p_i and tokens/step are exact; p_i_cond needs the joint count and is exact only where
every step drafted the depth (then k was fixed and the steps are written out).
"""
from __future__ import annotations

from atlas_ab.ingest.engine_units import UNKNOWN, Unit, check_unit, fixed_k
from atlas_ab.ingest.responses import Record, read_records

DEPTH_ROW = {"depth", "draft_n", "draft_n_accepted"}


def _timings(rec: Record) -> tuple[dict, dict | None]:
    w = rec.where
    if rec.stream is not None:
        found = [c for c in rec.stream if isinstance(c, dict) and c.get("timings")]
        if not found:
            raise w.error("streamed response without timings (llama.cpp puts them on the last chunk)", "timings")
        last = found[-1]
        return last["timings"], last.get("usage")
    body = rec.body
    choices = body.get("choices")
    if isinstance(choices, list) and len(choices) > 1:
        raise w.error(f"response with n = {len(choices)} choices: timings describe one sequence", "choices")
    if "timings" not in body:
        raise w.error("missing (llama.cpp's server returns it with every completion)", "timings")
    return body["timings"], body.get("usage")


def unit_from(rec: Record) -> Unit:
    w = rec.where
    t, usage = _timings(rec)
    if not isinstance(t, dict):
        raise w.error(f"expected an object, got {type(t).__name__}", "timings")
    u = Unit(where=w, unit=w.request or "0", doc_id=rec.doc_id, turn=rec.turn)
    u.draft_tokens = w.count(t.get("draft_n", 0), "timings.draft_n")
    u.accepted_tokens = w.count(t.get("draft_n_accepted", 0), "timings.draft_n_accepted")
    if isinstance(usage, dict):
        u.prompt_tokens = w.count(usage.get("prompt_tokens"), "usage.prompt_tokens", allow_none=True)
        u.completion_tokens = w.count(usage.get("completion_tokens"), "usage.completion_tokens", allow_none=True)
    rows = t.get("draft_by_depth")
    if rows is not None:
        if not isinstance(rows, list):
            raise w.error(f"expected a list, got {type(rows).__name__}", "timings.draft_by_depth")
        by = {}
        for i, r in enumerate(rows):
            f = f"timings.draft_by_depth[{i}]"
            if not isinstance(r, dict):
                raise w.error("expected an object", f)
            u.ignored.update({f"{f}.{x}": UNKNOWN for x in sorted(set(r) - DEPTH_ROW)})
            for k in sorted(DEPTH_ROW):
                if k not in r:
                    raise w.error(f"missing in {f}", k)
            d = w.count(r["depth"], f + ".depth")
            if d < 1 or d in by:
                raise w.error(f"depth {d} repeated or below 1", f + ".depth")
            by[d] = (w.count(r["draft_n"], f + ".draft_n"), w.count(r["draft_n_accepted"], f + ".draft_n_accepted"))
        if by:
            top = max(by)
            # depths that drafted nothing are omitted by the server: 0 there
            u.drafted = [by.get(i, (0, 0))[0] for i in range(1, top + 1)]
            u.accepted = [by.get(i, (0, 0))[1] for i in range(1, top + 1)]
            u.n_steps = u.drafted[0]
            u.extra["depth_field"] = "timings.draft_by_depth"
            if sum(u.drafted) != u.draft_tokens:
                raise w.error(f"draft_n by depth sums to {sum(u.drafted)}, timings.draft_n is {u.draft_tokens}",
                              "timings.draft_by_depth")
            if sum(u.accepted) != u.accepted_tokens:
                raise w.error(f"draft_n_accepted by depth sums to {sum(u.accepted)}, timings.draft_n_accepted "
                              f"is {u.accepted_tokens}", "timings.draft_by_depth")
    check_unit(u)
    u.k_fixed = fixed_k(u)
    return u


def units(paths) -> tuple[list[Unit], str, tuple[str, ...]]:
    us = [unit_from(r) for r in read_records(paths)]
    depth = sum(u.drafted is not None for u in us)
    fmt = ("ik_llama.cpp timings with draft_by_depth" if depth == len(us) else
           "llama.cpp timings (draft_n, draft_n_accepted)" if depth == 0 else
           "llama.cpp timings, draft_by_depth in some responses only")
    return us, fmt, ()


def server_counts(rows, gen_tokens: int) -> tuple[int, int, int]:
    """One turn of our steps counted as llama.cpp's server counts its own: (steps that drafted,
    drafted, accepted). rows: (k, accept_len, committed tokens) per step, in step order. With g
    tokens of the turn before a step (its prefill's one first), the server drafts at most
    G - g - 1 (`get_n_draft_max`, tools/server/server-context.cpp) and none with one left, and
    accepts only what it drafted; our loop drafts k at every step and counts every accepted draft."""
    steps = drafted = accepted = 0
    g = 1
    for k, a, c in rows:
        kb = max(0, min(int(k), gen_tokens - g - 1))
        steps += kb >= 1
        drafted += kb
        accepted += min(int(a), kb)
        g += int(c)
    return steps, drafted, accepted
