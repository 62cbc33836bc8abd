"""SGLang: the per-request `meta_info` spec fields -> units. There is no per-step record.

Filled in python/sglang/srt/managers/tokenizer_manager.py (the meta_info of a finished
request; newer trees move it to a `fill_spec_decoding_meta` helper), from the scheduler's
per-request counters (`Req.spec_verify_ct`, ... in python/sglang/srt/managers/schedule_batch.py).
Where it rides: the native /generate answer's `meta_info`, or `choices[0].meta_info` of
the OpenAI endpoints when the request sets `return_meta_info: true`.

  spec_verify_ct                      verify steps
  spec_num_correct_drafts             accepted drafts (aliases: spec_accepted_drafts;
                                      older: spec_accept_token_num)
  spec_num_proposed_drafts            drafted tokens (aliases: spec_proposed_drafts;
                                      older: spec_draft_token_num). SGLang derives it as
                                      spec_verify_ct x (speculative_num_draft_tokens - 1):
                                      k is fixed by its accounting, not measured per step.
  spec_correct_drafts_histogram       hist[j] = steps accepting j drafts (>= 0.5.12;
                                      alias spec_accept_histogram)
  spec_accept_rate, spec_accept_length  derived; spec_accept_length is completion_tokens /
                                      verify_ct and counts the prefill's token, so tokens/step
                                      is recomputed from the histogram (1 + accepted / steps).

With tree drafting (speculative_eagle_topk > 1) a step drafts speculative_num_draft_tokens - 1
tree nodes but accepts at most speculative_num_steps: pass --k num_steps so depth i means
the i-th token of the accepted path.
"""
from __future__ import annotations

import math

from atlas_ab.ingest.engine_units import UNKNOWN, Unit, check_unit, fixed_k
from atlas_ab.ingest.responses import Record, read_records

ACCEPTED = ("spec_num_correct_drafts", "spec_accepted_drafts", "spec_accept_token_num")
PROPOSED = ("spec_num_proposed_drafts", "spec_proposed_drafts", "spec_draft_token_num")
HISTOGRAM = ("spec_correct_drafts_histogram", "spec_accept_histogram")
DERIVED = ("spec_accept_rate", "spec_accept_length")
SPEC = {"spec_verify_ct", *ACCEPTED, *PROPOSED, *HISTOGRAM, *DERIVED}
#: written by current `_calculate_spec_decoding_metrics` (and in SGLang's own fixture,
#: test/srt/openai_server/basic/test_serving_completions.py `_spec_result`), not read: they
#: describe capped / block verification lengths, not the accepted drafts per verify step
IGNORED = {"spec_cap_length": "mean capped verify length (block/ragged verification), not an acceptance count",
           "spec_cap_lens_histogram": "histogram of capped verify lengths, not of accepted drafts",
           "spec_block_accept_length": "mean accepted length of block verification, derived"}


def _meta(rec: Record) -> dict:
    w = rec.where
    body = rec.body
    if rec.stream is not None:
        metas = [ch.get("meta_info") for c in rec.stream if isinstance(c, dict)
                 for ch in (c.get("choices") or []) if isinstance(ch, dict) and ch.get("meta_info")]
        metas += [c.get("meta_info") for c in rec.stream if isinstance(c, dict) and c.get("meta_info")]
        if not metas:
            raise w.error("streamed response without meta_info (SGLang attaches it to the finished request)",
                          "meta_info")
        return metas[-1]
    if "meta_info" in body:
        return body["meta_info"]
    choices = body.get("choices")
    if isinstance(choices, list):
        if len(choices) > 1:
            raise w.error(f"response with n = {len(choices)} choices: per-request spec fields describe one "
                          "sequence; send n = 1", "choices")
        if choices and isinstance(choices[0], dict) and "meta_info" in choices[0]:
            return choices[0]["meta_info"]
    raise w.error("missing (send return_meta_info: true to the OpenAI endpoints)", "meta_info")


