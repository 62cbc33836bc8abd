"""A wave's shard written while the next wave runs (`runner.write_behind`).

`RunStore.add_shard` encodes a wave's tables to Parquet, hashes and fsyncs them and grows the
manifest, a large share of a short wave (bench/RESULTS.md, "Shards written behind the next wave"). The writer
does that on one background thread with one shard in flight: a submit first waits for the shard
before it, so shards land and the manifest grows in wave order, as when written in line. Parquet's
encoder, sha256 and the file writes release the GIL, so the thread overlaps the next wave.

A failure in the thread (a full disk) is raised at the next submit or at `close`, as the same
error `add_shard` raises in line. A failure in the caller's thread still lands the shard in flight
(`close` in the caller's `finally`), so a resume finds every wave that finished.
"""
from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Optional

log = logging.getLogger("atlas_ab")


class ShardWriter:
    def __init__(self, store, behind: bool = True):
        """store: the RunStore; behind False: every shard written in line, in `submit`."""
        self.store = store
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="atlas-shards") if behind else None
        self._pending: Optional[Future] = None

    def submit(self, *args, **kw) -> None:
        """`RunStore.add_shard(*args, **kw)`, after the shard before it has landed."""
        self.wait()
        if self._pool is None:
            self.store.add_shard(*args, **kw)
        else:
            self._pending = self._pool.submit(self.store.add_shard, *args, **kw)

    def wait(self) -> None:
        """Until the shard in flight has landed (raising its error, if it failed)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def close(self) -> None:
        try:
            self.wait()
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)

    def __enter__(self) -> "ShardWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            self.close()
        else:                       # the caller's error is the run's; the shard in flight still lands
            try:
                self.close()
            except Exception as ex:  # noqa: BLE001 -- reported, not raised over the caller's error
                log.warning("the shard in flight failed too: %s", ex)
        return False
