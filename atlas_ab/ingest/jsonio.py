"""Read what engines and clients write: JSON (an object or a list), JSON lines, and
server-sent-event streams (`data: {...}` lines, `data: [DONE]` last).

One reader for the ingest (`responses.py`, files on disk) and the collector (`atlas_ab/collect/client.py`,
answers as they arrive). Every failure is one AtlasError naming the file or URL and the line.
"""
from __future__ import annotations

import json
from pathlib import Path

from atlas_ab import AtlasError

DONE = "[DONE]"


def read_text(path: Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise AtlasError(f"{path}: unreadable ({e.__class__.__name__}: {e})") from None


def is_sse(text: str) -> bool:
    return text.lstrip().startswith("data:")


def sse_payloads(lines, where: str) -> list:
    """The JSON payload of every `data:` line of a server-sent-event stream, in order."""
    out = []
    for n, line in enumerate(lines, 1):
        line = line.strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if not data or data == DONE:
            continue
        try:
            out.append(json.loads(data))
        except ValueError as e:
            raise AtlasError(f"{where}: line {n}: unreadable stream chunk ({e})") from None
    return out


def json_lines(text: str, where: str) -> list[tuple[int, object]]:
    """(line number, value) of every non-blank line of JSON lines."""
    items = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            items.append((n, json.loads(line)))
        except ValueError as e:
            raise AtlasError(f"{where}: line {n}: not JSON ({e.msg})") from None
    return items


def json_items(path: Path) -> list[tuple[str, object]]:
    """(label, item) for every JSON value in a file: a list's elements, one object, JSON lines,
    or one stream ({"stream": [chunk, ...]}) for a server-sent-event file."""
    text = read_text(path)
    s = text.strip()
    if not s:
        raise AtlasError(f"{path}: empty file")
    if is_sse(s):
        return [("stream", {"stream": sse_payloads(text.splitlines(), str(path))})]
    try:
        doc = json.loads(s)
    except ValueError:
        doc = None
    if isinstance(doc, list):
        return [(f"item {i}", x) for i, x in enumerate(doc)]
    if doc is not None:
        return [("", doc)]
    return [(f"line {n}", x) for n, x in json_lines(text, str(path))]
