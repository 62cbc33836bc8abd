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
  counters show (drafted tokens == drafts x positions); otherwise p_i has bounds only. A
  draft whose tokens grammar invalidated is counted with 0 tokens (vllm/v1/core/sched/
  scheduler.py `make_spec_decoding_stats` subtracts `num_invalid_spec_tokens` before
  `observe_draft`), so even #(k >= 1) is bounded then.
  v0 (vllm/engine/metrics.py): the draft/accepted token counters only (no drafts counter);
  its gauges `vllm:spec_decode_draft_acceptance_rate`, `vllm:spec_decode_efficiency` and the
  emitted-tokens counter are not read.
llama.cpp (tools/server/server-task.cpp, the /metrics text): `llamacpp:spec_decode_num_drafts_total`,
  `..._num_draft_tokens_total`, `..._num_accepted_tokens_total`,
  `..._num_accepted_tokens_per_pos_total{position="i"}`: the same four as vLLM.
TensorRT-LLM (tensorrt_llm/metrics/collector.py, MetricsCollector):
  trtllm_spec_decode_drafted_tokens_total{token_position="i"}    #(k >= i+1)
  trtllm_spec_decode_accepted_tokens_total{token_position="i"}   #(accept_len >= i+1)
  both marginals per depth: p_i exact; p_i_cond only where every step drafted the depth.
  The counters are labelled and created on first use, so a freshly started server prints
  their HELP/TYPE lines and no sample: zero, not "no counter".

