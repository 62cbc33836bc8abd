"""The lossless gate: speculative greedy output must equal target-only greedy.

A sample of each wave's sequences is replayed with the target alone, one token
at a time, over the same documents and turns, and compared token for token
with what the speculative loop committed. On CPU in fp32 they must agree
exactly. In bf16 a multi-token verify and a one-token decode round differently,
so a divergence passes only at a near-tie: where the replay's top-1 / top-2
logit margin is within the dtype's rounding (`NEAR_TIE`). A divergence at a
clear margin fails the run, naming the first divergent position. After a
divergence the two trajectories differ, so that sequence is not compared
further.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch

from atlas_ab.engine import status_of

# Margin (in logits, relative to the top-1 logit's magnitude) under which two
# paths of the same dtype may legitimately pick different argmaxes.
# fp32: one ulp is ~1.2e-7 relative; sums of ~1e3 terms in another order move
# logits by ~1e-6 relative, so 1e-5 is rounding. bf16: 8 mantissa bits
# (2^-8 = 0.4%) per rounding, compounded over layers; 2e-2 relative.
NEAR_TIE = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 5e-3}


@dataclass
class GateResult:
    checked_sequences: int = 0
    checked_tokens: int = 0
    divergences: int = 0
    near_ties: int = 0
    passed: bool | None = None          # None: nothing was checked
    margins: list = field(default_factory=list)
    first_divergence: dict | None = None

    @property
    def status(self) -> str:
        """passed | failed | not run (a gate that checked nothing never reads as passed)."""
        return status_of(self.passed, self.checked_sequences)

    def to_dict(self) -> dict:
        return {**asdict(self), "status": self.status}


def replay_greedy(trunk, docs, gen_tokens: int):
    """Target-only greedy over docs x turns, batched, one token per forward (`trajectory.greedy`,
    which also builds replay mode's trajectories). Returns generated[seq][turn] (G tokens) and
    margins[seq][turn] (top1-top2, top1)."""
    from atlas_ab.trajectory import greedy

    traj = greedy(trunk, docs, gen_tokens)
    return traj.generated(), traj.turn_margins()


def check(trunk, docs, generated, gen_tokens: int, seqs) -> GateResult:
    """Compare the speculative loop's generated[seq][turn] with a target-only replay of `seqs`."""
    if len(seqs) == 0:
        return GateResult()
    dtype = next(trunk.parameters()).dtype
    tol = NEAR_TIE.get(dtype, 1e-5)
    ref, margins = replay_greedy(trunk, [docs[s] for s in seqs], gen_tokens)
    res = GateResult(checked_sequences=len(seqs), passed=True)
    for i, s in enumerate(seqs):
        for t, (spec_toks, ref_toks) in enumerate(zip(generated[s], ref[i])):
            diverged = False
            for g, (a, b) in enumerate(zip(spec_toks, ref_toks)):
                res.checked_tokens += 1
                if a == b:
                    continue
                gap, top1 = margins[i][t][g]
                near = gap <= tol * max(1.0, abs(top1))
                res.divergences += 1
                res.near_ties += near
                res.margins.append(gap)
                where = dict(doc_id=int(docs[s].doc_id), turn=t, token=g, speculative=int(a),
                             target_only=int(b), margin=gap, near_tie=bool(near))
                if res.first_divergence is None:
                    res.first_divergence = where
                if not near:
                    res.passed = False
                diverged = True
                break
            if diverged:
                break       # the trajectories differ from here on
    return res
