"""Per-cluster sums of one metric: the input every estimate of the statistics takes."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DocSums:
    """Per-cluster sums for one metric: y (numerator), n (denominator rows), y2 (sum y^2).
    A cluster is a document unless the Cells say otherwise (`doc_id` then holds cluster ids)."""

    metric: str
    doc_id: np.ndarray
    y: np.ndarray
    n: np.ndarray
    y2: np.ndarray
    unit: str = "document"

    @property
    def Y(self) -> float:
        return float(self.y.sum())

    @property
    def N(self) -> int:
        return int(self.n.sum())

    @property
    def value(self) -> float:
        return self.Y / self.N if self.N else float("nan")

    @property
    def iid_se(self) -> float:
        """sd of the mean treating rows as independent: the binomial sd for 0/1 y,
        the delta-method sd of sum(y)/sum(x) otherwise (same formula: y is 0 off-denominator)."""
        N, R = self.N, self.value
        if N == 0:
            return float("nan")
        ss = float(self.y2.sum()) - 2 * R * self.Y + R * R * N
        return float(np.sqrt(max(ss, 0.0)) / N)