A restart between the two scrapes is refused: prometheus_client writes each counter's
`*_created` sample (the process's creation time of that counter), and a counter that goes
down says the same.
"""
from __future__ import annotations

import math
import re
from collections import defaultdict
from pathlib import Path

from atlas_ab import AtlasError
from atlas_ab.ingest.engine_units import UNKNOWN, Unit, Where, check_unit, fixed_k
from atlas_ab.ingest.jsonio import read_text

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?\s*$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
COMMENT = re.compile(r"^#\s+(?:HELP|TYPE)\s+([a-zA-Z_:][a-zA-Z0-9_:]*)")
COUNTERS = {
    "vllm": {"vllm:spec_decode_num_drafts_total": "n", "vllm:spec_decode_num_draft_tokens_total": "d",
             "vllm:spec_decode_num_accepted_tokens_total": "a",
             "vllm:spec_decode_num_accepted_tokens_per_pos_total": "a_pos"},
    "llamacpp": {"llamacpp:spec_decode_num_drafts_total": "n", "llamacpp:spec_decode_num_draft_tokens_total": "d",
                 "llamacpp:spec_decode_num_accepted_tokens_total": "a",
                 "llamacpp:spec_decode_num_accepted_tokens_per_pos_total": "a_pos"},
    "trtllm": {"trtllm_spec_decode_drafted_tokens_total": "d_pos",
               "trtllm_spec_decode_accepted_tokens_total": "a_pos"},
}
PREFIX = {"vllm": "vllm:spec_decode", "llamacpp": "llamacpp:spec_decode", "trtllm": "trtllm_spec_decode"}
POSITION = {"vllm": "position", "llamacpp": "position", "trtllm": "token_position"}
#: spec-decode names that are known and not read, with why
IGNORED = {
    "vllm:spec_decode_draft_acceptance_rate": "v0 gauge of the last logging interval, not a count",
    "vllm:spec_decode_efficiency": "v0 gauge of the last logging interval, not a count",
    "vllm:spec_decode_num_emitted_tokens_total": "v0 emitted tokens (accepted + bonus): not needed",
}
VLLM, TRTLLM = COUNTERS["vllm"], COUNTERS["trtllm"]


def _engine_of(name: str) -> str | None:
    base = name[:-len("_created")] + "_total" if name.endswith("_created") else name
    for eng, names in COUNTERS.items():
        if base in names or name.startswith(PREFIX[eng]):
            return eng
    return None


def parse(path: Path) -> tuple[str, dict]:
    """(engine, {key: value or {position: value}}) of one scrape, label sets summed; the
    `*_created` samples and the names not read are under the keys "created" and "ignored"."""
    vals: dict = {"created": {}, "ignored": {}}
    engine = None
    declared = set()

    def claim(eng: str, n: int) -> None:
        nonlocal engine
        if engine not in (None, eng):
            raise AtlasError(f"{path}: line {n}: counters of two engines ({engine}, {eng}) in one scrape")
        engine = eng

    for n, line in enumerate(read_text(path).splitlines(), 1):
        s = line.strip()
        if not s:
            continue
        if s.startswith("#"):
            m = COMMENT.match(s)
            if m and _engine_of(m.group(1)):
                declared.add(_engine_of(m.group(1)))
            continue
        m = SAMPLE.match(s)
        if not m:
            raise AtlasError(f"{path}: line {n}: not a Prometheus sample")
        name = m.group(1)
        eng = _engine_of(name)
        if eng is None:
            continue
        labels = tuple(sorted(LABEL.findall(m.group(3) or "")))
        if name.endswith("_created"):  # when this process created the counter (prometheus_client)
            vals["created"][(name, labels)] = m.group(4)
            continue
        if name not in COUNTERS[eng]:
            vals["ignored"][name] = IGNORED.get(name, UNKNOWN)
            continue
        claim(eng, n)
        try:
            v = float(m.group(4))
        except ValueError:
            raise AtlasError(f"{path}: line {n}: {name}: unreadable value {m.group(4)!r}") from None
        if not math.isfinite(v) or v < 0 or v != int(v):
            raise AtlasError(f"{path}: line {n}: {name}: a counter of steps or tokens, got {m.group(4)}")
        key = COUNTERS[eng][name]
        if key.endswith("_pos"):
            pl = POSITION[eng]
            lab = dict(labels)
            if pl not in lab:
                raise AtlasError(f"{path}: line {n}: {name} without its {pl!r} label")
            try:
                pos = int(lab[pl])
            except ValueError:
                raise AtlasError(f"{path}: line {n}: {name}: {pl}={lab[pl]!r} is not an integer") from None
            vals.setdefault(key, defaultdict(int))[pos] += int(v)
        else:
            vals[key] = vals.get(key, 0) + int(v)
    if engine is None and len(declared) == 1:
        engine = declared.pop()  # declared, never incremented: a fresh server's zero
    if engine is None:
        raise AtlasError(f"{path}: no vLLM, llama.cpp or TensorRT-LLM spec-decode counter (vllm:spec_decode_*, "
                         "llamacpp:spec_decode_*, trtllm_spec_decode_*)")
    return engine, vals


def restarted(before: dict, after: dict) -> str | None:
    """Why the two scrapes are of two processes (None: one process, as far as they show)."""
    for key, t in after["created"].items():
        b = before["created"].get(key)
        if b is not None and b != t:
            return f"{key[0]} was created at {b} in the before-scrape and at {t} in the after-scrape"
    return None


def _delta(before: dict, after: dict, where: str) -> dict:
    why = restarted(before, after)
    out = {}
    for key, v in after.items():
        if key in ("created", "ignored"):
            continue
        b = before.get(key, {} if isinstance(v, dict) else 0)
        if isinstance(v, dict):
            out[key] = {p: v[p] - b.get(p, 0) for p in v}
            bad = [p for p, x in out[key].items() if x < 0]
        else:
            out[key] = v - b
            bad = [key] if out[key] < 0 else []
        if bad and why is None:
            why = (f"counter {key} went down between the scrapes (or the files are in the wrong order: "
                   "before, after)")
    if why is not None:
        raise AtlasError(f"{where}: the server restarted between the scrapes: {why}. Their difference would "
                         "subtract two processes' counts, so it is refused; ingest the after-scrape alone for "
                         "the totals since the restart (they cover the workload only if it restarted before it)")
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
    ignored = {k: v for _, sc in scrapes for k, v in sc["ignored"].items()}
    if len(scrapes) == 2:
        vals = _delta(scrapes[0][1], scrapes[1][1], f"{paths[0]} -> {paths[1]}")
    else:
        vals = scrapes[0][1]
        notes.append("one scrape: totals since the server started (give before and after to measure a workload)")
    w = Where(str(paths[-1]), "global")
    u = Unit(where=w, unit="global", ignored=dict(sorted(ignored.items())))
    names = {v: k for k, v in COUNTERS[engine].items()}
    if engine in ("vllm", "llamacpp"):
        for key in ("d", "a"):
            if key not in vals:
                raise w.error("missing in the scrape", names[key])
        u.n_steps, u.draft_tokens, u.accepted_tokens = vals.get("n"), vals["d"], vals["a"]
        if u.n_steps is None:
            notes.append(f"no {names['n']} (vLLM v0 has none): draft and accepted token totals only")
        pos = vals.get("a_pos")
        if pos and u.n_steps is not None:
            K = max(pos) + 1
            u.accepted = [pos.get(i, 0) for i in range(K)]
            u.k_max = K
            u.extra["depth_field"] = names["a_pos"]
            if sum(u.accepted) != u.accepted_tokens:
                raise w.error(f"per-position accepted sum to {sum(u.accepted)}, accepted tokens "
                              f"{u.accepted_tokens}", names["a_pos"])
        if engine == "vllm" and u.n_steps and u.k_max and u.draft_tokens != u.n_steps * u.k_max:
            most = u.n_steps - -(-u.draft_tokens // u.k_max)  # drafts that can have lost every token
            if most > 0:
                u.n_recorded, u.n_steps, u.zero_steps, u.zero_max = u.n_steps, None, None, most
        fmt = f"{engine} prometheus counters"
    else:
        for key in ("d_pos", "a_pos"):
            if key not in vals:
                raise w.error("missing in the scrape", names[key])
        K = max(max(vals["d_pos"], default=0), max(vals["a_pos"], default=0)) + 1
        u.drafted = [vals["d_pos"].get(i, 0) for i in range(K)]
        u.accepted = [vals["a_pos"].get(i, 0) for i in range(K)]
        u.n_steps, u.draft_tokens, u.accepted_tokens = u.drafted[0], sum(u.drafted), sum(u.accepted)
        u.extra["depth_field"] = "trtllm_spec_decode_*_tokens_total{token_position}"
        fmt = "trtllm prometheus counters"
    check_unit(u)
    u.k_fixed = fixed_k(u)
    return [u], fmt, tuple(notes)
