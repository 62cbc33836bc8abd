"""Engine telemetry in: what vLLM, SGLang, TensorRT-LLM, llama.cpp (and the seeds' engine)
emit, written into the telemetry contract at the finest grain each allows, with the grain
and what it makes exact recorded in the manifest (`telemetry`, see grain.py).

  ingest(source, files, out) -> IngestResult      python -m atlas_ab.analysis ingest SOURCE FILE... --out RUN
  export(run, fmt, out)                           python -m atlas_ab.analysis export vllm-detailed|histogram RUN
  counts.load_counts / counts.report              the analysis of runs without a step table

Torch-free, like the analysis.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from atlas_ab import AtlasError
from atlas_ab.ingest.grain import Telemetry

SOURCES = ("vllm", "sglang", "trtllm", "llamacpp", "prometheus", "atlas-log")


@dataclass(frozen=True)
class IngestResult:
    out: Path
    arm: str
    telemetry: Telemetry
    units: int          # requests (or counter deltas) read
    dropped: int        # requests without a verify step (missing, not rate 0)
    steps: int          # step rows written (0: no step table)
    K: int

    def summary(self) -> str:
        t = self.telemetry
        head = (f"{self.out}: arm {self.arm}, {self.units:,} {'unit' if t.grain == 'counters' else 'request'}(s)"
                + (f" ({self.dropped:,} without a verify step: missing)" if self.dropped else "")
                + (f", {self.steps:,} step rows, K={self.K}" if self.steps else ", no step table"))
        if t.grain == "events":
            head = f"{self.out}: arm {self.arm}, events only"
        return head + "\n" + t.summary()

    __str__ = summary

    def to_dict(self) -> dict:
        return {"out": str(self.out), "arm": self.arm, "units": self.units, "dropped": self.dropped,
                "steps": self.steps, "K": self.K, "telemetry": self.telemetry.to_dict()}


def source_units(source: str, paths, k: int | None = None):
    """(units, format, notes) of one source's files."""
    if k is not None and source != "sglang":
        raise AtlasError(f"--k applies to sglang tree drafting only, not to {source}")
    if source == "vllm":
        from atlas_ab.ingest import vllm as mod
    elif source == "sglang":
        from atlas_ab.ingest import sglang as mod
        return mod.units(paths, k)
    elif source == "trtllm":
        from atlas_ab.ingest import trtllm as mod
    elif source == "llamacpp":
        from atlas_ab.ingest import llamacpp as mod
    elif source == "prometheus":
        from atlas_ab.ingest import prometheus as mod
    else:
        raise AtlasError(f"unknown source {source!r} (one of {', '.join(SOURCES)})")
    return mod.units(paths)


def file_hashes(paths) -> list[dict]:
    out = []
    for p in map(Path, paths):
        try:
            out.append({"path": str(p), "sha256": "sha256:" + hashlib.sha256(p.read_bytes()).hexdigest()})
        except OSError as e:
            raise AtlasError(f"{p}: unreadable ({e.strerror or e})") from None
    return out


def ingest(source: str, paths, out, arm: str | None = None, k: int | None = None, base: dict | None = None,
           own_running: bool = False) -> IngestResult:
    """Read one source's files and write the run directory `out`."""
    from atlas_ab.ingest.completions import REQUEST_SOURCES, completion_hashes
    from atlas_ab.ingest.tables import build, counts_table, steps_table
    from atlas_ab.ingest.write import check_out, write_run

    paths = [Path(p) for p in paths]
    if not paths:
        raise AtlasError("ingest needs at least one file")
    for p in paths:
        if not p.is_file():
            raise AtlasError(f"{p}: no such file")
    out = Path(out)
    check_out(out, own_running, create=False)  # nothing is created before the files have been read
    arm = arm or out.resolve().name
    base = dict(base or {})
    base.setdefault("source", {})
    base["source"] = {**base["source"], "files": file_hashes(paths)}
    if source == "atlas-log":
        from atlas_ab.ingest.atlas_log import events

        table, tel = events(paths)
        write_run(out, tel, arm, events=table, base=base, own_running=own_running)
        return IngestResult(out, arm, tel, 0, 0, 0, 0)
    units, fmt, notes = source_units(source, paths, k)
    t = build(units, source if source != "prometheus" else fmt.split()[0], fmt, notes)
    tel = t.telemetry
    if source == "prometheus":  # say where the counters came from, keep the engine's name in `format`
        tel = Telemetry(**{**tel.__dict__, "source": "prometheus"})
    steps = steps_table(t.steps) if t.steps is not None else None
    counts = t.counts
    if source in REQUEST_SOURCES:   # each request's text, hashed: pairing checks the arms decoded the same
        texts = completion_hashes(paths)
        counts = counts.assign(completion_sha256=[texts.get((d, tn)) for d, tn in zip(counts["doc_id"], counts["turn"])])
    write_run(out, tel, arm, steps=steps, counts=counts_table(counts), base=base, own_running=own_running)
    K = int(t.steps["k"].max()) if t.steps is not None else max((u.K or 0) for u in units)
    return IngestResult(out, arm, tel, len(units) - len(t.dropped), len(t.dropped),
                        0 if steps is None else steps.num_rows, K)
