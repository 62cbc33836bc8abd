"""Units -> the contract's tables, at the finest grain they support, and the Telemetry saying so.

  steps/   written when every unit's (k, accept_len) per step is known: per-step sources
           in step order (with `position` when it can be reconstructed), fixed-k
           per-request histograms expanded (step order arbitrary, no position).
  counts/  always: one row per unit, what the source reported and the per-depth counts that
           follow from it, derived here once (telemetry/schema.py COUNT_COLUMNS). The analysis
           reads it as the per-unit table of every run (analysis/metrics/units.py `Units`).

Requests with no verify step are missing, not rate 0 (vLLM reports 1.0 / 0.0 for them):
they are dropped from both tables and counted in the notes.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from atlas_ab import AtlasError
from atlas_ab.ingest.engine_units import Unit
from atlas_ab.telemetry.grain import Telemetry
from atlas_ab.telemetry.schema import COUNT_NAMES, COUNT_SCHEMA, step_type

SERIAL_WHY = {
    "vllm": "vLLM records only steps scheduled with drafts (vllm/v1/core/sched/scheduler.py: "
            "`if request.spec_decode_metrics is not None and num_draft_tokens`); its k = 0 rows are such "
            "steps whose drafts grammar invalidated, plain decode steps are not recorded",
    "sglang": "SGLang counts verify steps only (spec_verify_ct)",
}


@dataclass(frozen=True)
class Tables:
    steps: pd.DataFrame | None
    counts: pd.DataFrame
    telemetry: Telemetry
    dropped: tuple[str, ...]    # units with no verify step (missing, not rate 0)


def _depths(units: list[Unit]) -> int:
    return max((u.K or 0) for u in units) if units else 0


def _all(units, pred) -> bool:
    return all(pred(u) for u in units)


def _positions(units: list[Unit]) -> tuple[dict[int, list[int]] | None, str | None, int]:
    """Each per-step unit's propose positions: prompt_tokens + the tokens committed by the
    earlier recorded steps (1 + accept_len each), exact when no undrafted decode step went
    unrecorded. completion_tokens = 1 (the prefill's token) + the steps' commits, the last
    one possibly cut by max_tokens/stop: a count above that range proves an unrecorded step."""
    out, cut = {}, 0
    for idx, u in enumerate(units):
        if u.prompt_tokens is None or u.completion_tokens is None:
            missing = "prompt_tokens" if u.prompt_tokens is None else "completion_tokens"
            return None, f"{u.where.file}: request {u.unit} has no usage.{missing}", 0
        commits = [1 + a for a in u.steps_a]
        hi = 1 + sum(commits)
        lo = hi - commits[-1] + 1
        c = u.completion_tokens
        if c > hi:
            return None, (f"{u.where.file}: request {u.unit}: {c} completion tokens but the recorded steps "
                          f"commit at most {hi}: {c - hi} decode step(s) without drafts were not recorded, "
                          f"so later positions are unknown"), 0
        if c < lo:
            return None, (f"{u.where.file}: request {u.unit}: {c} completion tokens, fewer than the "
                          f"{lo} the recorded steps commit"), 0
        cut += c < hi
        pos = u.prompt_tokens + np.concatenate([[0], np.cumsum(commits[:-1])])
        out[idx] = pos.astype(np.int64).tolist()
    return out, None, cut


def build(units: list[Unit], source: str, fmt: str, notes: tuple[str, ...] = ()) -> Tables:
    """The tables and the telemetry of a list of units from one source."""
    if not units:
        raise AtlasError(f"{source}: no request carried speculative-decoding telemetry")
    glob = [u for u in units if u.unit == "global"]
    if glob and len(units) > 1:
        raise AtlasError(f"{units[0].where.file}: global counters and per-request records mixed")

    def zero(u: Unit) -> bool:
        return u.n_steps == 0 or (u.has_steps and not u.steps_k) or (u.n_steps is None and u.draft_tokens == 0)

    dropped = tuple(f"{u.where.file}: request {u.unit}" for u in units if zero(u))
    live = [u for u in units if not zero(u)]
    if not live:
        raise AtlasError(f"{units[0].where.file}: every request had zero speculative steps "
                         f"({len(units)} requests): nothing to measure")
    notes = list(notes)
    if dropped:
        notes.append(f"{len(dropped)} request(s) had no verify step: missing, not rate 0")

    # documents and turns: carried by the client, or one cluster per request
    carried = [u.doc_id is not None for u in live]
    if glob:
        clusters = None
    elif all(carried):
        clusters = "doc_id"
    elif not any(carried):
        clusters = "request"
        for i, u in enumerate(live):
            u.doc_id, u.turn = i, 0
    else:
        bad = live[carried.index(False)]
        raise bad.where.error("carries no doc_id while other records do")
    if clusters:
        seen = {}
        for u in live:
            key = (u.doc_id, u.turn or 0)
            if key in seen:
                raise u.where.error(f"(doc_id, turn) = {key} already used by request {seen[key]}")
            seen[key] = u.unit
            u.turn = u.turn or 0

    K = _depths(live)
    per_step = _all(live, lambda u: u.has_steps)
    joint = not glob and _all(live, lambda u: u.joint_known)
    exact, na = [], {}
    zero_open = [u for u in live if u.zero_steps is None]
    zero_why = (f"{zero_open[0].where.file}: the source counts verify steps whose drafts grammar invalidated "
                "(k = 0) together with the others and does not say how many there were (drafted tokens < "
                "steps x k)") if zero_open else None
    positions, pos_why, cut = (None, None, 0)
    if per_step and clusters == "doc_id":
        positions, pos_why, cut = _positions(live)
    elif per_step:  # a request's index is no identity: two runs' requests cannot be matched
        pos_why = "records carry no doc_id/turn, so the requests of two runs cannot be matched"

    # what each figure needs, checked over every unit
    has_a = K >= 1 and _all(live, lambda u: all(u.a_ge(i) is not None for i in range(1, K + 1)))
    has_k = K >= 1 and _all(live, lambda u: all(u.k_ge(i) is not None for i in range(1, K + 1)))
    if has_a and has_k:
        exact.append("p_i")
    elif has_a and zero_open:
        na["p_i"] = "bounds only, p1 included: " + zero_why
    elif has_a:
        na["p_i"] = ("bounds only: the source gives #(accept_len >= i) but not how many steps drafted "
                     "depth i, and k varied (drafted tokens < steps x k in some request)")
    else:
        na["p_i"] = "the source gives token totals only (no histogram, no per-depth counts)"
    if joint or (has_a and has_k and _all(live, lambda u: u.k_ge(K) == u.n_steps)):
        exact.append("p_i_cond")
    else:
        na["p_i_cond"] = ("needs the joint count #(accept_len >= i-1 and k >= i) per step; "
                          + ("the source gives the marginals of k and accept_len only, and k varied"
                             if has_a else "the source gives no per-depth counts"))
    if _all(live, lambda u: u.n_steps is not None and u.accepted_tokens is not None) or per_step:
        exact.append("tokens_per_step")
    else:
        na["tokens_per_step"] = zero_why or "the source does not report the number of verify steps"
    if _all(live, lambda u: u.draft_tokens is not None and u.accepted_tokens is not None) or per_step:
        exact.append("draft_acceptance_rate")
    else:
        na["draft_acceptance_rate"] = "the source does not report drafted and accepted token totals"
    if _all(live, lambda u: u.histogram() is not None):
        exact.append("histogram")
    else:
        na["histogram"] = zero_why or "no acceptance-length histogram in the source"
    if clusters:
        exact.append("cluster_sd")
        if clusters == "request":
            notes.append("records carry no doc_id: each request is its own cluster (doc_id = its index)")
    else:
        na["cluster_sd"] = "global counters have no requests or documents: binomial sd only"
    if clusters == "doc_id":
        exact += ["by_turn", "request_pairing"]
    elif clusters == "request":
        na["by_turn"] = "records carry no turn (give doc_id and turn per record, as `atlas_ab.collect` does)"
        na["request_pairing"] = "records carry no (doc_id, turn) to pair two runs on"
    else:
        na["by_turn"] = na["request_pairing"] = "global counters"
    if positions is not None:
        exact.append("position_pairing")
        if cut:
            notes.append(f"{cut} request(s) ended inside their last step; their positions assume every "
                         f"decode step drafted (a step without drafts is not recorded)")
    else:
        na["position_pairing"] = (pos_why if per_step else
                                  "per-request totals carry no step positions; pair requests instead "
                                  "(`pairs RUN_A RUN_B`)")
    if per_step:
        exact.append("step_order")
    else:
        na["step_order"] = "per-request totals: the order of steps within a request is unknown"
    na["n_serial"] = SERIAL_WHY.get(source, "engines report verify steps only")

    steps = _steps(live, positions) if joint else None
    grain = "counters" if glob else ("steps" if per_step else "requests")
    tables = ("steps", "counts") if steps is not None else ("counts",)
    tel = Telemetry(source=source, format=fmt, grain=grain, tables=tables, clusters=clusters,
                    exact=tuple(exact), not_available=na, notes=tuple(notes))
    return Tables(steps=steps, counts=_counts(live, max(K, max((u.k_fixed or 0) for u in live))), telemetry=tel,
                  dropped=dropped)


def _steps(units: list[Unit], positions: dict | None) -> pd.DataFrame:
    parts = []
    for idx, u in enumerate(units):
        k, a = u.joint_steps()
        d = {"doc_id": np.full(len(k), u.doc_id, np.int64), "turn": np.full(len(k), u.turn, np.int32),
             "step": np.arange(len(k), dtype=np.int64), "k": np.asarray(k, np.int32),
             "accept_len": np.asarray(a, np.int32)}
        if positions is not None:
            d["position"] = np.asarray(positions[idx], np.int64)
        parts.append(pd.DataFrame(d))
    df = pd.concat(parts, ignore_index=True).sort_values(["doc_id", "turn", "step"], kind="stable")
    return df.reset_index(drop=True)


def steps_table(df: pd.DataFrame) -> pa.Table:
    """The contract's Arrow types for the columns present (telemetry/schema.py)."""
    return pa.Table.from_pandas(df, schema=pa.schema([(c, step_type(c)) for c in df.columns]),
                                preserve_index=False)


def _per_depth(u: Unit, K: int) -> tuple[list | None, list | None, list | None]:
    """(#(k >= i), #(accept_len >= i), #(accept_len >= i-1 and k >= i)) for i = 1..K, None items
    where the unit's numbers do not determine them; depths beyond the unit's own K drafted nothing."""
    top = u.K or 0
    k_ge = [u.k_ge(i) if i <= top else 0 for i in range(1, K + 1)]
    a_ge = [u.a_ge(i) if i <= top else 0 for i in range(1, K + 1)]
    a_ge = a_ge if all(a is not None for a in a_ge) and K else None
    if u.joint_known:  # the joint per step: the denominator counted
        ks, acc = u.joint_steps()
        cond = [sum(a >= i - 1 and k >= i for k, a in zip(ks, acc)) for i in range(1, K + 1)]
    elif a_ge is not None and u.n_steps is not None:
        # known where every step drafted depth i (then #(a >= i-1)), or none did (0)
        ge = [u.n_steps] + a_ge
        cond = [ge[i - 1] if k_ge[i - 1] == u.n_steps else 0 if k_ge[i - 1] == 0 else None for i in range(1, K + 1)]
    else:
        cond = None
    return (k_ge if any(k is not None for k in k_ge) else None), a_ge, cond


def _counts(units: list[Unit], K: int) -> pd.DataFrame:
    rows = []
    for u in units:
        hist = u.histogram()
        k_ge, a_ge, cond = _per_depth(u, K)
        rows.append({"unit": u.unit, "file": u.where.file, "doc_id": u.doc_id, "turn": u.turn,
                     "n_steps": u.n_steps if u.n_steps is not None else (len(u.steps_k) if u.has_steps else None),
                     "draft_tokens": u.draft_tokens if u.draft_tokens is not None else
                     (sum(u.steps_k) if u.has_steps else None),
                     "accepted_tokens": u.accepted_tokens if u.accepted_tokens is not None else
                     (sum(u.steps_a) if u.has_steps else None),
                     "k_max": u.k_max, "k_fixed": u.k_fixed, "hist": hist,
                     "drafted": k_ge, "accepted": a_ge, "cond_den": cond,
                     "y2_tok": None if hist is None else float(sum(c * (1 + j) ** 2 for j, c in enumerate(hist))),
                     "prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
                     "n_recorded": u.n_recorded, "zero_max": u.zero_max if u.n_recorded is not None else None,
                     "completion_sha256": None})     # filled from the records' texts (ingest/completion_hash.py)
    return pd.DataFrame(rows, columns=list(COUNT_NAMES))


def counts_table(df: pd.DataFrame) -> pa.Table:
    return pa.Table.from_pandas(df, schema=COUNT_SCHEMA, preserve_index=False)
