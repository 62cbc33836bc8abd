"""A run-ahead chunk's launches, made on a helper thread while the host replays the steps before.

The run-ahead (`Wave._run_ahead`) launches a chunk of M captured steps and replays each on the
host as its read lands. In one thread the host pays both for every step: the graph's launch
(`cudaGraphLaunch`, 0.17-0.38 ms a step for a catch-up arm's graph, bench/RESULTS.md) and the
replay. Launched from a second thread, the launches run while the host replays earlier steps, so
the host's time a step is the larger of the two, not their sum. PyTorch releases the GIL inside a
graph's replay and an event's wait, which is where both threads spend most of their time.

The thread only replays graphs that exist (it never captures: a capture in progress forbids other
threads' CUDA calls), on the stream and device of the thread that made it, so its work is
ordered exactly as the same calls made in the host's thread.
"""
from __future__ import annotations

import contextlib
import queue
import sys
import threading
from typing import Callable, Iterator

import torch

#: The GIL's switch interval while a chunk's thread runs (the default, 5 ms, is longer than a
#: chunk's steps: the thread would wait for the GIL between launches while the host replays).
SWITCH_INTERVAL_S = 5e-5


class Launches:
    """The read events of a chunk's M launches, in order (`launch(m)` launches step m and returns
    its event): made here, or (`threaded`) on a helper thread while the caller iterates."""

    def __init__(self, launch: Callable[[int], object], M: int, threaded: bool):
        self.M = M
        self._events: list = []           # made (here) or handed over (threaded), in order
        self._thread = None
        self._error: BaseException | None = None
        if not threaded:
            self._events = [launch(m) for m in range(M)]
            return
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._interval = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        cuda = torch.cuda.is_available()         # (a CPU test drives the thread with launches of its own)
        self._thread = threading.Thread(target=self._run, daemon=True, args=(
            launch, torch.cuda.current_stream() if cuda else None, torch.cuda.current_device() if cuda else None))
        self._thread.start()

    def _run(self, launch, stream, device) -> None:
        try:
            with contextlib.ExitStack() as on:
                if stream is not None:    # the caller's device and stream: the launches' order is its
                    on.enter_context(torch.cuda.device(device))
                    on.enter_context(torch.cuda.stream(stream))
                for m in range(self.M):
                    self._queue.put(launch(m))
        except BaseException as e:        # handed to the caller's thread, raised there
            self._error = e
            self._queue.put(None)

    def __iter__(self) -> Iterator:
        """Each step's read event, as soon as it is launched."""
        if self._thread is None:
            yield from list(self._events)
            return
        for _ in range(self.M):
            event = self._queue.get()
            if self._error is not None:
                self.join()               # raises it
            self._events.append(event)
            yield event

    def join(self) -> None:
        """Every launch made; the GIL's switch interval put back; a launch's error raised."""
        if self._thread is not None:
            self._thread.join()
            sys.setswitchinterval(self._interval)
            self._thread = None
            while not self._queue.empty():                 # launched but not iterated (a halt)
                event = self._queue.get()
                if event is not None:
                    self._events.append(event)
        if self._error is not None:
            raise self._error

    def wait_all(self) -> None:
        """Until every launched step has run and its read has landed."""
        self.join()
        if self._events and self._events[-1] is not None:
            self._events[-1].synchronize()
