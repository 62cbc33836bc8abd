"""The run-ahead's launches from a helper thread (speculative/launcher.py), driven on the CPU by
launch functions of the test's own: order, a halt part-way, an error, the GIL's switch interval."""
import sys
import threading
import time

import pytest

from atlas_ab.speculative.launcher import SWITCH_INTERVAL_S, Launches


class Event:
    def __init__(self, m):
        self.m, self.waited = m, False

    def synchronize(self):
        self.waited = True


def launches(M, threaded, log=None, fail_at=None):
    def launch(m):
        if m == fail_at:
            raise RuntimeError(f"launch {m} failed")
        if log is not None:
            log.append((m, threading.current_thread() is threading.main_thread()))
        time.sleep(0.001)
        return Event(m)
    return Launches(launch, M, threaded)


@pytest.mark.parametrize("threaded", [False, True])
def test_the_events_come_in_launch_order_and_the_last_is_waited_for(threaded):
    log, before = [], sys.getswitchinterval()
    ready = launches(6, threaded, log)
    got = [e.m for e in ready]
    ready.wait_all()
    assert got == list(range(6)) and [m for m, _ in log] == list(range(6))
    assert all(on_main != threaded for _, on_main in log)          # made on the helper thread iff threaded
    assert ready._events[-1].waited and not ready._events[0].waited
    assert sys.getswitchinterval() == before


def test_the_switch_interval_is_short_while_the_thread_runs():
    before = sys.getswitchinterval()
    ready = launches(3, True)
    assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL_S)
    list(ready)
    ready.wait_all()
    assert sys.getswitchinterval() == before


def test_a_halt_part_way_waits_for_every_launch():
    """A replay that stops early (a halted chunk) still waits for the last step launched."""
    ready = launches(8, True)
    for e in ready:
        if e.m == 2:
            break
    ready.wait_all()
    assert [e.m for e in ready._events] == list(range(8)) and ready._events[-1].waited


def test_a_launch_error_is_raised_in_the_callers_thread():
    before = sys.getswitchinterval()
    ready = launches(5, True, fail_at=3)
    with pytest.raises(RuntimeError, match="launch 3 failed"):
        for _ in ready:
            pass
    assert sys.getswitchinterval() == before
