"""A test double of atlas_ab.run.runner.Runner (same API), for the front end's store/resume/CLI tests.

Deterministic: every row is a function of (doc_id, turn, step, levers, seed),
so an interrupted-and-resumed run must reproduce an uninterrupted one exactly.
Select it with `runner.engine._target_=tests.helpers.fakerunner.FakeRunner` (the repo root on
PYTHONPATH). Failure knobs (environment, read at run_wave time):
  FAKE_RUNNER_CRASH_AT=i   raise RuntimeError in wave i
  FAKE_RUNNER_KILL_AT=i    os.kill(self, SIGKILL) at the start of wave i (a hard kill)
  FAKE_RUNNER_SLEEP=s      sleep s seconds per wave
  FAKE_RUNNER_GATE_FAIL=i  wave i reports a divergence at a clear margin
  FAKE_RUNNER_REFEED_LIFT=1  a refeed arm accepts one more draft where it can (a clear effect, for
                           the sequential studies' tests)
"""
from __future__ import annotations

import hashlib
import os
import signal
import time
import zlib
from dataclasses import asdict
from pathlib import Path

import pyarrow as pa

from atlas_ab import AtlasError
from atlas_ab.config.structured import gate_sequences_for
from atlas_ab.run.engine import RunInfo, WaveResult
from atlas_ab.telemetry.schema import EVENT_SCHEMA, step_type


def _h(*parts) -> int:
    return zlib.crc32(repr(parts).encode())


class FakeRunner:
    def __init__(self, arm, model, workload, runner):
        self.arm, self.model, self.workload, self.rc = arm, model, workload, runner
        if model.init == "checkpoint":
            p = Path(model.path or "")
            if not p.is_dir():
                raise AtlasError(f"checkpoint {model.path}: not found")
            if (p / "CORRUPT").exists():
                raise AtlasError(f"checkpoint {model.path}: corrupt (bad safetensors header)")
        n, bw = workload.n_docs, runner.batch_width
        self.waves = [list(range(i, min(i + bw, n))) for i in range(0, n, bw)]
        wl = hashlib.sha256(repr(sorted(asdict(workload).items())).encode()).hexdigest()
        self.info = RunInfo(
            model={"name": model.name, "path": model.path, "hash": "sha256:" + "0" * 64,
                   "tokenizer_hash": "sha256:" + "1" * 64},
            workload={"hash": "sha256:" + wl, "corpus_hash": "sha256:" + "2" * 64,
                      "n_docs": workload.n_docs, "turns": workload.turns},
            device=runner.device, dtype="float32" if runner.dtype == "auto" else runner.dtype,
            row_space=arm.row_space, proposer=arm.proposer,
            levers={**{k: getattr(arm, k) for k in arm.__dataclass_fields__}, "fingerprints": arm.fingerprints_on})

    def _lever_key(self):
        a = self.arm
        return (a.num_drafts, a.catchup, a.refeed, a.refeed_shift, a.draft_conf, a.drafter_prefill)

    def run_wave(self, i: int, on_step=None) -> WaveResult:
        if os.environ.get("FAKE_RUNNER_KILL_AT") == str(i):
            os.kill(os.getpid(), signal.SIGKILL)
        if os.environ.get("FAKE_RUNNER_CRASH_AT") == str(i):
            raise RuntimeError(f"fake crash in wave {i}")
        time.sleep(float(os.environ.get("FAKE_RUNNER_SLEEP", "0")))
        K = self.arm.num_drafts
        cols = {c: [] for c in ("doc_id", "turn", "step", "k", "accept_len", "arm", "seq", "position",
                                "committed", "step_ms")}
        ev = {c: [] for c in ("doc_id", "turn", "step", "seq", "order", "kind", "label", "key", "rope",
                              "slot", "position", "fp", "fp2")}
        tokens = 0
        for seq, doc in enumerate(self.waves[i]):
            for turn in range(self.workload.turns):
                pos, made, step = 100 * turn, 0, 0
                while made < self.workload.gen_tokens:
                    r = _h(doc, turn, step, self._lever_key(), self.workload.seed, self.rc.seed)
                    k = 0 if r % 11 == 0 else K
                    a = 0 if k == 0 else min(k, (r >> 4) % (k + 2))
                    if self.arm.refeed and os.environ.get("FAKE_RUNNER_REFEED_LIFT") == "1":
                        a = min(k, a + 1)
                    n = min(1 + a, self.workload.gen_tokens - made)
                    for c, v in (("doc_id", doc), ("turn", turn), ("step", step), ("k", k), ("accept_len", a),
                                 ("arm", self.arm.name), ("seq", seq), ("position", pos),
                                 ("committed", [r % 4096] * n), ("step_ms", float(r % 7))):
                        cols[c].append(v)
                    if self.arm.fingerprints_on:
                        for c, v in (("doc_id", doc), ("turn", turn), ("step", step), ("seq", seq),
                                     ("order", len(ev["order"])), ("kind", "propose"), ("label", -1),
                                     ("key", -1), ("rope", -1), ("slot", -1), ("position", pos),
                                     ("fp", r), ("fp2", None)):
                            ev[c].append(v)
                    made += n
                    pos += n
                    tokens += n
                    step += 1
                    if on_step is not None:
                        on_step(n, [k], [a])
        steps_t = pa.table({c: pa.array(v, step_type(c)) for c, v in cols.items()})
        events_t = None
        if self.arm.fingerprints_on:
            events_t = pa.table({c: pa.array(v, EVENT_SCHEMA.field(c).type) for c, v in ev.items()})
        n_gate = min(gate_sequences_for(self.rc, "cpu"), len(self.waves[i]))
        gate = {"checked_sequences": n_gate, "divergences": 0, "passed": True if n_gate else None,
                "margins": [0.5] * n_gate, "first_divergence": None}
        if os.environ.get("FAKE_RUNNER_GATE_FAIL") == str(i):
            gate.update(divergences=1, passed=False, first_divergence={
                "doc_id": self.waves[i][0], "turn": 0, "token": 3, "speculative": 7, "target_only": 9,
                "margin": 2.5, "near_tie": False})
        return WaveResult(steps_t, events_t, gate, tokens)

