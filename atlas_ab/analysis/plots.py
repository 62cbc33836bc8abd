"""Report figures (matplotlib, Agg: no display needed): per-depth acceptance with CIs,
the acceptance-length histogram, and acceptance by turn."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from atlas_ab.analysis.metrics import ArmMetrics, Cells, doc_sums  # noqa: E402
from atlas_ab.analysis.stats import estimate  # noqa: E402

Z95 = 1.959964


def _offsets(n: int, width: float = 0.8) -> np.ndarray:
    return (np.arange(n) - (n - 1) / 2) * width / max(n, 1)


def depth_figure(cells: list[Cells], path: Path) -> Path:
    """p_i and p_i_cond per depth per arm, 95% CI from the document-clustered sd."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    off = _offsets(len(cells))
    for j, c in enumerate(cells):
        for ax, cond in zip(axes, (False, True)):
            depths = range(2 if cond else 1, c.K + 1)
            est = [estimate(doc_sums(c, f"p{i}_cond" if cond else f"p{i}"), B=0) for i in depths]
            if not est:
                continue
            x = np.array(list(depths)) + off[j]
            ax.errorbar(x, [e.value for e in est], yerr=[Z95 * e.cluster_sd for e in est],
                        fmt="o", capsize=4, label=c.arm)
    axes[0].set_title("p_i: #(a >= i) / #(k >= i)")
    axes[1].set_title("p_i_cond: #(a >= i) / #(a >= i-1, k >= i)")
    K = max(c.K for c in cells)
    for ax, first in zip(axes, (1, 2)):
        ax.set_xlabel("depth i")
        ax.set_xticks(range(first, max(K, first) + 1))
        ax.set_xlim(first - 0.5, max(K, first) + 0.5)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("acceptance (95% CI, documents clustered)")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def histogram_figure(arms: list[ArmMetrics], path: Path) -> Path:
    """Share of verify steps at each accept_len, per arm, one panel per k."""
    ks = sorted({k for a in arms for (tc, k) in a.histogram.index if tc == "all"})
    fig, axes = plt.subplots(1, max(len(ks), 1), figsize=(5 * max(len(ks), 1), 4), squeeze=False)
    off = _offsets(len(arms))
    for ax, k in zip(axes[0], ks):
        for j, a in enumerate(arms):
            if ("all", k) not in a.histogram.index:
                continue
            row = a.histogram.loc[("all", k)].to_numpy()[: k + 1].astype(float)
            ax.bar(np.arange(k + 1) + off[j], row / row.sum(), width=0.8 / len(arms),
                   label=f"{a.arm} (n={int(row.sum()):,})")
        ax.set_title(f"k = {k}")
        ax.set_xlabel("accept_len")
        ax.set_xticks(range(k + 1))
        ax.legend()
    axes[0][0].set_ylabel("share of verify steps")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def turn_figure(arms: list[ArmMetrics], path: Path) -> Path:
    """p1 and p2_uncond per turn index (turn 0 is the cold turn), +-1.96 binomial sd."""
    metrics = [m for m in ("p1", "p2_uncond") if all(m in a.by_turn for a in arms)]
    fig, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 4), squeeze=False)
    for ax, m in zip(axes[0], metrics):
        for j, a in enumerate(arms):
            p, n = a.by_turn[m].to_numpy(float), a.by_turn[f"n_{m}"].to_numpy(float)
            sd = np.sqrt(p * (1 - p) / np.where(n > 0, n, np.nan))
            ax.errorbar(a.by_turn.index + 0.06 * (j - (len(arms) - 1) / 2), p, yerr=Z95 * sd,
                        fmt="o-", capsize=3, label=a.arm)
        ax.set_title(f"{m} by turn (0 = cold; 95% binomial CI)")
        ax.set_xlabel("turn")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
