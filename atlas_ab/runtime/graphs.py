"""Static-shape steps, replayed from a CUDA graph on the GPU.

Eager PyTorch on a GPU is launch-bound for models this small (bench/RESULTS.md,
"Launch-bound"), so the loop's whole step (catch-up rows, the K drafts, the verify, the
acceptance and the device half of the commit) is captured once per wave and shape, and
replayed.
Shapes must be static: the batch is the wave's, the KV read length is the
pool's full capacity, not the step's, and variable widths (catch-up rows, the draft
model's window) are padded to a power of two (`bucket`). The torch path reads (and masks) all of it;
the Triton path (kernels/, the default on CUDA) reads each row's live slots,
found on the device, so the graph costs the live length, not the capacity.
On the CPU the same code runs eagerly, so the static-length path is tested
there too.
"""
from __future__ import annotations

import functools
import time

import torch

#: Seconds this process spent capturing graphs (warm-up runs included, so Triton's first-call
#: compilation too). A step during which a capture ran is warm-up: its time goes to `warmup_ms`, not
#: `step_ms` (speculative/timing.py; while capture was in `step_ms`, a batch-1 live run's tokens/s sd came
#: out ~10x the other arms', the claims study's Q5 of 2026-11-29).
CAPTURE_SECONDS = [0.0]
#: First calls of a step key (a capture on the GPU, a first compile or allocation in eager mode),
#: counted in every mode: a loop step during which this grew paid a one-time cost, which is
#: warm-up, not the step's time (speculative/timing.py).
FIRST_CALLS = [0]


def capture_seconds() -> float:
    return CAPTURE_SECONDS[0]


def first_calls() -> int:
    return FIRST_CALLS[0]


def bucket(n: int) -> int:
    """The static width that holds n rows: the next power of two (0 stays 0)."""
    return 0 if n <= 0 else 1 << (int(n) - 1).bit_length()


class StaticStep:
    """fn captured as one CUDA graph over static copies of its inputs; its outputs are static
    buffers that every replay overwrites."""

    def __init__(self, fn, example: list[torch.Tensor], state=()):
        """state: tensors fn reads and writes in place; the warm-up runs before the capture would
        move them on, so they are put back before the first replay."""
        t0 = time.perf_counter()
        self.inputs = [x.clone() for x in example]
        saved = [t.clone() for t in state]
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):          # warm-up off the capture stream
            for _ in range(2):
                fn(*self.inputs)
        torch.cuda.current_stream().wait_stream(s)
        for t, v in zip(state, saved):
            t.copy_(v)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.outputs = fn(*self.inputs)
        torch.cuda.synchronize()
        CAPTURE_SECONDS[0] += time.perf_counter() - t0

    def __call__(self, *xs):
        for dst, src in zip(self.inputs, xs):
            dst.copy_(src, non_blocking=True)
        self.graph.replay()
        return self.outputs


class StepGraphs:
    """The step functions of one wave, by key: each run eagerly at the step's own KV length, or
    (`static`) at static shapes (the pool's full length), captured once per key and replayed. On
    the CPU `graphs=True` runs the same static path eagerly, so tests pin it to the dynamic one;
    `capture=False` does that on the GPU too (to check the capture against it)."""

    def __init__(self, graphs: bool, capture: bool | None = None, fuse: bool = True):
        """fuse: a GPU step's bookkeeping regions run compiled (runtime/fusion.py); at static
        shapes only, where the step is captured or checked against its capture."""
        self.static = graphs
        self.capture = capture
        self.fuse = fuse
        self._graphs: dict = {}
        self._seen: set = set()
        self._bound: tuple = ()

    def bind(self, state: list[torch.Tensor]) -> None:
        """The tensors the steps read and write beyond their inputs (KV pools, a wave's state). A
        graph stays valid while they are the same memory of the same shapes, so one wave's graphs
        serve the next; other memory drops every graph."""
        sig = tuple((t.data_ptr(), tuple(t.shape), t.dtype) for t in state)
        if sig != self._bound:
            self.clear()
            self._bound = sig

    def __call__(self, key, fn, inputs: list[torch.Tensor], length, full_length, state=()):
        """fn(*inputs, length=L) -> outputs (L: `length`, or `full_length` at static shapes; any
        object fn understands, e.g. a dict of lengths). state: see StaticStep."""
        if key not in self._seen:
            self._seen.add(key)
            FIRST_CALLS[0] += 1
        if not self.static:
            return fn(*inputs, length=length)
        if not (inputs[0].is_cuda if self.capture is None else self.capture):
            return fn(*inputs, length=full_length)
        step = self._graphs.get(key)
        if step is None:
            step = self._graphs[key] = StaticStep(functools.partial(fn, length=full_length), inputs, state)
        return step(*inputs)

    def seen(self, key) -> bool:
        """Whether a step of this key has run (been captured, on the GPU) since the last clear."""
        return key in self._seen

    def clear(self) -> None:
        self._graphs.clear()
        self._seen.clear()


class StaticBuffers:
    """Named device tensors that outlive a wave (a step graph reads them by address): the same
    tensor again while the shape and dtype match, new zeros otherwise."""

    def __init__(self):
        self._bufs: dict = {}

    def get(self, name: str, shape: tuple, dtype, device) -> torch.Tensor:
        t = self._bufs.get(name)
        if t is None or tuple(t.shape) != tuple(shape) or t.dtype != dtype or t.device != torch.device(device):
            t = self._bufs[name] = torch.zeros(shape, dtype=dtype, device=device)
        return t
