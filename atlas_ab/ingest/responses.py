"""Response files (JSON, JSON lines, or a server-sent-event stream: jsonio.py) -> records.

A record is one request's answer, either bare (as the engine returned it) or wrapped by
the client that sent it, which is where the document and turn live (engines do not know
them): {"doc_id": 3, "turn": 1, "response": {...}} or {"doc_id": 3, "turn": 1,
"stream": [chunk, ...]}. `atlas_ab.collect` writes the wrapped form.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from atlas_ab.ingest.engine_units import Where
from atlas_ab.ingest.jsonio import json_items

WRAPPER_KEYS = {"doc_id", "turn", "response", "stream", "request", "reply", "attempts", "seconds", "extra",
                "in_flight"}


@dataclass(frozen=True)
class Record:
    where: Where
    doc_id: int | None
    turn: int | None
    body: dict | None            # a complete (non-streamed) response
    stream: list | None          # the chunks of a streamed response, in order
    extra: dict | None = None    # what the client attached (e.g. TRT-LLM's /perf_metrics entry)
    request: dict | None = None  # the request the client sent, when it kept it


def read_records(paths) -> list[Record]:
    out = []
    for p in map(Path, paths):
        for label, item in json_items(p):
            w = Where(str(p), label)
            if not isinstance(item, dict):
                raise w.error(f"expected a JSON object, got {type(item).__name__}")
            wrapped = "response" in item or "stream" in item
            if wrapped:
                unknown = sorted(set(item) - WRAPPER_KEYS)
                if unknown:
                    raise w.error("unknown field in the client's record", unknown[0])
                doc = w.count(item.get("doc_id"), "doc_id", allow_none=True)
                turn = w.count(item.get("turn"), "turn", allow_none=True)
                if (doc is None) != (turn is None) and doc is None:
                    raise w.error("turn given without doc_id", "doc_id")
                body, stream = item.get("response"), item.get("stream")
                if stream is not None and not isinstance(stream, list):
                    raise w.error("expected a list of chunks", "stream")
                if body is not None and not isinstance(body, dict):
                    raise w.error("expected a JSON object", "response")
                rid = (body or {}).get("id") if isinstance(body, dict) else None
                label2 = " ".join(x for x in (label, f"(doc {doc} turn {turn or 0})" if doc is not None else "",
                                             f"({rid})" if rid else "") if x)
                req = item.get("request")
                if req is not None and not isinstance(req, dict):
                    raise w.error("expected a JSON object", "request")
                out.append(Record(Where(str(p), label2), doc, turn, body, stream, item.get("extra"), req))
            else:
                rid = item.get("id") or item.get("request_id")
                label2 = (label + (f" ({rid})" if rid else "")) if label else str(rid or "")
                out.append(Record(Where(str(p), label2), None, None, item, None))
    return out
