"""Pack run directories into tar.xz files of at most --max-mib each (the device tool returns at
most 8 files of 16 MiB): whole runs per file, fingerprint events only for the arms named.

    python scripts/pack_runs.py --out $OUT --name claims_default --events refeed_on DIR...
"""
from __future__ import annotations

import argparse
import tarfile
from pathlib import Path


def files_of(run: Path, keep_events: bool) -> list[Path]:
    out = []
    for p in sorted(run.rglob("*")):
        rel = p.relative_to(run).parts
        if not p.is_file() or ".hydra" in rel or p.name == ".lock" or (rel[0] == "events" and not keep_events):
            continue
        out.append(p)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--events", default="", help="arms whose events/ are kept (comma-separated)")
    ap.add_argument("--max-mib", type=float, default=15.0)
    ap.add_argument("dirs", nargs="+", help="sweep directories (their job dirs are the runs) or runs")
    a = ap.parse_args()
    keep = set(filter(None, a.events.split(",")))
    runs = []
    for d in map(Path, a.dirs):
        if (d / "manifest.json").exists():
            runs.append(d)
        elif d.is_dir():
            runs += sorted(r for r in d.iterdir() if (r / "manifest.json").exists())
    bins, size = [[]], 0
    for r in runs:
        fs = files_of(r, any(r.name.endswith("_" + arm) or r.name == arm for arm in keep))
        s = sum(f.stat().st_size for f in fs)
        if bins[-1] and size + s > a.max_mib * 2**20:
            bins.append([])
            size = 0
        bins[-1].append((r, fs))
        size += s
    for i, b in enumerate(bins, 1):
        path = Path(a.out) / f"{a.name}-{i}.tar.xz"
        with tarfile.open(path, "w:xz") as tar:
            for r, fs in b:
                for f in fs:
                    tar.add(f, arcname=str(Path(r.parent.name) / r.name / f.relative_to(r)))
        print(f"{path}: {len(b)} runs, {path.stat().st_size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
