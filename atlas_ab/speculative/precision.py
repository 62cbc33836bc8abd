"""How far a forward in the run's dtype moves a logit from fp32: the lossless gate's near-tie bound.

Terms. u: the dtype's unit roundoff (a value of magnitude x is stored to within x * u). m: a
position's largest |fp32 logit|. The forward error E of a model in a dtype: the largest
|logit_dtype - logit_fp32| / (u * m) over the positions and vocabulary of a batch (uncached
forwards, same weights). It scales with m, not with each logit, because it comes from the
rounding of the hidden state, which every logit of a position shares (bench/RESULTS.md, "bf16
forward error"). Two paths in the dtype (the loop's verify, the gate's forward) each sit within
E * u * m of fp32, so a token one of them picks is at most 2 * E * u * m below the fp32 top-1:
`NearTieBound.resolution`.

A run measures E for its own checkpoint, dtype and device at start (`calibrate`: one forward in
the dtype and one in fp32 over a small batch of its workload) and multiplies it by SAFETY;
FORWARD_ERROR, the worst E measured at the 5.7B shape on the H200, is only its ceiling (and the
bound of a run that measured nothing: fp32 runs, bare `gate.check` calls).
"""
from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass
from typing import Optional

import numpy as np
import torch

# Unit roundoff of each dtype (bf16 keeps 8 significand bits: u = 2^-8).
UNIT_ROUNDOFF = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11, torch.float32: 2.0 ** -24}

FORWARD_ERROR = 32.0  # max bf16 forward error 25.4 at 5.7B: bench/RESULTS.md, "the bf16 bound at 5.7B"

# The measured E times SAFETY: the default workload's whole context reached 1.54x the calibration's E and
# its largest bf16 near-tie needed 0.40x (bench/RESULTS.md, "The gate's near-tie bound").
SAFETY = 2.0

#: The calibration batch: the first CALIBRATION_SEQS documents' context, CALIBRATION_TOKENS each.
CALIBRATION_SEQS, CALIBRATION_TOKENS = 4, 256


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


@dataclass(frozen=True)
class NearTieBound:
    """The forward error E (in u * m) a run's gate forgives, and where it came from: `measured`
    (SAFETY x the calibration's largest error, below the ceiling) or `ceiling` (FORWARD_ERROR:
    the measured one was not smaller, or nothing was measured, with `why`)."""
    forward_error: float
    source: str
    measured: Optional[float] = None     # the calibration's largest error, u * m
    safety: float = SAFETY
    ceiling: float = FORWARD_ERROR
    calibration: Optional[dict] = None   # {"sequences", "tokens", "dtype", "device"}
    why: Optional[str] = None

    def resolution(self, dtype: torch.dtype, magnitude: float) -> float:
        """The fp32 gap below the top-1 within which two paths in `dtype` may legitimately pick
        different tokens at a position of largest |logit| `magnitude`: 2 * E * u * m."""
        return 2.0 * self.forward_error * UNIT_ROUNDOFF.get(dtype, UNIT_ROUNDOFF[torch.float32]) * max(magnitude, 1.0)

    def to_dict(self) -> dict:
        return asdict(self)


CEILING = NearTieBound(FORWARD_ERROR, "ceiling", why="not calibrated")


def resolution(dtype: torch.dtype, magnitude: float) -> float:
    """The ceiling's resolution (`NearTieBound.resolution` at FORWARD_ERROR)."""
    return CEILING.resolution(dtype, magnitude)


@contextlib.contextmanager
def strict_fp32():
    """fp32 matmuls in fp32 (not TF32), whatever the process set."""
    old = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def trunk_in(trunk, dtype: torch.dtype):
    """The trunk itself when it is in `dtype`, else a copy in `dtype` on its device (built from
    its own weights: no random init, no CPU copy)."""
    if next(trunk.parameters()).dtype == dtype:
        return trunk
    with torch.device("meta"):
        copy = type(trunk)(trunk.args)
    copy.load_state_dict({k: v.to(dtype) for k, v in trunk.state_dict().items()}, assign=True)
    copy.tie_weights()
    return copy.eval()


