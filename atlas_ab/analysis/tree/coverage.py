"""`coverage RUN`: per-depth conditional top-k coverage of a SHADOW_TOPK run.

At depth i the drafter's draft is only used when drafts 1..i-1 were accepted,
so the question a tree-speculation build asks is conditional: over the steps
with k >= i and accept_len >= i-1 (exactly p{i}_cond's denominator), how often
is the target's token at depth i, `target[i-1]`, among the drafter's top j
candidates `topk_ids[i-1][:j]`? j = 1 is the draft itself when drafts are the
greedy argmax, so coverage@1 equals p{i}_cond; the table prints both, and the
share of steps whose top-1 is not the draft (when `drafts` is logged), so a
mismatch is explained rather than hidden. Each rate carries its binomial sd.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from atlas_ab import AtlasError
from atlas_ab.analysis.stats import binomial_se
from atlas_ab.telemetry.schema import TURN_CLASSES


@dataclass(frozen=True)
class CoverageCell:
    """Coverage at one (turn class, depth, j): `hits` of `n` steps had the target in the top j."""

    turns: str
    depth: int
    j: int
    hits: int
    n: int

    @property
    def rate(self) -> float:
        return self.hits / self.n if self.n else float("nan")

    @property
    def se(self) -> float:
        return binomial_se(self.rate, self.n)

    def to_dict(self) -> dict:
        # report.json keeps its keys: an se is written as "sd" (keys.JSON_KEY)
        return {"turns": self.turns, "depth": self.depth, "j": self.j, "hits": self.hits, "n": self.n,
                "rate": self.rate, "sd": self.se}


@dataclass(frozen=True)
class Coverage:
    arm: str
    K: int
    topk: int
    cells: tuple[CoverageCell, ...]
    p_cond: tuple[tuple[str, int, float], ...]   # (turns, depth, p{i}_cond by the docs' formula)
    top1_not_draft: int | None                    # denominator steps whose top-1 != draft (None: no drafts)
    n_checked_top1: int

    def at(self, depth: int, j: int, turns: str = "all") -> CoverageCell:
        for c in self.cells:
            if (c.turns, c.depth, c.j) == (turns, depth, j):
                return c
        raise KeyError((turns, depth, j))

    def p_cond_at(self, depth: int, turns: str = "all") -> float:
        for t, d, p in self.p_cond:
            if (t, d) == (turns, depth):
                return p
        raise KeyError((turns, depth))

    def summary(self) -> str:
        js = range(1, self.topk + 1)
        lines = [f"top-k coverage: {self.arm} (K={self.K}, top-{self.topk}); conditional on drafts "
                 "1..i-1 accepted; rate (binomial sd)", "",
                 "| turns | depth | n | p_cond | " + " | ".join(f"top-{j}" for j in js) + " |",
                 "|---|---|---|---|" + "---|" * self.topk]
        for turns, depth, p in self.p_cond:
            row = [self.at(depth, j, turns) for j in js]
            lines.append(f"| {turns} | {depth} | {row[0].n:,} | {p:.4f} | "
                         + " | ".join(f"{c.rate:.4f} ({c.se:.4f})" for c in row) + " |")
        if self.top1_not_draft is None:
            lines.append("\n(no drafts column: top-1 == draft, hence top-1 == p_cond, not checked)")
        elif self.top1_not_draft:
            lines.append(f"\nWARNING: top-1 != draft on {self.top1_not_draft:,} of {self.n_checked_top1:,} "
                         "(step, depth) pairs (drafts are not the greedy argmax there), so top-1 != p_cond")
        else:
            lines.append(f"\ntop-1 == draft on all {self.n_checked_top1:,} (step, depth) pairs, so top-1 == p_cond")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"arm": self.arm, "K": self.K, "topk": self.topk,
                "cells": [c.to_dict() for c in self.cells],
                "p_cond": [{"turns": t, "depth": d, "p_cond": p} for t, d, p in self.p_cond],
                "top1_not_draft": self.top1_not_draft, "n_checked_top1": self.n_checked_top1}


def _check_lengths(spec: pd.DataFrame, col: str, need: np.ndarray) -> None:
    """Every speculative step must list at least `need` entries of `col` (one per depth)."""
    have = spec[col].map(lambda v: 0 if v is None else len(v)).to_numpy()
    short = have < need
    if short.any():
        r = spec.iloc[int(np.argmax(short))]
        raise AtlasError(f"step (doc_id, turn, step) = ({r.doc_id}, {r.turn}, {r.step}): k={r.k} "
                         f"but {col} has {have[short][0]} entries")


def _depth(col: pd.Series, i: int) -> list:
    """Entry i-1 of each row's list (lengths checked by _check_lengths)."""
    return [v[i - 1] for v in col]


def _padded(rows: list, width: int) -> np.ndarray:
    """[n, width] int64 candidate ids, -1 where a depth listed fewer than `width`."""
    a = np.full((len(rows), width), -1, np.int64)
    for r, ids in enumerate(rows):
        ids = np.asarray(ids, dtype=np.int64)[:width]
        a[r, :ids.size] = ids
    return a


def topk_coverage(steps: pd.DataFrame, arm: str = "") -> Coverage:
    """Per-depth conditional top-k coverage (pure): see the module docstring."""
    for c in ("topk_ids", "target"):
        if c not in steps.columns or steps[c].isna().all():
            raise AtlasError(f"{arm or 'run'}: no {c!r} column (was SHADOW_TOPK on?)")
    spec = steps[steps["k"] >= 1]
    if len(spec) == 0:
        raise AtlasError(f"{arm or 'run'}: no speculative steps (k >= 1)")
    K = int(spec["k"].max())
    topk = int(max((len(d) for ids in spec["topk_ids"] if ids is not None for d in ids), default=0))
    if topk == 0:
        raise AtlasError(f"{arm or 'run'}: topk_ids lists no candidates")
    has_drafts = "drafts" in steps.columns and spec["drafts"].notna().all()
    k = spec["k"].to_numpy()
    for col in ("topk_ids", "target") + (("drafts",) if has_drafts else ()):
        _check_lengths(spec, col, k)

    cells, p_cond = [], []
    not_draft = checked_top1 = 0
    a = spec["accept_len"].to_numpy()
    warm = spec["turn"].to_numpy() >= 1
    for i in range(1, K + 1):
        den = (k >= i) & (a >= i - 1)           # p{i}_cond's denominator
        sub = spec[den]
        target = np.asarray(_depth(sub["target"], i), dtype=np.int64)
        ids = _padded(_depth(sub["topk_ids"], i), topk)
        # rank of the target among the candidates (topk when absent): hit at j iff rank < j
        match = ids == target[:, None]
        rank = np.where(match.any(axis=1), match.argmax(axis=1), topk)
        accepted = a[den] >= i
        if has_drafts:
            draft = np.asarray(_depth(sub["drafts"], i), dtype=np.int64)
            not_draft += int((ids[:, 0] != draft).sum())
            checked_top1 += len(draft)
        w = warm[den]
        for turns in TURN_CLASSES:
            sel = {"all": np.ones_like(w), "cold": ~w, "warm": w}[turns]
            n = int(sel.sum())
            if n == 0:
                continue
            p_cond.append((turns, i, float(accepted[sel].mean())))
            r = rank[sel]
            cells += [CoverageCell(turns, i, j, int((r < j).sum()), n) for j in range(1, topk + 1)]
    return Coverage(arm, K, topk, tuple(cells), tuple(p_cond),
                    not_draft if has_drafts else None, checked_top1)
