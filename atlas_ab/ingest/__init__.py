"""Engine telemetry in: what vLLM, SGLang, TensorRT-LLM, llama.cpp (and the reference engine)
emit, written into the telemetry contract at the finest grain each allows, with the grain
and what it makes exact recorded in the manifest (`telemetry`, see telemetry/grain.py).

  ingest(source, files, out) -> IngestResult      python -m atlas_ab.analysis ingest SOURCE FILE... --out RUN

Only reads engine files and writes the telemetry contract (steps/, counts/, events/ and the
manifest's `telemetry`): the analysis reads those like any run (analysis/runs/unit_runs.py); ours out as
vLLM's is analysis/runs/vllm_export.py. Torch-free, and it imports nothing of the analysis.
"""
from __future__ import annotations

import hashlib
import importlib
from dataclasses import dataclass
from pathlib import Path

from atlas_ab import AtlasError
from atlas_ab.telemetry.grain import Telemetry

#: The sources, by the name `ingest SOURCE` takes: each module exposes `units(paths, **options)`
#: -> (units, format, notes) and may name the options it takes in `OPTIONS` (the reference engine's log is
#: fingerprint events: its module exposes `events(paths)` instead). Registered by module path,
#: imported on use, as lm-evaluation-harness registers its model backends.
SOURCES = {
    "vllm": "atlas_ab.ingest.vllm",
    "sglang": "atlas_ab.ingest.sglang",
    "trtllm": "atlas_ab.ingest.trtllm",
    "llamacpp": "atlas_ab.ingest.llamacpp",
    "prometheus": "atlas_ab.ingest.prometheus",
    "atlas-log": "atlas_ab.ingest.atlas_log",
}


def source_module(source: str):
    if source not in SOURCES:
        raise AtlasError(f"unknown source {source!r} (one of {', '.join(SOURCES)})")
    return importlib.import_module(SOURCES[source])


@dataclass(frozen=True)
class IngestResult:
    out: Path
    arm: str
    telemetry: Telemetry
    units: int          # requests (or counter deltas) read
    dropped: int        # requests without a verify step (missing, not rate 0)
    steps: int          # step rows written (0: no step table)
    K: int
    warnings: tuple[str, ...] = ()   # one line per run: the unknown fields ignored

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


def ignored_markdown() -> str:
    """The docs' table of the names each source knows and does not read (docs/ingest.md; checked by a test)."""
    rows = ["| source | field or metric name | why it is not read |", "|---|---|---|"]
    for name in SOURCES:
        rows += [f"| `{name}` | `{f}` | {why} |" for f, why in getattr(source_module(name), "IGNORED", {}).items()]
    return "\n".join(rows)


def source_units(source: str, paths, **options):
    """(units, format, notes) of one source's files."""
    mod = source_module(source)
    takes = getattr(mod, "OPTIONS", ())
    for name, value in options.items():
        if value is not None and name not in takes:
            users = [s for s in SOURCES if name in getattr(importlib.import_module(SOURCES[s]), "OPTIONS", ())]
            raise AtlasError(f"--{name} applies to {', '.join(users) or 'no source'} only, not to {source}")
    return mod.units(paths, **{k: v for k, v in options.items() if k in takes})


def ignored_fields(units, strict: bool) -> tuple[dict[str, str], tuple[str, ...]]:
    """What the readers saw and did not use (field -> why), and the warning for unknown ones;
    with `strict` the first unknown field is an error naming where it was."""
    from atlas_ab.ingest.engine_units import UNKNOWN

    ignored, unknown = {}, {}
    for u in units:
        for name, why in u.ignored.items():
            ignored.setdefault(name, why)
            if why == UNKNOWN:
                unknown.setdefault(name, u.where)
    if strict and unknown:
        name, where = next(iter(unknown.items()))
        raise where.error("unknown field (--strict refuses what this reader does not know)", name)
    warn = (f"ignored {len(unknown)} unknown field(s): {', '.join(sorted(unknown))} (first in "
            f"{next(iter(unknown.values())).file}; noted in the manifest's telemetry.ignored; "
            "--strict refuses them)",) if unknown else ()
    return dict(sorted(ignored.items())), warn


def file_hashes(paths) -> list[dict]:
    out = []
    for p in map(Path, paths):
        try:
            out.append({"path": str(p), "sha256": "sha256:" + hashlib.sha256(p.read_bytes()).hexdigest()})
        except OSError as e:
            raise AtlasError(f"{p}: unreadable ({e.strerror or e})") from None
    return out


def ingest(source: str, paths, out, arm: str | None = None, k: int | None = None, base: dict | None = None,
           own_running: bool = False, strict: bool = False) -> IngestResult:
    """Read one source's files and write the run directory `out`."""
    from atlas_ab.ingest.completion_hash import REQUEST_SOURCES, completion_hashes
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
    mod = source_module(source)
    if hasattr(mod, "events"):
        if k is not None:
            raise AtlasError(f"--k applies to sglang only, not to {source}")
        table, tel = mod.events(paths)
        write_run(out, tel, arm, events=table, base=base, own_running=own_running)
        return IngestResult(out, arm, tel, 0, 0, 0, 0)
    units, fmt, notes = source_units(source, paths, k=k)
    ignored, warnings = ignored_fields(units, strict)
    t = build(units, source if source != "prometheus" else fmt.split()[0], fmt, notes)
    # say where the counters came from (keep the engine's name in `format`), and what was not read
    tel = Telemetry(**{**t.telemetry.__dict__, "source": source, "ignored": ignored})
    steps = steps_table(t.steps) if t.steps is not None else None
    counts = t.counts
    if source in REQUEST_SOURCES:   # each request's text, hashed: pairing checks the arms decoded the same
        texts = completion_hashes(paths)
        counts = counts.assign(completion_sha256=[texts.get((d, tn))
                                                  for d, tn in zip(counts["doc_id"], counts["turn"])])
    write_run(out, tel, arm, steps=steps, counts=counts_table(counts), base=base, own_running=own_running)
    K = int(t.steps["k"].max()) if t.steps is not None else max((u.K or 0) for u in units)
    return IngestResult(out, arm, tel, len(units) - len(t.dropped), len(t.dropped),
                        0 if steps is None else steps.num_rows, K, warnings)
