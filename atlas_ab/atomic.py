"""Atomic file writes: the one way a run's files, an ingested run, a pre-registration lock and a
collection's manifest reach the disk.

A file is written under a temporary name in its own directory (`NAME.<random>.tmp`), flushed
and fsync'd, then renamed over its destination (`os.replace`) or, for a first-writer-wins
lock, hard-linked to it (`os.link` fails if the destination exists); then the directory is
fsync'd so the rename itself survives a crash. A reader sees the old file or the new one,
never half of one. A failed write removes its temporary file and raises OSError naming the
destination (an ENOSPC raised by write() or close() carries no file name of its own).

Torch-free; pyarrow is imported only by `write_table`.
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets
from pathlib import Path
from typing import Any, Callable

TMP_SUFFIX = ".tmp"


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """The sha256 (hex) of a file's bytes, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _open_tmp(path: Path) -> tuple[int, str]:
    """A new file beside `path`, `NAME.<random>.tmp`, with the permissions the umask gives."""
    while True:
        tmp = str(path.with_name(f"{path.name}.{secrets.token_hex(4)}{TMP_SUFFIX}"))
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue


def _land(path: Path, data, place: Callable[[str, Path], None]) -> None:
    """Write `data` to a temporary file beside `path`, fsync it, then `place(tmp, path)`."""
    tmp = None
    try:
        fd, tmp = _open_tmp(path)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        place(tmp, path)
        _fsync_dir(path.parent)
    except OSError as e:
        raise OSError(e.errno, e.strerror or str(e), str(path)) from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def write_bytes(path: str | Path, data) -> str:
    """Replace `path` with `data` (bytes-like) atomically; returns the sha256 (hex) of what was written."""
    _land(Path(path), data, os.replace)
    return hashlib.sha256(data).hexdigest()


def link_bytes(path: str | Path, data: bytes) -> bool:
    """Create `path` holding `data`, atomically and only if it does not exist yet (the first of
    several writers wins); True if this call created it."""
    created = True

    def link(tmp: str, dst: Path) -> None:
        nonlocal created
        try:
            os.link(tmp, dst)
        except FileExistsError:
            created = False

    _land(Path(path), data, link)
    return created


def write_json(path: str | Path, obj: Any) -> str:
    """`obj` as indented JSON (non-JSON values by str), atomically; returns its sha256."""
    return write_bytes(path, (json.dumps(obj, indent=2, default=str) + "\n").encode())


def write_table(path: str | Path, table) -> str:
    """A pyarrow Table as Parquet, atomically; returns the sha256 of the file's bytes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = pa.BufferOutputStream()
    # dictionaries give up at 16 KB, not 1 MB: fingerprints never repeat, so a full one is built for
    # nothing (bench/RESULTS.md, "Shards written behind the next wave")
    pq.write_table(table, buf, dictionary_pagesize_limit=1 << 14)
    return write_bytes(path, memoryview(buf.getvalue()))
