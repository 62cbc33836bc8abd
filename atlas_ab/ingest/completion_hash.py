"""The text each request completed, hashed, so two engine runs pair only requests that
decoded the same text (under greedy decoding both arms do; a sampling server does not).

The text is what the answer carries: `choices[0].message.content` or `choices[0].text`, or
a stream's deltas joined (the collector's stored `reply` is the same extraction). Its
sha256 is the counts table's `completion_sha256`; `analysis/runs/completion_match.py` compares them.
"""
from __future__ import annotations

import hashlib

REQUEST_SOURCES = ("vllm", "sglang", "trtllm", "llamacpp")


def completion_text(body: dict | None, stream: list | None) -> str | None:
    """The completion's text, or None where the answer carries none."""
    if stream is not None:
        parts = []
        for c in stream:
            for ch in (c.get("choices") or []) if isinstance(c, dict) else []:
                d = ch.get("delta") or {}
                parts.append(d.get("content") or ch.get("text") or "")
        return "".join(parts)
    choices = (body or {}).get("choices") if isinstance(body, dict) else None
    if not choices or not isinstance(choices[0], dict):
        return None
    ch = choices[0]
    return (ch.get("message") or {}).get("content") or ch.get("text") or ""


def text_sha256(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def completion_hashes(paths) -> dict[tuple[int, int], str]:
    """(doc_id, turn) -> sha256 of the completion, for the records that carry a doc_id."""
    from atlas_ab import AtlasError
    from atlas_ab.ingest.responses import read_records

    out = {}
    for p in paths:
        try:
            records = read_records([p])
        except AtlasError:   # a file its source read another way (a server log): it holds no completions
            continue
        for r in records:
            text = completion_text(r.body, r.stream)
            if r.doc_id is not None and text is not None:
                out[(r.doc_id, r.turn or 0)] = text_sha256(text)
    return out
