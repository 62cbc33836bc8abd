"""Which code produced each run, and the refusal to compare arms that ran different code.

Our own runs record `code.hash` (run/provenance.py: a sha256 over the package's sources,
configs and pre-registrations) and the git commit where the tree was this project's clean
checkout. Two arms are comparable only when they ran the same code: a difference of hashes,
or a run without one (made before code hashes were recorded: unknown code), is refused
unless `--allow-mismatch`, which then states it at the top of the output.

Engine runs (an ingested `telemetry` section) and external runs (no manifest) ran code that
is not ours: an engine A/B may be two builds on purpose, so their code is shown (engine name
and version where the collector recorded them) but not checked.

Torch-free, like the analysis; `Run` and ingest's `CountsRun` both serve (path, arm, manifest).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from atlas_ab import AtlasError

ALLOW = " (pass --allow-mismatch to compare anyway)"


@dataclass(frozen=True)
class CodeOf:
    """One run's code: ours (hash, commit; hash None = unknown) or another program's."""

    path: Path
    arm: str
    ours: bool
    hash: str | None = None
    commit: str | None = None
    other: str | None = None     # what ran instead of ours (engine name and version, "no manifest")

    @property
    def short(self) -> str:
        if not self.ours:
            return self.other or "not ours"
        if self.hash is None:
            return "unknown (no code.hash: made before code hashes were recorded)"
        return self.hash[:19] + (f" (commit {self.commit[:10]})" if self.commit else "")

    def to_dict(self) -> dict:
        return {"path": str(self.path), "ours": self.ours, "hash": self.hash, "commit": self.commit,
                "other": self.other}


def code_of(run) -> CodeOf:
    m = run.manifest
    if m is None:
        return CodeOf(Path(run.path), run.arm, False, other="external run (no manifest)")
    if m.get("telemetry") is not None:
        e = m.get("engine") or {}
        what = " ".join(str(x) for x in (e.get("name"), e.get("version")) if x) or \
            (m.get("telemetry") or {}).get("source") or "an engine"
        return CodeOf(Path(run.path), run.arm, False, other=f"engine {what} (not our code: unchecked)")
    c = m.get("code") or {}
    return CodeOf(Path(run.path), run.arm, True, c.get("hash"), c.get("commit"))


def code_mismatches(runs) -> list[str]:
    """One line per reason our runs cannot be shown to have run the same code (empty: they did)."""
    ours = [code_of(r) for r in runs]
    ours = [c for c in ours if c.ours]
    if len(ours) < 2:
        return []
    unknown = [c for c in ours if c.hash is None]
    out = []
    if len(unknown) == 1:
        out.append(f"{unknown[0].path}: unknown code (its manifest has no code.hash: a run made before code hashes "
                   "were recorded), so nothing shows it ran the same code as the other arm(s)")
    elif unknown:           # one line for many (a sweep of old runs)
        named = ", ".join(str(c.path) for c in unknown[:3]) + (f" and {len(unknown) - 3} more" if len(unknown) > 3
                                                                 else "")
        out.append(f"{len(unknown)} runs of unknown code (their manifests have no code.hash: runs made before code "
                   f"hashes were recorded: {named}), so nothing shows they ran the same code")
    known = [c for c in ours if c.hash is not None]
    if len({c.hash for c in known}) > 1:
        out.append("the arms ran different code: " + ", ".join(f"{c.arm}={c.hash[:19]}" for c in known))
    return out


def check_code(runs, allow_mismatch: bool) -> list[str]:
    """Refuse our runs of different or unknown code unless allowed; returns the lines to state."""
    lines = code_mismatches(runs)
    if lines and not allow_mismatch:
        raise AtlasError(lines[0] + ALLOW)
    return lines


def code_header(runs) -> str:
    """The line every comparison prints first: each arm's code."""
    return "code: " + "; ".join(f"{c.arm} {c.short}" for c in map(code_of, runs))


def warning_lines(mismatches=()) -> list[str]:
    """What a comparison prints first: a WARNING per mismatch it compared anyway."""
    return [f"WARNING: {m} (compared anyway: --allow-mismatch)" for m in mismatches]


def top_lines(runs, mismatches=()) -> str:
    """The warnings, then each arm's code."""
    return "\n".join(warning_lines(mismatches) + [code_header(runs)])


def code_json(runs) -> list[dict]:
    return [{"arm": c.arm, **c.to_dict()} for c in map(code_of, runs)]
