"""The step's bookkeeping regions, fused by torch.compile on the GPU.

A captured step's own small ops (the device's plan, the acceptance, the read's packing, the
next step's book) are ~55 kernels of 1-4 us each at B=64, K=2: more time than the step's two
drafts (bench/RESULTS.md, "The step's glue, kernel by kernel"). Each is launch- and
latency-bound, so the fix is fewer kernels, which is inductor's job: a region marked `@fused`
runs through `torch.compile` (a few generated Triton kernels, captured in the step's graph like
any other) when its caller asks (`fuse=True`: a GPU wave at static shapes whose target has
fusion on, `StepGraphs.fuse`), and as plain eager torch otherwise (the CPU, and every CPU test).

Exact by construction: the regions hold integer arithmetic, compares, gathers, copies, cumulative
products of 0/1 and float->int32 bit views, no float arithmetic, so compiled and eager give the
same bits (GPU test: tests/run/test_whole_step_graph.py). Forwards, Triton kernels of our own and
stream switches stay outside the regions.

Compilation runs in a step graph's warm-up, before its capture (runtime/graphs.py), once per
region and shape in a process (a run's graphs serve all its waves); `torch.compile` is only
touched then, so a run's start-up does not import torch._dynamo (and sympy) before its first
step (bench/bench_startup.py checks).
"""
from __future__ import annotations

import functools
import time

import torch

from atlas_ab import AtlasError
from atlas_ab.errors import first_line

#: Shapes (batch, K, arm) one region may be compiled for in a process before torch.compile gives
#: up and runs it eagerly (dynamo's default, 8, is reached by a GPU test session's waves).
RECOMPILE_LIMIT = 64
#: Seconds this process spent in calls of compiled regions that compiled something (dynamo traced a
#: new frame: a first shape, or an FX-graph cache hit loaded from disk). They run inside a step
#: graph's warm-up, so `graphs.capture_seconds()` includes them too (run/startup.py splits the two).
COMPILE_SECONDS = [0.0]


def compile_seconds() -> float:
    return COMPILE_SECONDS[0]


def _frames_compiled() -> int:
    """Frames dynamo has compiled in this process (its own counter; 0 where a torch lacks it)."""
    from torch._dynamo import utils  # imported by the torch.compile before this call
    counters = getattr(utils, "counters", None)
    return int(counters["stats"]["unique_graphs"]) if counters is not None else 0


def fused(fn):
    """fn(*args, fuse=False, **kw): fn itself, or (fuse True) fn compiled by torch.compile at
    static shapes (made on the first such call: `.compiled`, None before). `.eager` is fn."""

    @functools.wraps(fn)
    def call(*args, fuse: bool = False, **kw):
        if not fuse:
            return fn(*args, **kw)
        if call.compiled is None:
            _raise_recompile_limit()
            call.compiled = torch.compile(fn, dynamic=False)
        frames, t0 = _frames_compiled(), time.perf_counter()
        try:
            out = call.compiled(*args, **kw)
        except torch._dynamo.exc.BackendCompilerFailed as e:   # the machine's compiler, not the region
            why = first_line(getattr(e, "inner_exception", None) or e)
            raise AtlasError(f"runner.fuse_bookkeeping: torch.compile could not build {fn.__qualname__} on this "
                             f"machine ({why}); run with runner.fuse_bookkeeping=false") from e
        if _frames_compiled() != frames:
            COMPILE_SECONDS[0] += time.perf_counter() - t0
        return out

    call.eager, call.compiled = fn, None
    return call


@functools.lru_cache(maxsize=None)
def _raise_recompile_limit() -> None:
    import torch._dynamo.config as dynamo_config  # not at import: ~2 s with sympy, first step only
    for name in ("recompile_limit", "cache_size_limit"):    # renamed in torch 2.6; either may be there
        if hasattr(dynamo_config, name):
            setattr(dynamo_config, name, max(getattr(dynamo_config, name), RECOMPILE_LIMIT))
