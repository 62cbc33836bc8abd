"""The reference engine's debug log (`GLM_MTP_DBG` lines) -> the events table (docs/telemetry.md).

The reference engine's GLM MTP head prints, with its debug switch on
(ATLAS_MTP_REFEED_DEBUG=1; docs/reference_engine.md, "The debug log"):

  GLM_MTP_DBG ctx row slot=S key=K tok=T fp_hidden=FFFF...    a drafter context row
      (rows_impl: slot = the drafter's seq_len, key = row_base + r, tok = tokens[r+1])
      -> kind `context`: slot, key, fp = fp_hidden
  GLM_MTP_DBG propose position=P drafter_rows=R tok=T fp_target=FFFF...   a propose
      -> kind `propose`: position, fp = fp_target

Only what the lines carry: the ctx line prints no RoPE position (rope = -1), the propose
line no ring row (fp2 = null), and neither prints acceptance, so the run holds events
only. The fingerprints are FNV-1a 64 (the engine's `hidden_fingerprint`), printed as
16 hex digits and stored as the same 64 bits in int64. One file = one sequence (doc_id =
the file's index, seq 0); a turn starts where context rows follow a propose; a propose's
step is its index within the turn, context rows are step -1 (the turn's prefill).
"""
from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa

from atlas_ab import AtlasError
from atlas_ab.ingest.jsonio import read_text
from atlas_ab.telemetry.grain import Telemetry
from atlas_ab.telemetry.schema import EVENT_SCHEMA

CTX = re.compile(r"GLM_MTP_DBG ctx row slot=(\d+) key=(\d+) tok=(\d+) fp_hidden=([0-9a-fA-F]{1,16})\b")
PROPOSE = re.compile(r"GLM_MTP_DBG propose position=(\d+) drafter_rows=(\d+) tok=(\d+)\s+"
                     r"fp_target=([0-9a-fA-F]{1,16})\b")


def _fp(hex_digits: str) -> int:
    v = int(hex_digits, 16)
    return v - (1 << 64) if v >= 1 << 63 else v


def events(paths) -> tuple[pa.Table, Telemetry]:
    cols = {c: [] for c in EVENT_SCHEMA.names}
    order = 0
    n_ctx = n_prop = 0
    for doc, path in enumerate(map(Path, paths)):
        turn, step, last = 0, 0, None
        for n, line in enumerate(read_text(path).splitlines(), 1):
            if "GLM_MTP_DBG" not in line:
                continue
            m = CTX.search(line)
            if m:
                if last == "propose":
                    turn, step = turn + 1, 0
                row = dict(kind="context", step=-1, label=-1, key=int(m.group(2)), rope=-1, slot=int(m.group(1)),
                           position=-1, fp=_fp(m.group(4)), fp2=None)
                last, n_ctx = "context", n_ctx + 1
            else:
                m = PROPOSE.search(line)
                if not m:
                    raise AtlasError(f"{path}: line {n}: a GLM_MTP_DBG line in neither known form "
                                     "('ctx row slot= key= tok= fp_hidden=', 'propose position= drafter_rows= "
                                     "tok= fp_target=')")
                row = dict(kind="propose", step=step, label=-1, key=-1, rope=-1, slot=-1,
                           position=int(m.group(1)), fp=_fp(m.group(4)), fp2=None)
                step, last, n_prop = step + 1, "propose", n_prop + 1
            row.update(doc_id=doc, turn=turn, seq=0, order=order)
            order += 1
            for c in cols:
                cols[c].append(row[c])
    if order == 0:
        raise AtlasError(f"{paths[0] if len(paths) == 1 else 'the logs'}: no GLM_MTP_DBG line "
                         "(was ATLAS_MTP_REFEED_DEBUG=1 set?)")
    table = pa.table(cols, schema=EVENT_SCHEMA)
    na = {f: "the reference engine's debug lines carry no acceptance (no steps)" for f in
          ("p_i", "p_i_cond", "tokens_per_step", "histogram", "cluster_sd", "position_pairing")}
    na["rope"] = "the ctx row line does not print the RoPE position: rope = -1 on context events"
    na["ring_write/feed"] = "no ring or feed lines in this format: fingerprint rows a-c and e have nothing to check"
    tel = Telemetry(source="atlas-log", format="reference engine GLM_MTP_DBG ctx row / propose lines", grain="events",
                    tables=("events",), clusters=None, exact=("fingerprints",), not_available=na,
                    notes=(f"{n_ctx} context rows and {n_prop} proposes from {len(paths)} file(s); "
                           "tok and drafter_rows are not event columns and are dropped",))
    return table, tel
