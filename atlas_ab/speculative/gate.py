"""The lossless gate: speculative greedy output must equal target-only greedy.

A sample of each wave's sequences is checked TEACHER-FORCED: one uncached causal forward of the
target alone (`forward_train`, no KV cache, none of the loop's code) over each sequence's whole
committed text, and at every generated position the target's argmax given the committed text
before it must be the token the loop committed there. Greedy decoding commits exactly the tokens
that pass this test, so up to the first mismatch the committed text IS the target-only greedy text,
and the first mismatch is where a one-token-per-forward replay would diverge: the two checks agree
in exact arithmetic, and this one costs one forward per sequence instead of one per token. After a
divergence the sequence is not compared further (as a replay, whose text differs from there on).

On the CPU in fp32 the two agree exactly (the tests hold it to 0 divergences). In bf16 a
multi-token verify and a whole-text forward round differently, so a divergence at a near-tie is
not a bug and one at a clear margin is. Every divergence is therefore ARBITRATED: the disputed
position's logits are recomputed in fp32 from the same context (the committed prefix up to it,
on which both paths agree), and the divergence passes only if both disputed tokens are within
what the run's dtype can resolve of the fp32 top-1 (`resolution`), else the run fails. Each
arbitration is recorded (GateResult.arbitrations -> the manifest's gate).

The fp32 arbiter is a float32 copy of the trunk, built on the trunk's device only when a
divergence needs it; a run keeps it for its later waves where the GPU has room for it (`Arbiter`),
else it is dropped when the check ends. At 5.7B that is 23 GB next to the 11.4 GB
of bf16 weights, fine on an H200; a layer-by-layer upcast would bound the memory to one layer,
but it would walk the model's layers outside the model's own forward, a second forward to keep
right; the copy runs the trunk's own `forward_train`, the path the transformers-equality tests
already check.
"""
from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from atlas_ab.speculative.gate_status import status_of

# Unit roundoff of each dtype: a value of magnitude m is stored to within m * u
# (bf16 keeps 8 significand bits: u = 2^-8).
UNIT_ROUNDOFF = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11, torch.float32: 2.0 ** -24}

# How far a whole forward in a dtype moves a logit from its fp32 value, in units of u * m, where
# m = the largest |fp32 logit| at that position: the error comes from the rounding of the hidden
# state, which every logit of the position shares, so it scales with m, not with each logit.
FORWARD_ERROR = 32.0  # max bf16 forward error 25.4 at 5.7B: bench/RESULTS.md, "the bf16 bound at 5.7B"


def resolution(dtype: torch.dtype, magnitude: float) -> float:
    """The fp32 gap below the top-1 within which two paths in `dtype` may legitimately pick
    different tokens: each path's logits sit within FORWARD_ERROR * u * m of fp32, so a token
    chosen by one path is at most twice that below the fp32 top-1."""
    return 2.0 * FORWARD_ERROR * UNIT_ROUNDOFF.get(dtype, UNIT_ROUNDOFF[torch.float32]) * max(magnitude, 1.0)


@dataclass
class GateResult:
    checked_sequences: int = 0
    checked_tokens: int = 0
    divergences: int = 0
    near_ties: int = 0                  # divergences that passed arbitration
    arbitrated: int = 0
    passed: bool | None = None          # None: nothing was checked
    margins: list = field(default_factory=list)        # the replay's top-1/top-2 margin at each divergence
    arbitrations: list = field(default_factory=list)   # one dict per divergence (see `check`)
    first_divergence: dict | None = None               # the first that failed, else the first

    @property
    def status(self) -> str:
        """passed | failed | not run (a gate that checked nothing never reads as passed)."""
        return status_of(self.passed, self.checked_sequences)

    def to_dict(self) -> dict:
        return {**asdict(self), "status": self.status}


@dataclass
class Forced:
    tokens: np.ndarray        # [S, turns, G] the target's argmax before each committed generated token
    margins: np.ndarray       # [S, turns, G] its top-1 minus top-2 logit (in the run's dtype)
    history: list             # [S] -> int64 [L_s]: the sequence's committed text (chunks and generated)
    gen_start: np.ndarray     # [S, turns] index in `history` of each turn's first generated token


#: Tokens per teacher-forced forward at most: long texts go fewer sequences at a time, so the
#: uncached forward's activations stay bounded (its attention is quadratic in the text's length).
GATE_TOKENS = 8192


