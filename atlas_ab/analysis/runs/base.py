"""The run type every judgement takes: what a loaded run is, whatever its grain.

A step run (load.Run) holds one row per step; a unit run (unit_runs.UnitRun) holds per-unit counts
(an engine run ingested at the request or counter grain, or a step run reduced to its units).
Both derive from AnyRun and answer what their grain can give through its methods, so the
analysis asks a run instead of looking for its attributes. Both also carry `path`, `arm`,
`manifest`, `warnings` and `telemetry` (an ingested run's grain; None for our own runs).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from atlas_ab.analysis.metrics import Cells, Units


class AnyRun(ABC):
    """A loaded run at its grain (see the module docstring), and what its manifest says."""

    path: Path
    arm: str
    manifest: dict | None
    warnings: tuple[str, ...]

    @property
    @abstractmethod
    def has_steps(self) -> bool:
        """Per-step rows: turn classes, matched positions, the per-depth and per-turn figures."""

    @property
    @abstractmethod
    def K(self) -> int:
        """The arm's K: the most drafts one step verified."""

    @abstractmethod
    def cells(self) -> Cells | Units:
        """The run's counts in its own clusters (what metrics.compare and metrics.doc_sums read)."""

    @abstractmethod
    def declared_clusters(self, unit: str) -> tuple[np.ndarray | None, str]:
        """(doc_id -> cluster map or None, the unit in words) for a registered cluster unit
        (`document` or `source_file`); a unit run clusters by its own documents or requests."""

    @abstractmethod
    def counts(self, clusters: tuple) -> Cells | Units:
        """The run's counts clustered as `declared_clusters` answered."""

    @abstractmethod
    def of_turns(self, turns: str) -> AnyRun:
        """The run restricted to a turn class: all, cold (turn 0) or warm (turns >= 1)."""

    @abstractmethod
    def rows_per_cluster(self, cmap, ids: np.ndarray) -> np.ndarray:
        """[len(ids)] the run's rows in each cluster of `ids` (clusters by `cmap`, doc_id -> cluster,
        or documents): a step run's steps, a unit run's verify steps (by its own cluster map)."""

    @property
    def gate_status(self) -> str:
        """passed | failed | not run | unknown (no manifest gate)."""
        g = (self.manifest or {}).get("gate")
        if not g:
            return "unknown"
        return g.get("status") or {True: "passed", False: "failed", None: "not run"}[g.get("passed")]

    @property
    def status(self) -> str:
        return (self.manifest or {}).get("status", "external")

    def hash(self, section: str) -> str | None:
        """`workload.hash` / `model.hash` from the manifest (None without one)."""
        return ((self.manifest or {}).get(section) or {}).get("hash")


def rows_in(doc: np.ndarray, weight: np.ndarray, cmap, ids: np.ndarray) -> np.ndarray:
    """[len(ids)] the summed `weight` of the rows (documents `doc`) in each cluster of `ids`."""
    unit = doc if cmap is None else np.asarray(cmap, np.int64)[doc]
    u, inv = np.unique(unit, return_inverse=True)
    c = np.bincount(inv, weights=weight).astype(np.int64)
    pos = np.minimum(np.searchsorted(u, ids), len(u) - 1)
    return np.where(u[pos] == ids, c[pos], 0)
