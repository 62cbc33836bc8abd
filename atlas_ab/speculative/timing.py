"""The wall time of a live wave's steps, with warm-up kept out of `step_ms`.

A step pays one-time costs the first time something runs in a wave: the capture of a CUDA
graph (the verify, the one-token decode, the drafter's steps; Triton's first-call compile
inside it), first-call allocations and compiles in eager mode. Those are not the step's cost
and must not enter tokens per second, where they would weigh on the arm with more kinds of
step. So a step is warm-up, and its time goes to `warmup_ms` with `step_ms` null, when

  - it is the first step of its kind in the wave: "verify" (drafts verified) or "serial"
    (DRAFT_CONF dropped every draft: a one-token decode; the wave's first gate flip to
    serial is its first serial step), or
  - a static step ran for the first time during it (runtime/graphs.py `first_calls`: a new
    graph key, whatever the mode), which also covers a first call at a later gate flip.

Every other live step's wall time is its `step_ms`. Replay steps run no target: both null.
"""
from __future__ import annotations

import time

from atlas_ab.runtime import graphs

KINDS = ("verify", "serial")
NAN = float("nan")


class StepTimer:
    """start() before a step, stop(kind) after it -> (step_ms, warmup_ms), NaN where not."""

    def __init__(self, live: bool, clock=time.perf_counter, first_calls=graphs.first_calls):
        self.live, self.clock, self.first_calls = live, clock, first_calls
        self.seen: set[str] = set()
        self._t0, self._f0 = 0.0, 0

    def start(self) -> None:
        self._t0, self._f0 = self.clock(), self.first_calls()

    def stop(self, kind: str, steps: int = 1) -> tuple[float, float]:
        """steps: how many steps ran since start() (a run-ahead chunk's); each is given their mean."""
        if kind not in KINDS:
            raise ValueError(f"step kind {kind!r} (one of {KINDS})")
        ms = (self.clock() - self._t0) * 1e3 / steps
        if not self.live:
            return NAN, NAN
        warm = kind not in self.seen or self.first_calls() != self._f0
        self.seen.add(kind)
        return (NAN, ms) if warm else (ms, NAN)
