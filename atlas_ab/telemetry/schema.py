"""The telemetry contract in one place: the steps and events columns, their types, and the names
both sides of the contract share (row spaces, turn classes, event kinds).

Torch-free (pyarrow only): the runner's writer, the analysis' reader and validator, the
synthetic-run writer, the engine-telemetry ingest and the tests all import it, and
`docs/telemetry.md`'s column tables are generated from it (`markdown_table`, checked by a test).
"""
from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

#: Version of the run-directory layout written into every manifest.
MANIFEST_SCHEMA = 1

#: A manifest shard entry: the key of each table's row count (its file is under the table's name,
#: its sha256 under "sha256"); the analysis checks both at load.
SHARD_ROWS = {"steps": "rows", "events": "event_rows", "counts": "count_rows"}

#: Drafter row spaces (proposers/rowspace.py has their rules).
ROW_SPACES = ("compact", "dense")
#: Turn classes every figure is reported by: turn 0 is cold, turns >= 1 are warm.
TURN_CLASSES = ("all", "cold", "warm")
#: Fingerprint event kinds (FINGERPRINTS).
EVENT_KINDS = ("ring_write", "feed", "context", "propose")


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    required: bool
    doc: str
    nullable: bool = False


_I32, _I64, _F32 = pa.int32(), pa.int64(), pa.float32()

STEP_COLUMNS: tuple[Column, ...] = (
    Column("doc_id", _I64, True, "document index within the workload"),
    Column("turn", _I32, True, "turn index; 0 is the cold turn, >= 1 warm turns"),
    Column("step", _I64, True, "verify-step index within (doc_id, turn), from 0"),
    Column("k", _I32, True, "drafts submitted to verification at this step; 0 = serial decode step (a family "
           "whose K varies per step, n-gram and suffix decoding: the row's own count, 0..K, 0 where it found no "
           "match)"),
    Column("accept_len", _I32, True, "drafts accepted, 0..k"),
    Column("arm", pa.string(), False, "arm name (else the manifest's, else the directory name)"),
    Column("seq", _I32, False, "batch slot that ran the sequence"),
    Column("position", _I64, False, "sequence position of the last committed token when the step began "
                                    "(the propose position); pairs steps of two arms"),
    Column("drafts", pa.list_(_I32), False, "the drafted token ids (the K proposed ones when gated: see `gated`; "
           "-1 past `k` where the family's K varies per step)"),
    Column("target", pa.list_(_I32), False, "target argmax per depth: `target[i]` is the target's token at "
                                            "depth i+1, length k+1 (the last is the bonus). Replay runs write -1 "
                                            "past `target[accept_len]`: there the live verify's argmax follows a "
                                            "rejected draft, which no stored trajectory holds"),
    Column("conf", pa.list_(_F32), False, "drafter top-1 softmax prob per depth (n-gram and suffix decoding have "
           "none: 1 on a real draft, 0 past `k`)"),
    Column("gated", pa.bool_(), False, "DRAFT_CONF dropped this step's drafts (then `k` = 0)"),
    Column("oracle_hit2", pa.bool_(), False, "ORACLE_P2: draft 2 recomputed from the target's true hidden would "
                                             "equal `target[1]`; null when draft 1 was not accepted or the probe "
                                             "is off", nullable=True),
    Column("topk_ids", pa.list_(pa.list_(_I32)), False, "SHADOW_TOPK: per depth, the drafter's top-k ids"),
    Column("topk_probs", pa.list_(pa.list_(_F32)), False, "SHADOW_TOPK: per depth, their softmax probs"),
    Column("committed", pa.list_(_I32), False, "tokens this step committed (accepted drafts + bonus, cut at "
                                               "the turn's end)"),
    Column("step_ms", _F32, False, "wall time of the batched step this row belongs to (live mode only; "
                                   "null in replay runs, which carry no engine timing, and on warm-up steps: "
                                   "`warmup_ms`). Under run-ahead (the manifest's `loop: run_ahead`) a chunk's "
                                   "steps each carry the chunk's mean: its wall time over its steps", nullable=True),
    Column("warmup_ms", _F32, False, "wall time of a warm-up step: the wave's first step of its kind (verify, "
                                     "serial decode) or one that first ran a static step (a CUDA-graph capture); its "
                                     "`step_ms` is then null (speculative/timing.py). Null otherwise and in replay",
           nullable=True),
    Column("drafter_rows", _I32, False, "drafter KV rows at propose time (after catch-up)"),
    Column("fed_rows", _I32, False, "rows the catch-up feed wrote before this propose"),
    Column("accept_prob", pa.list_(_F32), False, "sampled runs: per drafted depth i (length k), the probability "
                                                 "that depth i is accepted: live, given the draft it was given, "
                                                 "min(1, p_i(x_i) / q_i(x_i)) (greedy drafts: p_i(x_i)); in "
                                                 "replay, given the trajectory's token, min(p_i(y_i), q_i(y_i)) "
                                                 "/ p_i(y_i) (greedy drafts: [x_i = y_i]), with null items past "
                                                 "depth accept_len+1 (the target's distribution there is not "
                                                 "stored); a sampled tree arm: the p mass of the children of "
                                                 "the path's (continued by rank-0 children) node at depth i-1, "
                                                 "the probability that the walk there accepts one of them, "
                                                 "null where there is no node or it has no children; null in "
                                                 "greedy runs",
           nullable=True),
    Column("alpha1", _F32, False, "sampled runs: the exact expected acceptance at depth 1, "
                                  "sum_x min(p_1(x), q_1(x)), which does not depend on the draft drawn (a "
                                  "sampled tree arm: the root's children's p mass); null when gated and in "
                                  "greedy runs", nullable=True),
    Column("pit", pa.list_(_F32), False, "sampled runs: the randomized PIT F(y-) + V p(y) of each committed "
                                         "token (aligned with `committed`), Uniform(0, 1) when the sampler is "
                                         "lossless (the distributional gate); null in greedy runs",
           nullable=True),
    Column("tree_nodes", _I32, False, "TREE: the draft nodes the step verified (the arm's tree, its shape in the "
                                      "manifest's arm); then `k` is the tree's depth, and `drafts`, `conf` and "
                                      "`target` run along the accepted path, continued past it by rank-0 children "
                                      "(-1 / 0 where the tree has none); null for a linear step",
           nullable=True),
    Column("tree_path", pa.list_(_I32), False, "TREE: the accepted path's node ids by depth, the root (0) first, "
                                               "accept_len + 1 of them (config/tree.py numbers the nodes); null for "
                                               "a linear step", nullable=True),
)

