"""How much of the shared libraries a GPU run loads sits in the page cache (mincore: counting pages
touches none), and how fast the disk gives what does not: the part of a cold start that is reading.

  python3 scripts/page_cache.py                   # resident MB / size of every .so >= 1 MB under the
                                                  # interpreter's site-packages, biggest first
  python3 scripts/page_cache.py --json F.json     # the same, kept for a later --diff
  python3 scripts/page_cache.py --diff A.json B.json   # what a run read between two snapshots
  python3 scripts/page_cache.py --read-mb 2000    # read (cat) non-resident libraries up to that many MB: disk MB/s
  python3 scripts/page_cache.py --prefetch A.json  # read, 8 threads at once, every file A.json found partly resident
"""
from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import site
import sys
import time
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE")
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)


def resident(path: Path) -> tuple[int, int]:
    """(bytes of the file resident in the page cache, its size): mapped, never read."""
    size = path.stat().st_size
    if size == 0:
        return 0, 0
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), f"mmap {path}")
        try:
            vec = ctypes.create_string_buffer((size + PAGE - 1) // PAGE)
            if _libc.mincore(ctypes.c_void_p(addr), ctypes.c_size_t(size), vec) != 0:
                raise OSError(ctypes.get_errno(), f"mincore {path}")
            return sum(b & 1 for b in vec.raw) * PAGE, size
        finally:
            _libc.munmap(ctypes.c_void_p(addr), size)
    finally:
        os.close(fd)


def libraries(min_mb: float = 1.0) -> list[Path]:
    roots = {Path(p) for p in site.getsitepackages() + [site.getusersitepackages()] if Path(p).is_dir()}
    out = set()
    for r in roots:
        for p in r.rglob("*.so*"):
            if p.is_file() and not p.is_symlink() and p.stat().st_size >= min_mb * 2**20:
                out.add(p.resolve())
    return sorted(out, key=lambda p: -p.stat().st_size)


def _read_all(p: Path) -> int:
    n = 0
    with open(p, "rb") as f:
        while chunk := f.read(16 << 20):
            n += len(chunk)
    return n


def snapshot(paths: list[Path]) -> dict:
    return {str(p): dict(zip(("resident", "size"), resident(p))) for p in paths}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--diff", nargs=2, type=Path)
    ap.add_argument("--read-mb", type=float, default=0.0)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--prefetch", type=Path)
    a = ap.parse_args()
    mb = lambda b: b / 2**20  # noqa: E731
    if a.diff:
        before, after = (json.loads(p.read_text()) for p in a.diff)
        gained = ((after[k]["resident"] - before.get(k, {"resident": 0})["resident"], k) for k in after)
        rows = sorted(gained, reverse=True)
        total = sum(d for d, _ in rows)
        print(f"read between the snapshots: {mb(total):,.0f} MB")
        for d, k in rows[:a.top]:
            print(f"  {mb(d):8,.0f} MB of {mb(after[k]['size']):8,.0f}  {k}")
        return
    if a.prefetch:
        from concurrent.futures import ThreadPoolExecutor
        seen = json.loads(a.prefetch.read_text())
        want = [Path(k) for k, v in seen.items() if v["resident"] > 0 and Path(k).is_file()]
        t0 = time.perf_counter()
        with ThreadPoolExecutor(8) as ex:
            done = sum(ex.map(_read_all, want))
        dt = time.perf_counter() - t0
        print(f"prefetched {len(want)} files, {mb(done):,.0f} MB in {dt:.2f} s: {mb(done) / max(dt, 1e-9):,.0f} MB/s")
        return
    paths = libraries()
    snap = snapshot(paths)
    res, size = sum(v["resident"] for v in snap.values()), sum(v["size"] for v in snap.values())
    print(f"{len(paths)} libraries >= 1 MB: {mb(res):,.0f} MB resident of {mb(size):,.0f} MB")
    for k, v in sorted(snap.items(), key=lambda kv: -kv[1]["size"])[:a.top]:
        print(f"  {mb(v['resident']):8,.0f} / {mb(v['size']):8,.0f} MB  {k}")
    if a.json:
        a.json.write_text(json.dumps(snap))
    if a.read_mb > 0:
        cold = [Path(k) for k, v in snap.items() if v["resident"] < 0.05 * v["size"]]
        done, t0 = 0, time.perf_counter()
        for p in cold:
            if done >= a.read_mb * 2**20:
                break
            done += _read_all(p)
        dt = time.perf_counter() - t0
        print(f"read {mb(done):,.0f} MB of non-resident libraries in {dt:.2f} s: {mb(done) / max(dt, 1e-9):,.0f} MB/s")


if __name__ == "__main__":
    sys.exit(main())
