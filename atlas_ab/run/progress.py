"""Progress: a tqdm bar over committed tokens (the run's known total) with an ETA, and the running
acceptance figures, by the definitions the analysis uses too (`telemetry/acceptance.py`).

Tokens, not documents: a wave verifies all its documents together, so a count of documents
sits at 0 until the wave ends; every step commits tokens. After a resume the bar starts at
the stored waves' tokens and the running figures include their steps.
Quiet when stderr is not a TTY (sweeps, CI, log files) or runner.progress=false; the
per-wave lines always go to the run's log (run.log) through `logging`.
"""
from __future__ import annotations

import logging
import sys
import time

import numpy as np

from atlas_ab.telemetry.acceptance import histogram_rates

log = logging.getLogger("atlas_ab")

_MAX_K = 8     # the lever table's upper bound on K


class Progress:
    def __init__(self, total_tokens: int, done_tokens: int = 0, stored=None, enabled: bool = True,
                 desc: str = "", stream=None):
        stream = sys.stderr if stream is None else stream
        self.enabled = bool(enabled) and hasattr(stream, "isatty") and stream.isatty()
        self.t0 = time.perf_counter()
        # [k, accept_len] step counts: the running figures' sufficient statistic
        self.hist = np.zeros((_MAX_K + 1, _MAX_K + 1), dtype=np.int64)
        if stored is not None and stored.num_rows:
            np.add.at(self.hist, (stored.column("k").to_numpy(), stored.column("accept_len").to_numpy()), 1)
        self.bar = None
        if self.enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=total_tokens, initial=done_tokens, unit="tok", desc=desc or None,
                            file=stream, dynamic_ncols=True, leave=True, smoothing=0.1)

    def figures(self) -> dict:
        return histogram_rates(self.hist)

    def _postfix(self) -> None:
        if self.bar is None:
            return
        r = self.figures()
        fields = {k: f"{r[k]:.3f}" for k in ("p1", "p2_uncond") if r.get(k) == r.get(k) and k in r}
        self.bar.set_postfix(fields, refresh=False)

    def on_step(self, n_tokens: int, k, accept_len) -> None:
        """The loop's per-batched-step callback (engine.OnStep): tokens committed, and each row's k and accept_len."""
        np.add.at(self.hist, (np.asarray(k), np.asarray(accept_len)), 1)
        if self.bar is not None:
            self.bar.update(int(n_tokens))
            if self.bar.n >= self.bar.total or time.perf_counter() - self.bar.last_print_t > 0.5:
                self._postfix()

    def wave_done(self, wave: int, n_docs: int, n_tokens: int, steps_table, seconds: float) -> None:
        r = self.figures()
        p1 = r.get("p1")
        log.info("wave %d: %d docs, %d step rows, %d tokens in %.2fs%s", wave, n_docs,
                 steps_table.num_rows, n_tokens, seconds, "" if p1 is None or p1 != p1 else f", running p1 {p1:.4f}")
        self._postfix()

    def close(self) -> None:
        if self.bar is not None:
            self._postfix()
            self.bar.close()


class ConsoleFilter(logging.Filter):
    """On the console handler of Hydra's job logging: drop records marked `console=False`.

    The one-line error the entry point prints is the console's copy of a failure;
    the log record of it (with context) goes to run.log only.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return getattr(record, "console", True)