EVENT_COLUMNS: tuple[Column, ...] = (
    Column("doc_id", _I64, True, "the sequence's document"),
    Column("turn", _I32, True, "turn of the event"),
    Column("step", _I64, True, "the step the event belongs to (-1 for a turn's prefill)"),
    Column("seq", _I32, True, "batch slot"),
    Column("order", _I64, True, "global order of events within the run (monotone)"),
    Column("kind", pa.string(), True, "`" + "`, `".join(EVENT_KINDS) + "`"),
    Column("label", _I64, True, "ring label (ring_write, feed); -1 otherwise"),
    Column("key", _I64, True, "pair key (feed, context); -1 otherwise"),
    Column("rope", _I64, True, "RoPE position the drafter row used (feed, context); -1 otherwise"),
    Column("slot", _I64, True, "drafter KV slot written (feed, context); -1 otherwise"),
    Column("position", _I64, True, "propose position (propose); -1 otherwise"),
    Column("fp", _I64, True, "ring_write: fp of the source hidden; feed/context: fp of the hidden fed; "
                             "propose: fp of the target hidden the propose consumed"),
    Column("fp2", _I64, True, "ring_write: fp of the ring row after the write (destination); propose: fp of "
                              "the live ring row at label == position (null when absent)", nullable=True),
)

