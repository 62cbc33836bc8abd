"""The runtime's fast forward: Triton kernels for the cached (decode / verify / prefill) path.

Which path a cached forward takes:
  "torch"   the eager reference path (model.py as it always was): RMSNorm as fp32 ops, RoPE by
            cat/chunk, separate q/k/v and gate/up matmuls, an additive mask and SDPA.
  "triton"  fused qkv and gate_up matmuls (cuBLAS), and Triton for the rest: attention straight
            from the KVPool without a mask (attention.py), RoPE + KV write (rope.py), RMSNorm with
            the residual add fused in (norm.py), SiLU * up (mlp.py), a row's top-1 over the
            logits (top1.py).
  "auto"    (default) triton on CUDA when Triton imports, torch elsewhere.

Set by ATLAS_AB_KERNELS=auto|torch|triton or `use(...)` (a context manager as well). Forcing
"triton" on CPU tensors runs Triton's interpreter; that needs TRITON_INTERPRET=1 in the
environment before the first kernel is built (tests do this; it is far too slow for real runs).
The fast path is inference-only: with autograd on, the torch path runs.
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import os

import torch

from atlas_ab import AtlasError


class Choice:
    """A process-wide setting: the environment variable `env` gives the default (options[0] when
    unset); `use(name)` overrides it from then on, and as `with use(name):` only inside."""

    def __init__(self, env: str, options: tuple):
        self.env, self.options, self.value = env, options, None

    def get(self) -> str:
        v = self.value or os.environ.get(self.env, self.options[0])
        if v not in self.options:
            raise AtlasError(f"{self.env}={v!r} is not one of {', '.join(self.options)}")
        return v

    def use(self, name: str):
        if name not in self.options:
            raise AtlasError(f"{self.env}: {name!r} is not one of {', '.join(self.options)}")
        prev, self.value = self.value, name
        return self._restoring(prev)

    @contextlib.contextmanager
    def _restoring(self, prev):
        try:
            yield
        finally:
            self.value = prev


BACKEND = Choice("ATLAS_AB_KERNELS", ("auto", "torch", "triton"))
backend, use = BACKEND.get, BACKEND.use


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@functools.cache
def triton_available() -> bool:
    return importlib.util.find_spec("triton") is not None


def enabled(device: torch.device) -> bool:
    """Whether a cached forward on `device` takes the Triton path (autograd off)."""
    if torch.is_grad_enabled():
        return False
    b = backend()
    if b == "torch":
        return False
    if b == "auto":
        return device.type == "cuda" and triton_available()
    if device.type != "cuda" and not interpreting():
        raise AtlasError("ATLAS_AB_KERNELS=triton on a CPU tensor needs TRITON_INTERPRET=1 (the interpreter)")
    if not triton_available():
        raise AtlasError("ATLAS_AB_KERNELS=triton but triton does not import")
    return True


@functools.cache
def sm_count(device: torch.device) -> int:
    """Streaming multiprocessors (the interpreter pretends to have 8, so splitting is exercised)."""
    if device.type != "cuda":
        return 8
    return torch.cuda.get_device_properties(device).multi_processor_count


def on_its_device(fn):
    """Run a kernel wrapper with its first argument's GPU as the current device. Triton launches
    on the *current* CUDA device, so a kernel on a tensor of another GPU fails ("Pointer argument
    cannot be accessed from Triton"), as jobs on cuda:1 of a two-GPU sweep did. Inside a captured
    CUDA graph only the capture pays the switch; replays run no Python."""
    @functools.wraps(fn)
    def wrapper(t, *args, **kwargs):
        with torch.cuda.device(t.device) if t.is_cuda else contextlib.nullcontext():
            return fn(t, *args, **kwargs)
    return wrapper
