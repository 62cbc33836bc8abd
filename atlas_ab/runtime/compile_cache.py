"""Where compiled kernels persist between processes: inductor's and Triton's on-disk caches.

A GPU run compiles twice before its first timed step: Triton builds our own kernels
(runtime/kernels/) at their first call, and torch.compile builds the step's bookkeeping regions
(runtime/fusion.py). Both keep what they built on disk and find it again in a later process:
inductor's FX-graph and AOTAutograd caches under TORCHINDUCTOR_CACHE_DIR, Triton's binaries under
TRITON_CACHE_DIR. Their defaults sit under /tmp (inductor) or ~/.triton; `runner.compile_cache`
puts both under one directory of the user's cache (`auto`: $XDG_CACHE_HOME/atlas_ab, else
~/.cache/atlas_ab), so a sweep's arms, the next run and the next boot find them warm.

A variable the user's environment already sets wins. Both libraries read these variables when
they first compile, so `persist` runs before any kernel is built (the Runner's start).
"""
from __future__ import annotations

import os
from pathlib import Path

#: (environment variable, subdirectory of the cache root) for each library's on-disk cache
DIRS = (("TORCHINDUCTOR_CACHE_DIR", "inductor"), ("TRITON_CACHE_DIR", "triton"))
#: inductor's switches for the caches that outlive a process (on by default in torch >= 2.5; set
#: unless the environment says otherwise, so an older default or a site config cannot turn them off)
SWITCHES = (("TORCHINDUCTOR_FX_GRAPH_CACHE", "1"), ("TORCHINDUCTOR_AUTOGRAD_CACHE", "1"),
            # inductor compiles in the process: its pool of workers (a sidecar and one process per
            # core, each importing torch) is used even to load cached kernels, and held the exit of a
            # warm run 2.3-2.8 s and a cold one's capture 5.6 s longer (bench/RESULTS.md, "Time to a verdict")
            ("TORCHINDUCTOR_COMPILE_THREADS", "1"))


def root(spec: str | None, env=os.environ) -> Path | None:
    """The cache root `runner.compile_cache` names: auto, a path (~ expanded), or none/'' (the
    libraries' own defaults, nothing set)."""
    if spec is None or str(spec).strip().lower() in ("", "none", "null", "off"):
        return None
    if spec == "auto":
        base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        return Path(base) / "atlas_ab"
    return Path(os.path.expanduser(str(spec)))


def _writable(d: Path) -> bool:
    """d exists (made here if need be) and this process may write in it."""
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(d, os.W_OK)


def _entries(d, ends: tuple[str, ...] | None = None) -> int:
    """Files under d (those whose names end in `ends`, if given; 0 if d does not exist): how warm a
    cache is when a run starts."""
    if not d or not Path(d).is_dir():
        return 0
    return sum(1 for _, _, files in os.walk(d) for f in files if ends is None or f.endswith(ends))


#: the binary Triton keeps of each kernel it built (NVIDIA, AMD): one per kernel and specialization
BINARIES = (".cubin", ".hsaco")


def kernels(d) -> int:
    """Kernel binaries under Triton's cache d (0 if it does not exist): counted as a run starts and
    ends, the difference is what this run built, the part of a cold start that is Triton compiling
    (~11 s of a cold H200 main job: bench/RESULTS.md, "Time to a verdict")."""
    return _entries(d, BINARIES)


def persist(spec: str | None, env=os.environ) -> dict:
    """Point the caches at `root(spec)` unless `env` already names them; returns what is in effect
    ({variable: {"dir", "set_by": "runner.compile_cache" | "environment" | "default", "files"}}),
    the files counted as the run starts (0: a cold cache), for the manifest."""
    base = root(spec, env)
    out = {}
    for var, sub in DIRS:
        if var in env:
            set_by = "environment"
        elif base is not None and _writable(base / sub):
            env[var] = str(base / sub)
            set_by = "runner.compile_cache"
        else:       # none asked, or a directory this process cannot write: the library's default
            set_by = "default"
        d = env.get(var)
        out[var] = {"dir": d, "set_by": set_by, "files": _entries(Path(d)) if d else None}
    if base is not None:
        for var, value in SWITCHES:
            env.setdefault(var, value)
    return out
