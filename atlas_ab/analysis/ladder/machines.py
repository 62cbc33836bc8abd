"""A cell timed on several machines: its replicates pooled per machine, then the machines pooled above them.

Two fresh H200s ran the same 5.7B ladder (analysis/reports/ladder_h200_2026-12-03/README.md): within one
machine a cell's three jobs agreed to ~1.5%, between the machines the same cell moved by up to 5.6%, so
a machine adds a per-cell effect its own replicates cannot see. Where that matters (near-ties), the
timing must be replicated on several machines, and the interval must hold the spread between them.

Two stages, each the package's one random-effects definition (stats/replicates.random_effects): a
machine's replicates give its pooled mean m_j with se s_j (the between-job variance inside it); the
machines' (m_j, s_j^2) are then pooled the same way, so the between-machine variance is inside the
cell's se, with a t of M - 1 df (two machines: 1 df, t = 12.7 at 95%: two machines settle only what
they agree on by a wide margin). One machine is the one-stage pool of its replicates.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from atlas_ab import AtlasError
from atlas_ab.analysis.stats.replicates import Z95, RandomEffects, random_effects


@dataclass(frozen=True)
class OnMachines:
    """One cell's step times: per machine, one array [n] of batched step ms per replicate job."""
    machines: tuple[tuple[np.ndarray, ...], ...]

    @property
    def replicates(self) -> list[np.ndarray]:
        """Every job's step times, machine after machine."""
        return [t for m in self.machines for t in m]

    def __len__(self) -> int:
        return len(self.replicates)


def one_stage(reps, z: float = Z95) -> RandomEffects:
    """Replicates pooled: each job's mean step with its within-job se^2 (s^2 / n)."""
    return random_effects([float(np.mean(t)) for t in reps],
                          [(float(np.std(t, ddof=1)) / math.sqrt(len(t))) ** 2 for t in reps], z)


def pool(cell, z: float = Z95) -> RandomEffects:
    """A cell's pooled mean step: over its machines (two stages) or its replicates (one)."""
    if not isinstance(cell, OnMachines):
        return one_stage(cell, z)
    if len(cell.machines) < 2:
        raise AtlasError("ladder: timing on machines needs >= 2 machines (one machine is its replicates alone)")
    per = [one_stage(m, z) for m in cell.machines]
    return random_effects([p.mean for p in per], [p.se ** 2 for p in per], z)


def on_machines(per_machine: list[dict]) -> dict:
    """(B, K) -> OnMachines from one {(B, K): [replicate arrays]} per machine, over the cells every machine
    timed (a cell one machine lacks is refused: its between-machine spread would be unknown)."""
    cells = set(per_machine[0])
    for i, m in enumerate(per_machine[1:], 2):
        if set(m) != cells:
            diff = sorted(cells.symmetric_difference(m))[0]
            raise AtlasError(f"ladder --machines: machine {i} and machine 1 timed different cells (B={diff[0]} "
                             f"K={diff[1]} is in one only); every machine must time the same grid")
    return {c: OnMachines(tuple(tuple(m[c]) for m in per_machine)) for c in sorted(cells)}