#: The per-unit table (`counts/`): one row per request, per (doc_id, turn) of a step run, or the
#: one `global` row of counters. Every metric is a ratio of sums of these over units, so the
#: analysis of step runs and engine runs reads this one table (analysis/metrics/units.py `Units`);
#: the derived per-depth counts are written once, where the source's numbers are read.
_L64 = pa.list_(pa.int64())
COUNT_COLUMNS: tuple[Column, ...] = (
    Column("unit", pa.string(), True, "the request's id as the source names it (file position, response id), "
                                      "or `global`"),
    Column("file", pa.string(), True, "the file it was read from"),
    Column("doc_id", _I64, True, "carried by the client; the request's index when not carried; null for global "
                                 "counters", nullable=True),
    Column("turn", _I32, True, "carried by the client; 0 when not carried; null for global counters", nullable=True),
    Column("n_steps", _I64, True, "verify steps (steps that carried >= 1 draft); null: the source does not say",
           nullable=True),
    Column("draft_tokens", _I64, True, "drafted tokens, the sum of k", nullable=True),
    Column("accepted_tokens", _I64, True, "accepted drafts, the sum of accept_len", nullable=True),
    Column("k_max", _I32, True, "the configured k (num_speculative_tokens), when reported", nullable=True),
    Column("k_fixed", _I32, True, "k of every step, when the unit's own numbers establish it (drafted == steps x k)",
           nullable=True),
    Column("hist", _L64, True, "hist[j] = verify steps that accepted exactly j drafts", nullable=True),
    Column("drafted", _L64, True, "drafted[i-1] = #(k >= i) for i = 1..K of the run; null items where the source "
                                  "does not determine it", nullable=True),
    Column("accepted", _L64, True, "accepted[i-1] = #(accept_len >= i) for i = 1..K", nullable=True),
    Column("cond_den", _L64, True, "cond_den[i-1] = #(accept_len >= i-1 and k >= i), p_i_cond's denominator; null "
                                   "items where the joint of k and accept_len is not known", nullable=True),
    Column("y2_tok", pa.float64(), True, "sum over verify steps of (1 + accept_len)^2 (the i.i.d. sd of tokens/step)",
           nullable=True),
    Column("prompt_tokens", _I64, True, "usage.prompt_tokens (the position reconstruction starts there)",
           nullable=True),
    Column("completion_tokens", _I64, True, "usage.completion_tokens (checks that no undrafted step went "
                                            "unrecorded)", nullable=True),
    Column("n_recorded", _I64, True, "steps the source counted when that count may include steps without a draft "
                                     "(k = 0); then n_steps is null", nullable=True),
    Column("zero_max", _I64, True, "with n_recorded: at most this many of them carried no draft", nullable=True),
    Column("completion_sha256", pa.string(), False, "sha256 of the completion's text, where the record carries "
                                                    "it and a (doc_id, turn): two runs pair only requests whose "
                                                    "texts are equal (ingest/completion_hash.py)", nullable=True),
)

STEP_SCHEMA = pa.schema([pa.field(c.name, c.type) for c in STEP_COLUMNS])
COUNT_SCHEMA = pa.schema([pa.field(c.name, c.type) for c in COUNT_COLUMNS])
COUNT_NAMES = tuple(c.name for c in COUNT_COLUMNS)
#: What a counts table must hold to be read (runs ingested before completion hashes lack them).
REQUIRED_COUNT = tuple(c.name for c in COUNT_COLUMNS if c.required)
EVENT_SCHEMA = pa.schema([pa.field(c.name, c.type) for c in EVENT_COLUMNS])

#: The step columns that hold wall times: they differ between two runs of the same steps.
TIMING_COLUMNS = ("step_ms", "warmup_ms")
#: Columns every steps table must hold (the analysis needs nothing else).
REQUIRED_STEP = tuple(c.name for c in STEP_COLUMNS if c.required)
EVENT_NAMES = tuple(c.name for c in EVENT_COLUMNS)
#: The integer type each required step column is read as (Arrow's name of an integer type is numpy's;
#: `DataType.to_pandas_dtype` would import pandas at start-up under some pyarrow versions: 0.3 s of the
#: H200 image's start-up: bench/results/importtime_h200_2026-12-01b.txt, under atlas_ab.telemetry.schema).
STEP_INT_TYPES = {c.name: str(c.type) for c in STEP_COLUMNS if c.required}
assert all(pa.types.is_integer(c.type) for c in STEP_COLUMNS if c.required), "required step columns are integers"


def step_type(name: str) -> pa.DataType | None:
    """The contract's Arrow type of a steps column (None for a column the contract does not name)."""
    return STEP_SCHEMA.field(name).type if name in STEP_SCHEMA.names else None


def _type_name(t: pa.DataType) -> str:
    return str(t).replace("list<item: ", "list<").replace("bool", "bool")


def markdown_table(columns: tuple[Column, ...], required: bool = True) -> str:
    """The docs' column table for one table of the contract."""
    head = "| column | type | required | meaning |" if required else "| column | type | meaning |"
    rows = [head, "|---|---|---|---|" if required else "|---|---|---|"]
    for c in columns:
        typ = _type_name(c.type) + (", nullable" if c.nullable else "")
        mid = f" {'yes' if c.required else 'no'} |" if required else ""
        rows.append(f"| `{c.name}` | {typ} |{mid} {c.doc} |")
    return "\n".join(rows)
