"""The run directories a command line names: a sweep's directory stands for its jobs' runs."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from atlas_ab import AtlasError


def is_run(path: Path) -> bool:
    return (path / "manifest.json").is_file() or (path / "steps").is_dir()


def _jobs(sweep: Path) -> list[Path]:
    return sorted((d for d in sweep.iterdir() if d.is_dir() and is_run(d)), key=lambda d: (len(d.name), d.name))


def expand(paths, warn: Callable[[str], None]) -> list[Path]:
    """The run directories named: a sweep's directory stands for its jobs' runs, a directory of sweeps
    (a ladder's replicates, one sweep a process: scripts/gpu.sh ladder) for all their jobs' runs, and
    what a shell glob over a sweep also matches (multirun.yaml, the locked prereg/ copies) is skipped
    with a note (`warn`). A path that does not exist stays, so that loading it names it."""
    out = []
    for given in map(Path, paths):
        if given.is_dir() and not is_run(given):
            jobs = _jobs(given) or [j for d in sorted(given.iterdir()) if d.is_dir() for j in _jobs(d)]
            if jobs:
                out += jobs
                continue
        if given.exists() and not (given.is_dir() and is_run(given)):
            warn(f"skipped {given}: not a run directory")
            continue
        out.append(given)
    if not out:
        raise AtlasError(f"no run directory among {', '.join(map(str, paths))}")
    return out
