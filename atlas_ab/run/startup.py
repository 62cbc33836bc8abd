"""What a run's wall time went to, by phase: printed after the summary and kept in the manifest.

Phases, in seconds (each measured, none inferred from the others):
  - import: from the process's start (the kernel's record of it, /proc) to the engine's class
    loaded: the interpreter, Hydra's compose, torch and the package;
  - model: the engine built (weights on the device, the workload; replay: its trajectory found or
    built);
  - compile: calls of the step's compiled bookkeeping regions that compiled (runtime/fusion.py;
    a warm inductor cache makes them loads);
  - capture: the step graphs' capture, their warm-up runs included (runtime/graphs.py), less the
    compile inside them; our Triton kernels' first-call builds happen there too;
  - first_wave: the first wave's wall time (compile and capture included), waves: all of them;
  - live_check: of the waves, what a replay run's live check took (runner.replay_check_waves:
    the wave run live again and gated), 0 in a live run;
  - total: the process's start to the summary.
`caches`: where inductor's and Triton's caches were and how many files they held as the run began
(runtime/compile_cache.py; 0: a cold cache); `kernels_built`: the kernel binaries Triton's cache
gained from the engine's build to the summary (this run's first-call builds, inside capture and waves).
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Optional

PHASES = ("import", "model", "compile", "capture", "first_wave", "waves", "live_check", "total")


def since_process_start() -> Optional[float]:
    """Seconds since the kernel started this process (Linux /proc), else None."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return uptime - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _compile_and_capture() -> tuple[float, float]:
    """(compile, capture incl. compile) seconds so far in this process; zeros before torch is in."""
    import sys
    if "atlas_ab.runtime.graphs" not in sys.modules:
        return 0.0, 0.0
    from atlas_ab.runtime import fusion, graphs
    return fusion.compile_seconds(), graphs.capture_seconds()


def _kernels(caches: Optional[dict]) -> Optional[int]:
    """Kernel binaries in the run's Triton cache now; None when the run names no Triton cache."""
    d = ((caches or {}).get("TRITON_CACHE_DIR") or {}).get("dir")
    if not d:
        return None
    # the runtime package imports torch: only a run that named a cache (and so has torch) gets here
    from atlas_ab.runtime.compile_cache import kernels
    return kernels(d)


#: sessions started in this process (a sweep's jobs share one): only the first is charged its start
SESSIONS = [0]


class StartupClock:
    """Marks taken by the session as it goes: `imported()`, `built()`, `wave_done()` per wave,
    then `timings()`. Seconds from this process's start where /proc has it (else from the clock's),
    for the process's first session; a later job of a sweep in the same process counts from its own
    start (its imports are the earlier job's)."""

    def __init__(self, clock=time.perf_counter, process_age=since_process_start):
        self.clock = clock
        self.t0 = clock()
        first = SESSIONS[0] == 0
        SESSIONS[0] += 1
        self.age0 = (process_age() or 0.0) if first else 0.0    # the process's life before this clock began
        self.marks: dict[str, float] = {}
        self.first_wave: Optional[float] = None
        self.waves = 0.0
        self.live_check = 0.0
        self._cc0 = (0.0, 0.0)
        self.caches: Optional[dict] = None
        self._kernels0: Optional[int] = None

    def _now(self) -> float:
        return self.age0 + self.clock() - self.t0

    def imported(self) -> None:
        self.marks["import"] = self._now()

    def built(self, caches: Optional[dict] = None) -> None:
        self.marks["built"] = self._now()
        self.caches = caches
        self._cc0 = _compile_and_capture()
        self._kernels0 = _kernels(caches)

    def wave_done(self, seconds: float, live_check: float = 0.0) -> None:
        if self.first_wave is None:
            self.first_wave = seconds
        self.waves += seconds
        self.live_check += live_check

    def timings(self) -> dict:
        """The phases (PHASES) in seconds, rounded to ms; compile/capture counted from the engine's
        build on (a resumed run's stored waves did not run)."""
        comp, cap = (b - a for a, b in zip(self._cc0, _compile_and_capture()))
        imp = self.marks.get("import")
        built = self.marks.get("built")
        out = {"import": imp, "model": built - imp if built is not None and imp is not None else None,
               "compile": comp, "capture": max(cap - comp, 0.0), "first_wave": self.first_wave,
               "waves": self.waves, "live_check": self.live_check, "total": self._now()}
        t = {k: None if v is None else round(float(v), 3) for k, v in out.items()}
        if self.caches is not None:
            t["caches"] = self.caches
        if self._kernels0 is not None:
            t["kernels_built"] = max(_kernels(self.caches) - self._kernels0, 0)
        return t


def startup_line(t: dict) -> str:
    """One line of the phases, as `python -m atlas_ab` prints it after the summary."""
    def s(k):
        return "-" if t.get(k) is None else f"{t[k]:.1f}s"
    caches = t.get("caches") or {}
    warm = [v.get("files") for v in caches.values() if v.get("files") is not None]
    cache = "" if not warm else f"; caches {'cold' if not any(warm) else 'warm'}"
    if t.get("kernels_built"):
        cache += f", Triton built {t['kernels_built']} kernel{'s' if t['kernels_built'] != 1 else ''}"
    parts = [t.get(k) for k in ("import", "model", "waves")]
    rest = t["total"] - sum(parts) if t.get("total") is not None and None not in parts else None
    live = f", live check {s('live_check')}" if t.get("live_check") else ""     # replay's, when it ran
    return (f"time: total {s('total')}: import {s('import')}, model {s('model')}, waves {s('waves')} "
            f"(the first {s('first_wave')}; compile {s('compile')}, capture {s('capture')}"
            f"{live} in all), "
            f"the rest {'-' if rest is None else f'{rest:.1f}s'}{cache}")