@torch.no_grad()
def _errors(trunk, tokens: torch.Tensor, dtype: torch.dtype):
    """(|logit_dtype - logit_fp32| [B, T, V], fp32 logits [B, T, V]) of `trunk`'s weights over
    tokens [B, T]."""
    low = trunk_in(trunk, dtype)                 # the run's model ...
    t32 = trunk_in(low, torch.float32)           # ... and its arbiter: the same weights, upcast
    with strict_fp32():
        tokens = tokens.to(next(t32.parameters()).device)
        z32 = t32.logits(t32.forward_train(tokens))                  # [B, T, V]
        zlo = low.logits(low.forward_train(tokens)).float()          # [B, T, V]
    return (zlo - z32).abs(), z32


def _ratio(err: torch.Tensor, z32: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """err in units of u * m, m = each position's largest |fp32 logit| (at least 1)."""
    m = z32.abs().amax(-1, keepdim=True)                             # [B, T, 1]
    return err / (UNIT_ROUNDOFF[dtype] * m.clamp(min=1.0))


def calibration_tokens(docs, seqs: int = CALIBRATION_SEQS, tokens: int = CALIBRATION_TOKENS) -> torch.Tensor:
    """[S, T] the first `seqs` documents' context (their turns' chunks in order), cut to a common
    length of at most `tokens`."""
    texts = [np.concatenate([np.asarray(c, dtype=np.int64) for c in d.chunks]) for d in docs[:seqs]]
    T = min(tokens, min(len(t) for t in texts))
    return torch.as_tensor(np.stack([t[:T] for t in texts]))


def calibrate(trunk, tokens: torch.Tensor) -> NearTieBound:
    """The run's bound: SAFETY x the largest forward error of `trunk` (in its dtype, against fp32)
    over tokens [S, T], or the ceiling where that is not smaller (or the trunk is fp32)."""
    dtype = next(trunk.parameters()).dtype
    dev = next(trunk.parameters()).device
    cal = {"sequences": int(tokens.shape[0]), "tokens": int(tokens.numel()), "dtype": dtype_name(dtype),
           "device": dev.type}
    if dtype == torch.float32:
        return NearTieBound(FORWARD_ERROR, "ceiling", calibration=cal,
                            why="an fp32 run: its arbiter is the model itself, nothing to measure against")
    err, z32 = _errors(trunk, tokens, dtype)
    measured = float(_ratio(err, z32, dtype).max())
    del err, z32
    if dev.type == "cuda":
        torch.cuda.empty_cache()         # the fp32 copy's memory back to the device (Arbiter.room_for reads it)
    if SAFETY * measured >= FORWARD_ERROR:
        return NearTieBound(FORWARD_ERROR, "ceiling", measured, calibration=cal,
                            why=f"{SAFETY:g} x the measured {measured:.3g} is not below the ceiling")
    return NearTieBound(SAFETY * measured, "measured", measured, calibration=cal)


@torch.no_grad()
def forward_error(trunk, tokens: torch.Tensor, dtype: torch.dtype = torch.bfloat16) -> dict:
    """The forward error's distribution: |logit in `dtype` - logit in fp32| of the same weights
    over every position and vocabulary entry of `tokens` [B, T] in units of u * m (quantiles and
    max), plus the raw error binned by each logit's own magnitude (to show it does not follow it).
    bench/bench_logit_error.py prints it."""
    err, z32 = _errors(trunk, tokens, dtype)
    m = z32.abs().amax(-1, keepdim=True)
    ratio = _ratio(err, z32, dtype).flatten().double()
    sample = ratio[torch.randperm(len(ratio), generator=torch.Generator().manual_seed(0))[:1_000_000]
                   .to(ratio.device)] if len(ratio) > 1_000_000 else ratio
    qs = (0.5, 0.99, 0.999)
    out = {"n_logits": int(ratio.numel()), "dtype": dtype_name(dtype),
           "median_position_magnitude": float(m.median()),
           "ratio": {f"q{q * 100:g}": float(v) for q, v in zip(qs, torch.quantile(sample, torch.tensor(
               qs, dtype=torch.float64, device=sample.device)))} | {"max": float(ratio.max())}, "bins": []}
    mag = z32.abs()
    for lo, hi in ((0, 1), (1, 2), (2, 4), (4, 8), (8, 16), (16, float("inf"))):
        sel = (mag >= lo) & (mag < hi)
        if sel.any():
            e = err[sel].double()
            out["bins"].append({"abs_logit": [lo, hi], "n": int(sel.sum()), "err_median": float(e.median()),
                                "err_max": float(e.max())})
    return out
