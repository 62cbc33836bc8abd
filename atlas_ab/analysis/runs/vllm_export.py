"""A run of ours, written as vLLM would have reported it: one JSON line per (doc_id, turn),
{"doc_id", "turn", "response": <a chat completion with metrics.speculative_decoding>}.

  vllm-detailed   summary + per_step_accepted / per_step_drafted (`--per-request-spec-decode-metrics detailed`)
  histogram       the summary only: acceptance_histogram and totals (`summary`)

As vLLM does, only verify steps (k >= 1) are recorded (vllm/v1/core/sched/scheduler.py observes a
step only when it carried drafts); a serial step still commits a token, so completion_tokens
counts it and the ingest sees that positions can no longer be reconstructed. usage.prompt_tokens
is the turn's first propose position (the prompt the engine saw, our conversation so far),
written only when the run has positions and they follow the committed tokens.
Useful to check that a study survives the engines' grain before running it on one.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from atlas_ab import AtlasError
from atlas_ab.analysis.runs.load import load_run

FORMATS = ("vllm-detailed", "histogram")


@dataclass(frozen=True)
class ExportResult:
    out: Path
    fmt: str
    requests: int
    steps: int
    positions: bool

    def summary(self) -> str:
        return (f"{self.out}: {self.requests:,} requests, {self.steps:,} verify steps as vLLM {self.fmt}"
                + ("" if self.positions else " (no usage.prompt_tokens: the run has no positions)"))

    __str__ = summary

    def to_dict(self) -> dict:
        return {"out": str(self.out), "format": self.fmt, "requests": self.requests, "steps": self.steps,
                "positions": self.positions}


def _commits(g, has_committed: bool) -> np.ndarray:
    if has_committed:
        return np.asarray([len(c) if c is not None else 1 + a
                           for c, a in zip(g["committed"], g["accept_len"])], np.int64)
    return 1 + g["accept_len"].to_numpy(np.int64)


def spec_object(k: np.ndarray, a: np.ndarray, K: int, detailed: bool) -> dict:
    """metrics.speculative_decoding as vLLM writes it (RequestSpecDecodeMetrics.to_dict)."""
    v = k >= 1
    kv, av = k[v].astype(int), a[v].astype(int)
    n, A, D = int(v.sum()), int(av.sum()), int(kv.sum())
    out = {"mean_acceptance_length": 1.0 + A / n if n else 1.0,
           "draft_acceptance_rate": A / D if D else 0.0,
           "acceptance_histogram": np.bincount(av, minlength=K + 1).astype(int).tolist(),
           "num_spec_steps": n, "num_accepted_draft_tokens": A, "num_draft_tokens": D, "num_spec_tokens": K}
    if detailed and n:
        out["per_step_accepted"] = av.tolist()
        out["per_step_drafted"] = kv.tolist()
    return out


def export(run_path, fmt: str, out, allow_incomplete: bool = False) -> ExportResult:
    if fmt not in FORMATS:
        raise AtlasError(f"unknown export format {fmt!r} (one of {', '.join(FORMATS)})")
    run = load_run(run_path, optional=("position", "committed"), allow_incomplete=allow_incomplete)
    df = run.steps.sort_values(["doc_id", "turn", "step"], kind="stable")
    has_pos, has_com = "position" in df.columns, "committed" in df.columns
    K = run.K
    lines, n_steps = [], 0
    for (doc, turn), g in df.groupby(["doc_id", "turn"], sort=True):
        k, a = g["k"].to_numpy(), g["accept_len"].to_numpy()
        commits = _commits(g, has_com)
        usage = {"completion_tokens": int(1 + commits.sum())}
        if has_pos:
            pos = g["position"].to_numpy(np.int64)
            bad = np.flatnonzero(pos[1:] != pos[:-1] + commits[:-1])
            if bad.size:
                s = int(g["step"].to_numpy()[bad[0] + 1])
                raise AtlasError(f"{run.path}: doc {doc} turn {turn} step {s}: position {pos[bad[0] + 1]} is not "
                                 f"the previous step's {pos[bad[0]]} + its {commits[bad[0]]} committed tokens, so an "
                                 "engine's prompt length + commits would not give it back")
            usage["prompt_tokens"] = int(pos[0])
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        spec = spec_object(k, a, K, fmt == "vllm-detailed")
        n_steps += spec["num_spec_steps"]
        response = {"id": f"atlas-{run.arm}-{doc}-{turn}", "object": "chat.completion", "model": run.arm,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": ""},
                                 "finish_reason": "length"}],
                    "usage": usage, "metrics": {"speculative_decoding": spec}}
        # the request as sent: greedy, n = 1, no structured output (so no step lost all its drafts)
        request = {"model": run.arm, "temperature": 0, "n": 1}
        lines.append(json.dumps({"doc_id": int(doc), "turn": int(turn), "request": request, "response": response}))
    out = Path(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text("\n".join(lines) + "\n")
        os.replace(tmp, out)
    except OSError as e:
        raise AtlasError(f"cannot write {out}: {e.strerror or e}") from None
    return ExportResult(out, fmt, len(lines), n_steps, has_pos)