def _one(meta: dict, names: tuple[str, ...], w) -> tuple[str | None, object]:
    """The value of the first name present; aliases that disagree are an error."""
    present = [(n, meta[n]) for n in names if n in meta]
    if not present:
        return None, None
    for n, v in present[1:]:
        if v != present[0][1]:
            raise w.error(f"alias disagrees with {present[0][0]} ({v!r} vs {present[0][1]!r})", n)
    return present[0]


def unit_from(rec: Record, k_override: int | None = None) -> Unit:
    w = rec.where
    meta = _meta(rec)
    if not isinstance(meta, dict):
        raise w.error(f"expected an object, got {type(meta).__name__}", "meta_info")
    spec = {k: v for k, v in meta.items() if k.startswith("spec_")}
    ignored = {f: IGNORED.get(f, UNKNOWN) for f in sorted(set(spec) - SPEC)}
    u = Unit(where=w, unit=w.request or str(meta.get("id", "0")), doc_id=rec.doc_id, turn=rec.turn,
             ignored=ignored)
    u.prompt_tokens = w.count(meta.get("prompt_tokens"), "meta_info.prompt_tokens", allow_none=True)
    u.completion_tokens = w.count(meta.get("completion_tokens"), "meta_info.completion_tokens", allow_none=True)
    hn, hv = _one(meta, HISTOGRAM, w)
    if "spec_verify_ct" not in meta:
        # SGLang omits the verify count when no step verified drafts (its fixture's "no_proposals"
        # case still carries the histograms): a histogram then says how many steps there were
        if hn is None or not hv or not any(w.counts(hv, hn)):
            u.n_steps = 0
            return u
        meta = {**meta, "spec_verify_ct": sum(w.counts(hv, hn))}
    u.n_steps = w.count(meta["spec_verify_ct"], "spec_verify_ct")
    an, av = _one(meta, ACCEPTED, w)
    pn, pv = _one(meta, PROPOSED, w)
    if an is None:
        raise w.error("missing", ACCEPTED[0])
    if pn is None:
        raise w.error("missing", PROPOSED[0])
    u.accepted_tokens, u.draft_tokens = w.count(av, an), w.count(pv, pn)
    if hn is not None and hv:
        u.hist = w.counts(hv, hn)
        u.extra["hist_field"] = hn
    if u.n_steps:
        k = u.draft_tokens / u.n_steps
        if k != int(k):
            raise w.error(f"{u.draft_tokens} drafts over {u.n_steps} verify steps is not a whole k per step "
                          "(SGLang derives it as steps x (speculative_num_draft_tokens - 1))", pn)
        u.k_max = k_override or int(k)
        u.k_fixed = u.k_max
        if k_override is not None:
            u.draft_tokens = u.n_steps * k_override  # depth count of the accepted path, by --k
        if meta.get("spec_accept_rate") is not None and u.draft_tokens and not math.isclose(
                float(meta["spec_accept_rate"]), av / pv, rel_tol=1e-6):
            raise w.error(f"{meta['spec_accept_rate']!r} disagrees with {an}/{pn}", "spec_accept_rate")
    check_unit(u)  # also: no histogram entry beyond k
    if u.hist is None:
        u.k_fixed = None  # without the histogram nothing per step is known; keep k as the configured max
    else:
        u.k_fixed = fixed_k(u) if k_override is None else k_override
    return u


OPTIONS = ("k",)


def units(paths, k: int | None = None) -> tuple[list[Unit], str, tuple[str, ...]]:
    us = [unit_from(r, k) for r in read_records(paths)]
    hist = sum(u.hist is not None for u in us if u.n_steps)
    fmt = "sglang meta_info" + (" with acceptance histograms" if hist else " (no histogram: older than 0.5.12)")
    notes = ("SGLang fixes k by its accounting (proposed = verify_ct x (num_draft_tokens - 1)); "
             "spec_accept_length counts the prefill token and is not used",)
    return us, fmt, notes
