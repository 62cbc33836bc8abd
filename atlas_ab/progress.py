"""Progress: a tqdm bar over documents with steps, tokens/s and the running p1.

Quiet when stderr is not a TTY (sweeps, CI, log files) or runner.progress=false;
the per-wave lines always go to the run's log (run.log) through `logging`.
"""
from __future__ import annotations

import logging
import sys
import time
from typing import Optional

log = logging.getLogger("atlas_ab")


class Progress:
    def __init__(self, total_docs: int, done_docs: int = 0, enabled: bool = True, desc: str = "",
                 stream=None):
        stream = sys.stderr if stream is None else stream
        self.enabled = bool(enabled) and hasattr(stream, "isatty") and stream.isatty()
        self.t0 = time.perf_counter()
        self.tokens = 0            # committed tokens, completed waves (this invocation)
        self.steps = 0             # batched steps, completed waves (this invocation)
        self.k_ge1 = 0             # rows with k >= 1 over completed waves (for p1)
        self.acc_ge1 = 0
        self._wave_tokens = 0
        self._wave_steps = 0
        self._live_k = self._live_a = 0   # p1 counts of the current wave (loop callback form)
        self.bar = None
        if self.enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=total_docs, initial=done_docs, unit="doc", desc=desc or None,
                            file=stream, dynamic_ncols=True, leave=True)

    def _postfix(self, p1: Optional[float]) -> None:
        if self.bar is None:
            return
        dt = max(time.perf_counter() - self.t0, 1e-9)
        tok = self.tokens + self._wave_tokens
        fields = {"tok/s": f"{tok / dt:.1f}"}
        if p1 is not None:
            fields["p1"] = f"{p1:.3f}"
        self.bar.set_postfix(fields, refresh=False)
        self.bar.refresh()

    def on_step(self, *args) -> None:
        """The runner's per-batched-step callback. Two forms are accepted:

        * (n_steps_done_in_wave, n_tokens_committed_in_wave, p1_running) -- the documented API;
        * (n_active, n_committed_this_step, accept_len[active], gated[active]) -- what
          atlas_ab.loop.Wave calls (per-step increments; p1 counted over non-gated rows).
        """
        if len(args) == 4:
            n_active, n_tok, acc, gated = args
            self._wave_steps += 1
            self._wave_tokens += int(n_tok)
            try:
                import numpy as np

                acc, gated = np.asarray(acc), np.asarray(gated, dtype=bool)
                self._live_k += int((~gated).sum())
                self._live_a += int(((acc >= 1) & ~gated).sum())
            except Exception:  # noqa: BLE001 -- progress must never break a run
                pass
            k = self.k_ge1 + self._live_k
            p1 = (self.acc_ge1 + self._live_a) / k if k else None
        else:
            n_steps, n_tok, p1 = (list(args) + [None, None, None])[:3]
            self._wave_steps, self._wave_tokens = int(n_steps or 0), int(n_tok or 0)
        self._postfix(p1)

    def wave_done(self, wave: int, n_docs: int, n_tokens: int, steps_table, seconds: float) -> None:
        self.tokens += int(n_tokens)
        self._wave_tokens = self._wave_steps = self._live_k = self._live_a = 0
        p1 = None
        try:
            k = steps_table.column("k").to_numpy()
            a = steps_table.column("accept_len").to_numpy()
            self.k_ge1 += int((k >= 1).sum())
            self.acc_ge1 += int(((a >= 1) & (k >= 1)).sum())
            self.steps += int(steps_table.num_rows)
            p1 = self.acc_ge1 / self.k_ge1 if self.k_ge1 else None
        except Exception:  # noqa: BLE001 -- progress must never break a run
            pass
        log.info("wave %d: %d docs, %d step rows, %d tokens in %.2fs%s", wave, n_docs,
                 steps_table.num_rows, n_tokens, seconds, "" if p1 is None else f", running p1 {p1:.4f}")
        if self.bar is not None:
            self.bar.update(n_docs)
            self._postfix(p1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class ConsoleFilter(logging.Filter):
    """On the console handler of Hydra's job logging: drop records marked `console=False`.

    The one-line error the entry point prints is the console's copy of a failure;
    the log record of it (with context) goes to run.log only.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return getattr(record, "console", True)