@torch.no_grad()
def teacher_forced(trunk, docs, generated, gen_tokens: int, group: int = 4) -> Forced:
    """The target's greedy choice at every generated position of `docs` given the committed text
    before it (`generated[s][turn]`: the loop's G tokens), up to `group` sequences per forward
    (fewer where they are long: GATE_TOKENS)."""
    G, S, turns = gen_tokens, len(docs), len(docs[0].chunks)
    dev = next(trunk.parameters()).device
    history, gen_start = [], np.zeros((S, turns), dtype=np.int64)
    for s, d in enumerate(docs):
        parts, n = [], 0
        for t, c in enumerate(d.chunks):
            gen_start[s, t] = n + len(c)
            parts += [np.asarray(c, dtype=np.int64), np.asarray(generated[s][t], dtype=np.int64)]
            n += len(c) + len(parts[-1])
        history.append(np.concatenate(parts))
    tokens = np.zeros((S, turns, G), dtype=np.int64)
    margins = np.zeros((S, turns, G), dtype=np.float64)
    group = max(1, min(group, GATE_TOKENS // max(len(h) for h in history)))
    for lo in range(0, S, group):
        part = range(lo, min(lo + group, S))
        L = max(len(history[s]) for s in part)
        tok = torch.zeros(len(part), L, dtype=torch.long)        # right-padded: a causal forward never reads ahead
        for j, s in enumerate(part):
            tok[j, :len(history[s])] = torch.as_tensor(history[s])
        h = trunk.forward_train(tok.to(dev))                        # [P, L, H] pre-norm
        rows = torch.arange(len(part), device=dev)[:, None]
        for t in range(turns):
            at = gen_start[list(part), t, None] - 1 + np.arange(G)[None, :]                      # [P, G]
            top2 = trunk.logits(h[rows, torch.as_tensor(at, device=dev)]).float().topk(2, dim=-1)  # [P, G, 2]
            tokens[lo:lo + len(part), t] = top2.indices[..., 0].cpu().numpy()
            margins[lo:lo + len(part), t] = (top2.values[..., 0] - top2.values[..., 1]).cpu().numpy()
    return Forced(tokens=tokens, margins=margins, history=history, gen_start=gen_start)


@contextlib.contextmanager
def _strict_fp32():
    """fp32 matmuls in fp32 (not TF32) while arbitrating, whatever the process set."""
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


class Arbiter:
    """A run's fp32 arbiter (`trunk_in(trunk, float32)`), built the first time a check needs it.
    On a GPU with room for it twice over it is kept for the run's later checks: at the 5.7B shape
    its build took 0.04 s of every wave's gate, a third of the gate's time
    (bench/results/startup_warm_pyc_x5_h200_2026-12-01t.json); with less room, or off a GPU, it is
    dropped after each check, as one built inside `check` is."""

    def __init__(self, trunk):
        self.trunk = trunk
        self.kept = None

    def get(self):
        if self.kept is not None:
            return self.kept
        t32 = trunk_in(self.trunk, torch.float32)
        if t32 is not self.trunk and self.room_for(t32):
            self.kept = t32
        return t32

    @staticmethod
    def room_for(t32) -> bool:
        """Whether the device keeps at least the copy's size free with the copy in it."""
        dev = next(t32.parameters()).device
        if dev.type != "cuda":
            return False
        size = sum(p.numel() * p.element_size() for p in t32.parameters())
        return torch.cuda.mem_get_info(dev)[0] >= size


@torch.no_grad()
def fp32_logits(t32, contexts: list[np.ndarray], chunk: int = 4) -> torch.Tensor:
    """fp32 logits [N, V] of the next token after each context (uncached, causal; contexts are
    right-padded, which a causal forward never sees from the rows before the padding)."""
    dev = next(t32.parameters()).device
    rows = []
    with _strict_fp32():
        for i in range(0, len(contexts), chunk):
            part = contexts[i:i + chunk]
            T = max(len(c) for c in part)
            tok = torch.zeros(len(part), T, dtype=torch.long)
            for j, c in enumerate(part):
                tok[j, :len(c)] = torch.as_tensor(c)
            h = t32.forward_train(tok.to(dev))
            last = torch.as_tensor([len(c) - 1 for c in part], device=dev)
            rows.append(t32.logits(h[torch.arange(len(part), device=dev), last][:, None])[:, 0].float())
    return torch.cat(rows)


def check(trunk, docs, generated, gen_tokens: int, seqs, arbiter: Arbiter | None = None) -> GateResult:
    """Check the speculative loop's generated[seq][turn] of `seqs` against the target's greedy
    choice given the committed text (`teacher_forced`), arbitrating every divergence in fp32
    (`arbiter`: a run's, which may keep its fp32 copy between checks; else one for this check)."""
    if len(seqs) == 0:
        return GateResult()
    dtype = next(trunk.parameters()).dtype
    ref = teacher_forced(trunk, [docs[s] for s in seqs], [generated[s] for s in seqs], gen_tokens)
    res = GateResult(checked_sequences=len(seqs), passed=True)
    disputes = []       # (i, seq, turn, token index, speculative token, target-only token)
    for i, s in enumerate(seqs):
        for t, spec_toks in enumerate(generated[s]):
            ref_toks = ref.tokens[i, t]
            res.checked_tokens += len(spec_toks)
            diff = np.nonzero(np.asarray(spec_toks) != ref_toks)[0]
            if len(diff):
                g = int(diff[0])
                res.checked_tokens -= len(spec_toks) - g - 1    # the trajectories differ from here on
                disputes.append((i, s, t, g, int(spec_toks[g]), int(ref_toks[g])))
                break
    if not disputes:
        return res
    t32 = (arbiter or Arbiter(trunk)).get()
    z = fp32_logits(t32, [ref.history[i][:ref.gen_start[i, t] + g] for i, _, t, g, _, _ in disputes])
    del t32
    for (i, s, t, g, a, b), zi in zip(disputes, z):
        top1 = float(zi.max())
        m = float(zi.abs().max())
        fp32_margin = top1 - min(float(zi[a]), float(zi[b]))
        bound = resolution(dtype, m)
        ok = fp32_margin <= bound
        rec = dict(doc_id=int(docs[s].doc_id), turn=t, token=g, speculative=a, target_only=b,
                   margin=float(ref.margins[i, t, g]), fp32_margin=fp32_margin, fp32_top1=int(zi.argmax()),
                   magnitude=m, bound=bound, dtype=str(dtype).replace("torch.", ""),
                   verdict="near-tie" if ok else "clear margin")
        if not ok:
            rec["why"] = (f"fp32 margin {fp32_margin:.4g} > {bound:.4g}, what {rec['dtype']} can resolve at "
                          f"logit magnitude {m:.3g}")
        res.divergences += 1
        res.arbitrated += 1
        res.near_ties += ok
        res.margins.append(rec["margin"])
        res.arbitrations.append(rec)
        if not ok and res.passed:
            res.passed = False
            res.first_divergence = rec
    if res.first_divergence is None:
        res.first_divergence = res.arbitrations[0]
    return res


@torch.no_grad()
def forward_error(trunk, tokens: torch.Tensor, dtype: torch.dtype = torch.bfloat16) -> dict:
    """Calibrates FORWARD_ERROR: |logit in `dtype` - logit in fp32| of the same weights over every
    position and vocabulary entry of `tokens` [B, T] (uncached forwards), in units of u * m with
    m = the position's largest |fp32 logit|; plus the raw error binned by each logit's own
    magnitude (to show it does not follow it). bench/bench_logit_error.py prints it."""
    low = trunk_in(trunk, dtype)                 # the run's model ...
    t32 = trunk_in(low, torch.float32)           # ... and its arbiter: the same weights, upcast
    with _strict_fp32():
        tokens = tokens.to(next(t32.parameters()).device)
        z32 = t32.logits(t32.forward_train(tokens))
        zlo = low.logits(low.forward_train(tokens)).float()
    err = (zlo - z32).abs()
    m = z32.abs().amax(-1, keepdim=True)
    ratio = (err / (UNIT_ROUNDOFF[dtype] * m.clamp(min=1.0))).flatten().double()
    sample = ratio[torch.randperm(len(ratio), generator=torch.Generator().manual_seed(0))[:1_000_000]
                   .to(ratio.device)] if len(ratio) > 1_000_000 else ratio
    qs = (0.5, 0.99, 0.999)
    out = {"n_logits": int(ratio.numel()), "dtype": str(dtype).replace("torch.", ""),
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
