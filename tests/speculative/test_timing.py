"""Warm-up is timed apart from step_ms (issue 18 section 3): the first step of each kind in a
wave (verify, serial decode) and any step that first ran a static step (a CUDA-graph capture
on the GPU) keep their time in warmup_ms, with step_ms null."""
import math
import time

import numpy as np
import pytest

from atlas_ab.config.structured import ArmConfig
from atlas_ab.proposers.mtp_head import MTPProposer
from atlas_ab.runtime import graphs
from atlas_ab.speculative.loop import Wave
from atlas_ab.speculative.targets import LiveTarget
from atlas_ab.speculative.timing import StepTimer
from tests.helpers.tiny import tiny_docs, tiny_models


class FakeClock:
    def __init__(self, ticks):
        self.ticks = iter(ticks)

    def __call__(self):
        return next(self.ticks)


def test_the_timer_on_a_literal_sequence():
    # (kind, seconds the step took, did a static step run for the first time during it)
    seq = [("verify", 1.4, True), ("verify", 0.001, False), ("serial", 0.03, True), ("serial", 0.001, False),
           ("verify", 0.001, False), ("serial", 0.002, False), ("verify", 0.02, True), ("verify", 0.001, False)]
    t, ticks = 0.0, []
    for _, dt, _ in seq:
        ticks += [t, t + dt]
        t += dt + 1.0
    counter = {"n": 0}
    timer = StepTimer(True, clock=FakeClock(ticks), first_calls=lambda: counter["n"])
    got = []
    for kind, _, first in seq:
        timer.start()
        counter["n"] += first          # what graphs.StepGraphs does on a new key
        got.append(timer.stop(kind))
    step_ms = [None if math.isnan(s) else round(s, 6) for s, _ in got]
    warm_ms = [None if math.isnan(w) else round(w, 6) for _, w in got]
    assert step_ms == [None, 1.0, None, 1.0, 1.0, 2.0, None, 1.0]
    assert warm_ms == [1400.0, None, 30.0, None, None, None, 20.0, None]
    replay = StepTimer(False, clock=FakeClock([0.0, 1.0]))
    replay.start()
    assert all(math.isnan(x) for x in replay.stop("verify"))
    with pytest.raises(ValueError):
        StepTimer(True).stop("decode")


def test_a_static_step_counts_its_first_call_in_every_mode():
    for mode in (False, True):
        steps, before = graphs.StepGraphs(mode), graphs.first_calls()
        f = lambda x, length: x            # noqa: E731
        import torch
        x = [torch.zeros(2)]
        steps(("verify", 3), f, x, 1, 4)
        steps(("verify", 3), f, x, 2, 4)
        steps(("verify", 1), f, x, 2, 4)
        assert graphs.first_calls() - before == 2
        steps.clear()                       # a new wave: every key is new again
        steps(("verify", 3), f, x, 1, 4)
        assert graphs.first_calls() - before == 3


@pytest.fixture(scope="module")
def models():
    return tiny_models()


def test_the_loop_times_each_kinds_first_step_apart(models, monkeypatch):
    """A wave whose path is scripted (serial x3, verify x3, serial, verify x2, ...), a first verify and a
    first serial decode that each cost 0.25 s (as a capture would), and a later verify that first
    calls a static step (a new graph key mid-wave): exactly those three are warm-up."""
    trunk, mtp = models
    script = iter([True, True, True, False, False, False, True, False, False] + [False] * 100)
    monkeypatch.setattr(Wave, "_all_gated", lambda self, gated, active: next(script))
    real, widths, calls = LiveTarget.verify, set(), [0]

    def verify(self, vtok, *a):
        calls[0] += 1
        if vtok.shape[1] not in widths:          # the first call of each width: a capture
            widths.add(vtok.shape[1])
            time.sleep(0.25)
        if calls[0] == 8:                        # a step that runs a new static step mid-wave
            graphs.FIRST_CALLS[0] += 1
            time.sleep(0.25)
        return real(self, vtok, *a)
    monkeypatch.setattr(LiveTarget, "verify", verify)
    arm = ArmConfig(num_drafts=2, draft_conf=1.0)
    t = Wave(LiveTarget(trunk), MTPProposer(trunk, mtp, arm.row_space, arm.refeed), arm,
             tiny_docs(n=1, turns=1, chunk=10), 12).run().steps.table().to_pandas()
    warm = t.warmup_ms.notna().to_numpy()
    assert np.flatnonzero(warm).tolist() == [0, 3, 7]          # first serial, first verify, the new key
    assert (t.step_ms.isna().to_numpy() == warm).all()         # each step timed exactly one way
    assert (t.warmup_ms.dropna() >= 250).all() and (t.step_ms.dropna() < 250).all()


def test_replay_and_live_time_differently(models):
    trunk, mtp = models
    arm = ArmConfig(num_drafts=2)
    t = Wave(LiveTarget(trunk), MTPProposer(trunk, mtp, arm.row_space, arm.refeed), arm,
             tiny_docs(n=2, turns=2, chunk=10), 8).run().steps.table().to_pandas()
    # batched: the wave's first step is both sequences' warm-up; the second turn's first verify is not
    assert t.warmup_ms.notna().sum() == 2 and (t[t.warmup_ms.notna()].step == 0).all()
    assert (t[t.warmup_ms.notna()].turn == 0).all() and t.step_ms.notna().sum() == len(t) - 2
