"""The lossless gate: speculative greedy output must equal target-only greedy.

A sample of each wave's sequences is checked TEACHER-FORCED: one uncached causal forward of the
target alone (`forward_train`, no KV cache, none of the loop's code) over each sequence's whole
committed text, and at every generated position the target's argmax given the committed text
before it must be the token the loop committed there. Greedy decoding commits exactly the tokens
that pass this test, so up to the first mismatch the committed text IS the target-only greedy text,
and the first mismatch is where a one-token-per-forward replay would diverge: the two checks agree
in exact arithmetic, and this one costs one forward per sequence instead of one per token. Past a
divergence the check goes on: the target's argmax given the committed text is as well defined
there as before, so every generated token of a gated sequence is checked (`checked_tokens`).

On the CPU in fp32 the two agree exactly (the tests hold it to 0 divergences). In bf16 a
multi-token verify and a whole-text forward round differently, so a divergence at a near-tie is
not a bug and one at a clear margin is. Every divergence is therefore ARBITRATED: the disputed
position's logits are recomputed in fp32 from the same context (the committed prefix up to it,
on which both paths agree; one fp32 forward per disputed sequence serves all its divergences), and
the divergence passes only if both disputed tokens are within what the run's dtype can resolve of
the fp32 top-1 (the run's `precision.NearTieBound`, measured for its checkpoint, dtype and device),
else the run fails. Each arbitration is recorded (GateResult.arbitrations -> the manifest's gate).

The fp32 arbiter is a float32 copy of the trunk, built on the trunk's device only when a
divergence needs it; a run keeps it for its later waves where the GPU has room for it (`Arbiter`),
else it is dropped when the check ends. At 5.7B that is 23 GB next to the 11.4 GB
of bf16 weights, fine on an H200; a layer-by-layer upcast would bound the memory to one layer,
but it would walk the model's layers outside the model's own forward, a second forward to keep
right; the copy runs the trunk's own `forward_train`, the path the transformers-equality tests
already check.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from atlas_ab.speculative.gate_status import status_of
from atlas_ab.speculative.precision import CEILING, NearTieBound, dtype_name, strict_fp32, trunk_in


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
    near_tie_bound: dict | None = None                 # the bound arbitrated against (precision.NearTieBound)

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
def fp32_logits(t32, texts: list[np.ndarray], at: list[list[int]]) -> list[torch.Tensor]:
    """fp32 logits [n_i, V] of the next token after positions at[i] of texts[i]: one uncached
    causal forward of each text up to its last such position (a few texts at a time, within
    GATE_TOKENS; right-padded, which a causal forward never sees from the rows before it)."""
    dev = next(t32.parameters()).device
    cut = [np.asarray(x[:max(p) + 1]) for x, p in zip(texts, at)]
    out = []
    with strict_fp32():
        i = 0
        while i < len(cut):
            j = i + 1
            while j < len(cut) and (j + 1 - i) * max(len(c) for c in cut[i:j + 1]) <= GATE_TOKENS:
                j += 1
            T = max(len(c) for c in cut[i:j])
            tok = torch.zeros(j - i, T, dtype=torch.long)
            for r, c in enumerate(cut[i:j]):
                tok[r, :len(c)] = torch.as_tensor(c)
            h = t32.forward_train(tok.to(dev))                                          # [P, T, H]
            for r in range(j - i):
                out.append(t32.logits(h[r, torch.as_tensor(at[i + r], device=dev)][None])[0].float())  # [n, V]
            i = j
    return out


def check(trunk, docs, generated, gen_tokens: int, seqs, arbiter: Arbiter | None = None,
          bound: NearTieBound = CEILING) -> GateResult:
    """Check every generated token of `seqs` (the loop's generated[seq][turn]) against the
    target's greedy choice given the committed text (`teacher_forced`), arbitrating every
    divergence in fp32 against `bound` (the run's; the ceiling by default). `arbiter`: a run's,
    which may keep its fp32 copy between checks; else one for this check."""
    if len(seqs) == 0:
        return GateResult()
    dtype = next(trunk.parameters()).dtype
    ref = teacher_forced(trunk, [docs[s] for s in seqs], [generated[s] for s in seqs], gen_tokens)
    res = GateResult(checked_sequences=len(seqs), passed=True, near_tie_bound=bound.to_dict())
    disputes: dict[int, list] = {}       # i -> [(turn, token index, speculative token, target-only token)]
    for i, s in enumerate(seqs):
        for t, spec_toks in enumerate(generated[s]):
            spec = np.asarray(spec_toks, dtype=np.int64)                                # [G]
            res.checked_tokens += len(spec)
            for g in np.nonzero(spec != ref.tokens[i, t, :len(spec)])[0]:
                disputes.setdefault(i, []).append((t, int(g), int(spec[g]), int(ref.tokens[i, t, g])))
    if not disputes:
        return res
    t32 = (arbiter or Arbiter(trunk)).get()
    order = list(disputes)
    z = fp32_logits(t32, [ref.history[i] for i in order],
                    [[int(ref.gen_start[i, t]) + g - 1 for t, g, _, _ in disputes[i]] for i in order])
    del t32
    for i, zs in zip(order, z):
        s = seqs[i]
        for (t, g, a, b), zi in zip(disputes[i], zs):
            top1 = float(zi.max())
            m = float(zi.abs().max())
            fp32_margin = top1 - min(float(zi[a]), float(zi[b]))
            tol = bound.resolution(dtype, m)
            ok = fp32_margin <= tol
            rec = dict(doc_id=int(docs[s].doc_id), turn=t, token=g, speculative=a, target_only=b,
                       margin=float(ref.margins[i, t, g]), fp32_margin=fp32_margin, fp32_top1=int(zi.argmax()),
                       magnitude=m, bound=tol, dtype=dtype_name(dtype),
                       verdict="near-tie" if ok else "clear margin")
            if not ok:
                rec["why"] = (f"fp32 margin {fp32_margin:.4g} > {tol:.4g}, what {rec['dtype']} can resolve at "
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
