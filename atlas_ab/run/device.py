"""Which device a job runs on, and how many CPU threads it may use.

GPU: runner.device=auto -> cuda:(job.num % device_count), with an advisory lock so two
jobs of one host never share a GPU (see DeviceClaim).

CPU threads: torch's default is one thread per core, so two jobs of one launcher on the
same cores would oversubscribe them, and torch's OpenMP workers spin-wait for a descheduled
sibling. The job takes `runner.threads` if set, else its share of the cores it may use (the
usable cores divided by the jobs its launcher runs side by side), at least 1. Thread count
does not change a run's discrete outcomes (tokens, drafts, accept lengths); its floats agree
to rounding (tests/analysis/test_verdicts.py runs 1 vs 2 threads).
"""
from __future__ import annotations

import os
import sys
import tempfile
from typing import Optional


def usable_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def thread_count(requested: int, side_by_side: int = 1) -> int:
    """runner.threads, or (0 = auto) this job's share of the usable cores."""
    if requested > 0:
        return requested
    # the cores present, not the load average (a minute behind the cores): one machine, one count, no lag
    return max(1, usable_cores() // max(1, side_by_side))


def set_threads(n: int) -> int:
    """torch's CPU threads, where the engine already imported torch: an engine that does not use
    it (the tests' fake runner, an ingest) does not pay its import."""
    torch = sys.modules.get("torch")
    if torch is None:
        return n
    torch.set_num_threads(n)
    return torch.get_num_threads()


def gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 -- no torch, no driver: no GPU
        return 0


#: The GPU this process last claimed: a launcher's worker process keeps it for its next job.
_STICKY: Optional[int] = None


class DeviceClaim:
    """The device a job runs on, plus an advisory lock when it shares a host's GPUs with other jobs.

    With auto and several local GPUs (the joblib launcher), a job prefers the GPU its process
    already used (a worker runs many jobs, and one process must stay on one GPU: a process that
    moves to another GPU captures empty CUDA graphs), else
    cuda:(n % device_count) for job n; if another running job of this host holds that GPU, it
    takes the first free one instead, and waits for its preferred one only when all are held.
    The lock (flock on a file in the temp dir) is released when the job ends.
    """

    def __init__(self, spec: str, job_num: int, count: Optional[int] = None,
                 lock_dir: Optional[str] = None):
        self.fd: Optional[int] = None
        self.device = spec
        if spec != "auto":
            return
        count = gpu_count() if count is None else count
        if count == 0:
            self.device = "cpu"
            return
        if count == 1:
            self.device = "cuda:0"
            return
        import fcntl

        lock_dir = lock_dir or tempfile.gettempdir()
        path = lambda i: os.path.join(lock_dir, f"atlas_ab-cuda{i}.lock")  # noqa: E731
        global _STICKY
        pref = _STICKY if _STICKY is not None and _STICKY < count else job_num % count
        for i in [(pref + j) % count for j in range(count)]:
            fd = os.open(path(i), os.O_CREAT | os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            self.fd, self.device = fd, f"cuda:{i}"
            _STICKY = i
            return
        fd = os.open(path(pref), os.O_CREAT | os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX)
        self.fd, self.device = fd, f"cuda:{pref}"
        _STICKY = pref

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing drops the flock
            self.fd = None
