"""The step probe: what a wave lets watch its steps, called at fixed points and doing nothing here.

The wave (loop.py), the device step (step.py) and the run-ahead (run_ahead.py) call one probe at
the points below and know nothing of what it records. `StepProbe` is the default and does nothing,
launching no kernel (so the captured step is the same with or without it); FINGERPRINTS' recorder
(step_events.py) is the probe that records. Shapes: step.py's vocabulary.

  the wave, on the host
    context       a turn's DRAFTER_PREFILL rows were written (`RowsWritten`, None: none)
    ring_prefill  RING_PREFILL rang the prefill's last hidden
    feed          CATCHUP's rows were planned
    planned       a step was planned (its propose's rows are as the step will read them)
    read          a step the host ran was read, before its commit
    committed     that step was committed (its ring writes booked)
    booked        the probe a run-ahead step booked from its chunk's read calls read and committed on
    chunk         a run-ahead chunk was booked
    flush         the last step's records are due
  the device step, inside its graph
    propose       after the catch-up rows: returns what it took of the propose (None: nothing)
    read_columns  the read's columns for what it took (None: none)
    verify        the read is packed: fills those columns
    join          the step's path waits for the probe's side work
  the run-ahead, inside its graph
    ahead_columns columns of the run-ahead's output the probe lays its records out from
"""
from __future__ import annotations


class StepProbe:
    """The probe that watches nothing: every point a no-op, on the host and in the graph."""
    #: the wave's event log (telemetry/events.py), None: no events
    log = None

    @property
    def allows_run_ahead(self) -> bool:
        """Whether a wave may run its steps ahead of the host (a probe reading rows on the host as
        each step leaves them may not)."""
        return True

    # -- the wave (host)
    def context(self, written, turn: int) -> None:
        pass

    def ring_prefill(self, label, rows, dst, turn: int) -> None:
        pass

    def feed(self, rows, turn: int, step_no, step: int | None = None) -> None:
        pass

    def planned(self, active, n, step_no, turn: int) -> None:
        pass

    def read(self, h, active, n, step_no, turn: int) -> None:
        pass

    def committed(self, h, written, vh, step_no, turn: int) -> None:
        pass

    def booked(self) -> "StepProbe":
        return self

    def chunk(self, turn: int, steps: list, ahead) -> None:
        pass

    def flush(self) -> None:
        pass

    # -- the device step and the run-ahead (inside a captured graph: no kernel here)
    def propose(self, n, fed):
        return None

    def read_columns(self, taken):
        return None

    def verify(self, taken, packed, read_layout, vh, slot) -> None:
        pass

    def join(self) -> None:
        pass

    def ahead_columns(self, n, ar) -> list:
        return []


#: the probe of a wave that watches nothing
NO_PROBE = StepProbe()
