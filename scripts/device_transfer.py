"""Moving files to and from a rented GPU machine that has transfer limits (scripts/gpu.sh calls it).

Why it exists: the GPU machine this project's H200 figures come from copies the working tree there
(tracked and untracked-not-ignored files, at most 64 MiB) and brings back at most 8 files of 16 MiB
from its output folder. Nothing else in the project knows those limits; they live here, as defaults.

    python scripts/device_transfer.py pack --out $OUT --name claims_default [--events refeed_on] DIR...
        run directories (or sweep directories: their job dirs are the runs) into NAME-<i>.tar.xz files of
        at most --max-mib each, whole runs per file, fingerprint events only for the arms named
    python scripts/device_transfer.py bundle $OUT
        while $OUT holds more than --files files, the smallest go together into bundle_<n>.tar files of
        at most --max-mib each (unpack with `tar xf`)
    python scripts/device_transfer.py park | restore
        the committed reports' raw runs (analysis/reports/*/runs, ~40 MB) out of the working tree into
        .parked/ (git-ignored) before a call that does not read them, and back after it
"""
from __future__ import annotations

import argparse
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: the machine returns at most this many files from $OUT, each under 16 MiB
MAX_FILES, MAX_MIB = 8, 16.0


def _run_files(run: Path, keep_events: bool) -> list[Path]:
    out = []
    for p in sorted(run.rglob("*")):
        rel = p.relative_to(run).parts
        if not p.is_file() or ".hydra" in rel or p.name == ".lock" or (rel[0] == "events" and not keep_events):
            continue
        out.append(p)
    return out


def pack(out: Path, name: str, events: str, max_mib: float, dirs: list[Path]) -> None:
    keep = set(filter(None, events.split(",")))
    runs = []
    for d in dirs:
        if (d / "manifest.json").exists():
            runs.append(d)
        elif d.is_dir():
            runs += sorted(r for r in d.iterdir() if (r / "manifest.json").exists())
    bins, size = [[]], 0
    for r in runs:
        fs = _run_files(r, any(r.name.endswith("_" + arm) or r.name == arm for arm in keep))
        s = sum(f.stat().st_size for f in fs)
        if bins[-1] and size + s > max_mib * 2**20:
            bins.append([])
            size = 0
        bins[-1].append((r, fs))
        size += s
    for i, b in enumerate(bins, 1):
        path = out / f"{name}-{i}.tar.xz"
        with tarfile.open(path, "w:xz") as tar:
            for r, fs in b:
                for f in fs:
                    tar.add(f, arcname=str(Path(r.parent.name) / r.name / f.relative_to(r)))
        print(f"{path}: {len(b)} runs, {path.stat().st_size / 2**20:.1f} MiB")


def bundle(out: Path, max_files: int, max_mib: float) -> int:
    # every file under out counts, in folders too: the device returns files, not folders (a ladder's
    # five files under ladder_default/ made nine with four at the top, and the ninth did not come back)
    files = sorted((p for p in out.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    limit, n = max_mib * 2**20, 0
    while len(files) > max_files:
        group, size = [], 0
        while files and size + files[0].stat().st_size <= limit and (len(group) < 2 or len(files) + 1 > max_files):
            size += files[0].stat().st_size
            group.append(files.pop(0))
        if len(group) < 2:
            print(f"device_transfer bundle: {len(files) + len(group)} files in {out} do not fit {max_files} "
                  f"of {max_mib:g} MiB", file=sys.stderr)
            return 1
        n += 1
        while (out / f"bundle_{n}.tar").exists():     # a second call over one $OUT: never overwrite a bundle
            n += 1
        path = out / f"bundle_{n}.tar"
        with tarfile.open(path, "w") as tar:
            for p in group:
                tar.add(p, arcname=str(p.relative_to(out)))
        for p in group:
            p.unlink()
        print(f"{path.name}: {', '.join(str(p.relative_to(out)) for p in group)}")
        files = sorted(files + [path], key=lambda p: p.stat().st_size)
    for d in sorted((d for d in out.rglob("*") if d.is_dir()), key=lambda d: -len(d.parts)):
        if not any(d.iterdir()):       # a folder whose files all went into bundles
            d.rmdir()
    return 0


def park(root: Path) -> None:
    for d in sorted(root.glob("analysis/reports/*/runs")):
        if d.is_dir():
            target = root / ".parked" / d.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            d.rename(target)
            print(f"parked {d.relative_to(root)}")


def restore(root: Path) -> int:
    for d in sorted((root / ".parked").glob("analysis/reports/*/runs")):
        target = root / d.relative_to(root / ".parked")
        if target.exists():
            print(f"device_transfer restore: {target.relative_to(root)} exists, not overwritten", file=sys.stderr)
            return 1
        d.rename(target)
        print(f"restored {target.relative_to(root)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="verb", required=True)
    p = sub.add_parser("pack", help="run directories into tar.xz files of at most --max-mib")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--name", required=True)
    p.add_argument("--events", default="", help="arms whose events/ are kept (comma-separated)")
    p.add_argument("--max-mib", type=float, default=MAX_MIB - 1)
    p.add_argument("dirs", nargs="+", type=Path, help="sweep directories (their job dirs are the runs) or runs")
    b = sub.add_parser("bundle", help=f"fit a folder into --files files (default {MAX_FILES}) of at most --max-mib")
    b.add_argument("out", type=Path)
    b.add_argument("--files", type=int, default=MAX_FILES)
    b.add_argument("--max-mib", type=float, default=MAX_MIB - 0.5)
    sub.add_parser("park", help="analysis/reports/*/runs into .parked/")
    sub.add_parser("restore", help=".parked/ back into analysis/reports/*/runs")
    a = ap.parse_args(argv)
    if a.verb == "pack":
        pack(a.out, a.name, a.events, a.max_mib, a.dirs)
        return 0
    if a.verb == "bundle":
        return bundle(a.out, a.files, a.max_mib)
    if a.verb == "park":
        park(ROOT)
        return 0
    return restore(ROOT)


if __name__ == "__main__":
    sys.exit(main())
