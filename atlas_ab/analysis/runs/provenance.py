"""Whether runs measured one thing: the same workload and model (their manifests' hashes), and
never a run against itself."""
from __future__ import annotations

from atlas_ab import AtlasError
from atlas_ab.analysis.runs.base import AnyRun


def check_distinct(runs: list[Run]) -> None:
    """Refuse a comparison of a run with itself: the same directory, or two holding the same shards."""
    for i, a in enumerate(runs):
        for b in runs[i + 1:]:
            if a.path.resolve() == b.path.resolve():
                raise AtlasError(f"{a.path} is given twice: a comparison needs two different runs")
            sha_a = [(s.get("sha256") or {}).get("steps") for s in (a.manifest or {}).get("shards") or []]
            sha_b = [(s.get("sha256") or {}).get("steps") for s in (b.manifest or {}).get("shards") or []]
            if sha_a and None not in sha_a and sha_a == sha_b:
                raise AtlasError(f"{a.path} and {b.path} hold the same step shards (equal sha256): "
                                 "a comparison needs two different runs")


def provenance_mismatches(runs: list[Run]) -> list[str]:
    """Lines describing any workload.hash / model.hash difference between runs.

    A run without a hash (external telemetry, no manifest) cannot be checked and is
    not counted as a mismatch; see unchecked_provenance."""
    out = []
    for section in ("workload", "model"):
        known = [r for r in runs if r.hash(section) is not None]
        if len({r.hash(section) for r in known}) > 1:
            listed = ", ".join(f"{r.path}={r.hash(section)}" for r in known)
            out.append(f"runs differ in {section}.hash: {listed}")
    return out


def unchecked_provenance(runs: list[Run]) -> list[str]:
    """One line per run missing a hash, naming exactly which is missing and which is checked."""
    out = []
    for r in runs:
        missing = [s for s in ("workload", "model") if r.hash(s) is None]
        if not missing:
            continue
        if r.manifest is None:
            why = "no manifest"
        elif r.manifest.get("telemetry") is not None:   # an engine run: the served weights are not ours to hash
            why = "an engine run" + (": the served weights are not hashed" if "model" in missing else "")
        else:
            why = "not in its manifest"
        checked = [f"{s}.hash checked" for s in ("workload", "model") if s not in missing]
        out.append(f"{r.path}: no {' or '.join(s + '.hash' for s in missing)} ({why}); "
                   + ", ".join(checked + [f"{' and '.join(missing)} unchecked"]))
    return out


def check_provenance(runs: list[Run], allow_mismatch: bool) -> list[str]:
    """Refuse runs that measured different workloads or models, unless allowed.

    Returns the mismatch lines (empty when they agree) so a report can state them.
    """
    lines = provenance_mismatches(runs)
    if lines and not allow_mismatch:
        raise AtlasError(lines[0] + " (pass --allow-mismatch to compare anyway)")
    return lines
