"""Fit a device call's $OUT into what the device tool returns (at most 8 files of 16 MiB): while there
are more than --files files, the smallest are put together into bundle_N.tar files of at most
--max-mib each (unpack with `tar xf`). Usage: python3 scripts/bundle_out.py $OUT"""
import argparse
import pathlib
import sys
import tarfile

ap = argparse.ArgumentParser()
ap.add_argument("out", type=pathlib.Path)
ap.add_argument("--files", type=int, default=8)
ap.add_argument("--max-mib", type=float, default=15.5)
a = ap.parse_args()
files = sorted((p for p in a.out.iterdir() if p.is_file()), key=lambda p: p.stat().st_size)
limit, n = a.max_mib * 2**20, 0
while len(files) > a.files:
    group, size = [], 0
    while files and size + files[0].stat().st_size <= limit and (len(group) < 2 or len(files) + 1 > a.files):
        size += files[0].stat().st_size
        group.append(files.pop(0))
    if len(group) < 2:
        sys.exit(f"bundle_out: {len(files) + len(group)} files in {a.out} do not fit {a.files} of {a.max_mib} MiB")
    n += 1
    while (a.out / f"bundle_{n}.tar").exists():     # a second call over one $OUT: never overwrite a bundle
        n += 1
    bundle = a.out / f"bundle_{n}.tar"
    with tarfile.open(bundle, "w") as tar:
        for p in group:
            tar.add(p, arcname=p.name)
    for p in group:
        p.unlink()
    print(f"{bundle.name}: {', '.join(p.name for p in group)}")
    files = sorted(files + [bundle], key=lambda p: p.stat().st_size)
