"""Global spec-decode counters from /metrics scrapes (Prometheus text format) -> one global unit.

Give the scrape before and the scrape after the workload: the unit is their difference
(one scrape: the totals since the server started, said in the notes). Label sets other
than the position (engine, model_name, worker, ...) are summed. No requests, no documents:
p_i with a binomial sd only.

vLLM (vllm/v1/spec_decode/metrics.py, SpecDecodingProm):
  vllm:spec_decode_num_drafts_total                      verify steps
  vllm:spec_decode_num_draft_tokens_total                drafted tokens
  vllm:spec_decode_num_accepted_tokens_total             accepted tokens
  vllm:spec_decode_num_accepted_tokens_per_pos_total{position="i"}   #(accept_len >= i+1)
  p_i's denominator #(k >= i) is the number of drafts only when k was fixed, which the
  counters show (drafted tokens == drafts x positions); otherwise p_i has bounds only.
TensorRT-LLM (tensorrt_llm/metrics/collector.py, MetricsCollector):
  trtllm_spec_decode_drafted_tokens_total{token_position="i"}    #(k >= i+1)
  trtllm_spec_decode_accepted_tokens_total{token_position="i"}   #(accept_len >= i+1)
  both marginals per depth: p_i exact; p_i_cond only where every step drafted the depth.
"""
from __future__ import annotations

import math
import re
from collections import defaultdict
from pathlib import Path

from atlas_ab import AtlasError
from atlas_ab.ingest.records import read_text
from atlas_ab.ingest.units import Unit, Where, check_unit, fixed_k

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?\s*$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
VLLM = {"vllm:spec_decode_num_drafts_total": "n", "vllm:spec_decode_num_draft_tokens_total": "d",
        "vllm:spec_decode_num_accepted_tokens_total": "a",
        "vllm:spec_decode_num_accepted_tokens_per_pos_total": "a_pos"}
TRTLLM = {"trtllm_spec_decode_drafted_tokens_total": "d_pos", "trtllm_spec_decode_accepted_tokens_total": "a_pos"}
POSITION = {"vllm": "position", "trtllm": "token_position"}


def parse(path: Path) -> tuple[str, dict]:
    """(engine, {key: value or {position: value}}) of one scrape, label sets summed."""
    vals: dict = {}
    engine = None
    for n, line in enumerate(read_text(path).splitlines(), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        m = SAMPLE.match(s)
        if not m:
            raise AtlasError(f"{path}: line {n}: not a Prometheus sample")
        name = m.group(1)
        eng = "vllm" if name in VLLM else "trtllm" if name in TRTLLM else None
        if eng is None:
            if name.startswith(("vllm:spec_decode", "trtllm_spec_decode")) and not name.endswith("_created"):
                raise AtlasError(f"{path}: line {n}: unknown spec-decode counter {name!r}")
            continue
        if engine not in (None, eng):
            raise AtlasError(f"{path}: line {n}: vLLM and TensorRT-LLM counters in one scrape")
        engine = eng
        try:
            v = float(m.group(4))
        except ValueError:
            raise AtlasError(f"{path}: line {n}: {name}: unreadable value {m.group(4)!r}") from None
        if not math.isfinite(v) or v < 0 or v != int(v):
            raise AtlasError(f"{path}: line {n}: {name}: a counter of steps or tokens, got {m.group(4)}")
        key = (VLLM if eng == "vllm" else TRTLLM)[name]
        labels = dict(LABEL.findall(m.group(3) or ""))
        if key.endswith("_pos"):
            pl = POSITION[eng]
            if pl not in labels:
                raise AtlasError(f"{path}: line {n}: {name} without its {pl!r} label")
            try:
                pos = int(labels[pl])
            except ValueError:
                raise AtlasError(f"{path}: line {n}: {name}: {pl}={labels[pl]!r} is not an integer") from None
            vals.setdefault(key, defaultdict(int))[pos] += int(v)
        else:
            vals[key] = vals.get(key, 0) + int(v)
    if engine is None:
        raise AtlasError(f"{path}: no vLLM or TensorRT-LLM spec-decode counter (vllm:spec_decode_*, "
                         "trtllm_spec_decode_*)")
    return engine, vals


def _delta(before: dict, after: dict, where: str) -> dict:
    out = {}
    for key, v in after.items():
        b = before.get(key, {} if isinstance(v, dict) else 0)
        if isinstance(v, dict):
            out[key] = {p: v[p] - b.get(p, 0) for p in v}
            bad = [p for p, x in out[key].items() if x < 0]
        else:
            out[key] = v - b
            bad = [key] if out[key] < 0 else []
        if bad:
            raise AtlasError(f"{where}: counter {key} went down between the scrapes "
                             "(the server restarted, or the files are in the wrong order: before, after)")
    return out


def units(paths) -> tuple[list[Unit], str, tuple[str, ...]]:
    paths = [Path(p) for p in paths]
    if len(paths) > 2:
        raise AtlasError(f"prometheus takes one scrape (totals) or two (before, after), got {len(paths)}")
    scrapes = [parse(p) for p in paths]
    engine = scrapes[-1][0]
    if len({e for e, _ in scrapes}) > 1:
        raise AtlasError(f"{paths[0]} and {paths[1]} are scrapes of different engines")
    notes = []
    if len(scrapes) == 2:
        vals = _delta(scrapes[0][1], scrapes[1][1], f"{paths[0]} -> {paths[1]}")
    else:
        vals = scrapes[0][1]
        notes.append("one scrape: totals since the server started (give before and after to measure a workload)")
    w = Where(str(paths[-1]), "global")
    u = Unit(where=w, unit="global")
    if engine == "vllm":
        for key, name in (("n", "vllm:spec_decode_num_drafts_total"), ("d", "vllm:spec_decode_num_draft_tokens_total"),
                          ("a", "vllm:spec_decode_num_accepted_tokens_total")):
            if key not in vals:
                raise w.error("missing in the scrape", name)
        u.n_steps, u.draft_tokens, u.accepted_tokens = vals["n"], vals["d"], vals["a"]
        pos = vals.get("a_pos")
        if pos:
            K = max(pos) + 1
            u.accepted = [pos.get(i, 0) for i in range(K)]
            u.k_max = K
            u.extra["depth_field"] = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
            if sum(u.accepted) != u.accepted_tokens:
                raise w.error(f"per-position accepted sum to {sum(u.accepted)}, accepted tokens "
                              f"{u.accepted_tokens}", "vllm:spec_decode_num_accepted_tokens_per_pos_total")
        fmt = "vllm prometheus counters"
    else:
        for key, name in (("d_pos", "trtllm_spec_decode_drafted_tokens_total"),
                          ("a_pos", "trtllm_spec_decode_accepted_tokens_total")):
            if key not in vals:
                raise w.error("missing in the scrape", name)
        K = max(max(vals["d_pos"]), max(vals["a_pos"])) + 1
        u.drafted = [vals["d_pos"].get(i, 0) for i in range(K)]
        u.accepted = [vals["a_pos"].get(i, 0) for i in range(K)]
        u.n_steps, u.draft_tokens, u.accepted_tokens = u.drafted[0], sum(u.drafted), sum(u.accepted)
        u.extra["depth_field"] = "trtllm_spec_decode_*_tokens_total{token_position}"
        fmt = "trtllm prometheus counters"
    check_unit(u)
    u.k_fixed = fixed_k(u)
    return [u], fmt, tuple(notes)
