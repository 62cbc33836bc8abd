"""Work beside the step's path: a second CUDA stream that nothing on the path waits for.

`fork(*reads)` runs a block on the side stream after everything the current stream has queued;
`join()` makes the current stream wait for what was forked. Captured in a CUDA graph, the two
become parallel branches of the graph (torch.cuda.graph captures a forked stream as long as it
is joined before the capture ends). Off CUDA the block runs in line and `join` does nothing.

`reads`: the tensors the block reads that the path made. They are held until the join: the caching
allocator hands a freed block to the next allocation on its own stream (in a capture too), so a
temporary the path drops while the side still reads it could be overwritten by the path's next op.

FINGERPRINTS uses it: the step's hashing (a chain over each row's bytes, a few small gathers)
runs while the drafter and the host-bound bookkeeping run, instead of after them.
"""
from __future__ import annotations

import contextlib

import torch


class SideStream:
    def __init__(self, device: torch.device):
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.pending = False          # a fork not joined yet
        self._held: list = []         # what the forked blocks read, alive until the join

    @contextlib.contextmanager
    def fork(self, *reads: torch.Tensor):
        """The block's device work on the side stream, after what the current stream has queued
        (so it may read anything the path made so far; the path must not write what it reads
        before `join`). reads: the path's tensors the block reads (held until the join)."""
        if self.stream is None:
            yield
            return
        self._held.extend(reads)
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            yield
        self.pending = True

    def join(self) -> None:
        """The current stream waits for every forked block (no-op when none is pending)."""
        if self.pending:
            torch.cuda.current_stream().wait_stream(self.stream)
            self.pending = False
        self._held.clear()
