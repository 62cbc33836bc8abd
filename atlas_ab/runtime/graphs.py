"""Static-shape steps, replayed from a CUDA graph on the GPU.

Eager PyTorch on a GPU is launch-bound for models this small (bench/RESULTS.md,
"Launch-bound"), so the verify forward and each drafter step are captured once per
wave and replayed.
Shapes must be static: the batch is the wave's, and the KV read length is the
pool's full capacity, not the step's. The torch path reads (and masks) all of it;
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
#: `step_ms` (speculative/timing.py; bench/RESULTS.md, "Graph capture and step_ms").
CAPTURE_SECONDS = [0.0]
#: First calls of a step key (a capture on the GPU, a first compile or allocation in eager mode),
#: counted in every mode: a loop step during which this grew paid a one-time cost, which is
#: warm-up, not the step's time (speculative/timing.py).
FIRST_CALLS = [0]


def capture_seconds() -> float:
    return CAPTURE_SECONDS[0]


def first_calls() -> int:
    return FIRST_CALLS[0]


class StaticStep:
    def __init__(self, fn, example: list[torch.Tensor], capture: bool):
        self.fn = fn
        self.inputs = [x.clone() for x in example]
        self.graph = None
        if capture:
            t0 = time.perf_counter()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):          # warm-up off the capture stream
                for _ in range(2):
                    fn(*self.inputs)
            torch.cuda.current_stream().wait_stream(s)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.outputs = fn(*self.inputs)
            torch.cuda.synchronize()
            CAPTURE_SECONDS[0] += time.perf_counter() - t0

    def __call__(self, *xs):
        if self.graph is None:
            return self.fn(*xs)
        for dst, src in zip(self.inputs, xs):
            dst.copy_(src, non_blocking=True)
        self.graph.replay()
        return self.outputs


class Steps:
    """The step functions of one wave: each run eagerly at the step's own KV length, or (graphs)
    captured once per key at the pool's full length and replayed. On the CPU `graphs=True` runs
    the same static-length path eagerly, so tests pin it to the dynamic one."""

    def __init__(self, graphs: bool):
        self.graphs = graphs
        self._steps: dict = {}
        self._seen: set = set()

    def __call__(self, key, fn, inputs: list[torch.Tensor], length: int, full_length: int):
        """fn(*inputs, length=L) -> outputs."""
        if key not in self._seen:
            self._seen.add(key)
            FIRST_CALLS[0] += 1
        if not self.graphs:
            return fn(*inputs, length=length)
        step = self._steps.get(key)
        if step is None:
            step = self._steps[key] = StaticStep(functools.partial(fn, length=full_length), inputs,
                                                 capture=inputs[0].is_cuda)
        return step(*inputs)

    def clear(self) -> None:
        self._steps.clear()
        self._seen.clear()
