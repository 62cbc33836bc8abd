"""The lossless gate's outcome in words, shared by the gate (speculative/lossless_gate.py) and the run's
store (run/store.py). Torch-free: the store and the engine contract import it."""
from __future__ import annotations


def status_of(passed: bool | None, checked_sequences: int) -> str:
    """passed | failed | not run (a gate that checked nothing never reads as passed)."""
    if not checked_sequences or passed is None:
        return "not run"
    return "passed" if passed else "failed"
