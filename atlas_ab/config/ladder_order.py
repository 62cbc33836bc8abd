"""A ladder sweep's run order: every (B, K) cell in `replicates` independent jobs, interleaved at random.

The sweep is one Hydra parameter, `study.slot` = 0 .. N - 1 (N = widths x (k_max + 1) x replicates), and
each job reads its batch width, K and replicate from its slot (the `atlas.ladder_cell` resolver):
replicate r is block r of the order, holding every cell once, in an order drawn from
numpy's default_rng([order_seed, r]) (a randomized complete block design). So no cell's replicates
run back to back, K never follows K in a fixed sweep, and drift over the sweep and the host's state
fall on every K alike. Each job's manifest records its slot, replicate and the seed (its resolved
config), so the order is known from the runs.

`study.block=r` sweeps replicate r's slots alone. The shipped protocol runs each replicate as its own
process (scripts/gpu.sh ladder): on one H200, eight processes of the same 5.7B B=1 sweep differed in
a cell's mean by up to 6% where a process's own jobs agreed to ~2%, which is what two fresh machines
had differed by (analysis/reports/ladder_h200_2026-12-03_processes/README.md, "One machine, eight processes").
So a process carries an effect its own jobs share, and only replicates in separate processes put it
inside the interval.
"""
from __future__ import annotations

import numpy as np


def grid(widths, k_max: int) -> list[tuple[int, int]]:
    """The cells (B, K), K = 0 (plain decode) .. k_max at each width, in the grid's own order."""
    return [(int(b), k) for b in widths for k in range(int(k_max) + 1)]


def order(widths, k_max: int, replicates: int, seed: int) -> list[tuple[int, int, int]]:
    """[(B, K, replicate)] in run order: block r holds every cell once, shuffled by its own seeded draw."""
    cells = grid(widths, k_max)
    out = []
    for r in range(int(replicates)):
        perm = np.random.default_rng([int(seed), r]).permutation(len(cells))
        out += [(*cells[i], r) for i in perm]
    return out


def slots(widths, k_max: int, replicates: int, block=None) -> str:
    """0,1,..,N-1 as a sweep's choices (N jobs: every cell in every replicate); `block` r: replicate r's
    slots alone, so that each replicate can run in its own process (module docstring)."""
    n, R = len(grid(widths, k_max)), max(int(replicates), 1)
    if block is None:
        return ",".join(str(i) for i in range(n * R))
    if isinstance(block, bool) or not isinstance(block, int) or not 0 <= block < R:
        raise ValueError(f"study.block={block!r}: a replicate 0 .. {R - 1} (study.replicates={R}), or null for all")
    return ",".join(str(i) for i in range(block * n, (block + 1) * n))


def cell(slot: int, widths, k_max: int, replicates: int, seed: int, what: str) -> int:
    """The batch width (B), K (K) or replicate (r) of the job at `slot` of the order."""
    o = order(widths, k_max, max(int(replicates), 1), seed)
    b, k, r = o[int(slot) % len(o)] if o else (0, 0, 0)
    return {"B": b, "K": k, "r": r}[what]


def family_at(families, index: int) -> str:
    """A family ladder's option at `index` of study.families (the grid's second coordinate is the
    family's index there, 0 .. len - 1: the same order, slots and blocks as K's)."""
    fams = list(families)
    if not fams:
        raise ValueError("study.families is empty: a family ladder needs at least two families")
    return str(fams[int(index)])


def last_index(families) -> int:
    """len(study.families) - 1: a family ladder's k_max (its options are indexed 0 .. k_max)."""
    return len(list(families)) - 1
