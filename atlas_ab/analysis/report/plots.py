"""Report figures (matplotlib, Agg: no display needed).

The first figure answers the question: each comparison's difference with the interval of
the sd that decides, zero and the minimum effect as lines, the verdict in the title. Per-arm
intervals that overlap while the difference is 9 sd from zero mislead; the difference does
not. The others: per-depth acceptance, the acceptance-length histogram, acceptance by turn.
Every interval is a 95% CI from the clustered sd (documents, or source files where the
workload cut several documents from one file); where that sd is not computed (too few
clusters), no interval is drawn and the panel says so.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from atlas_ab.analysis.criteria import DifferenceItem  # noqa: E402
from atlas_ab.analysis.metrics import ArmMetrics, Cells, doc_sums  # noqa: E402
from atlas_ab.analysis.stats import estimate  # noqa: E402

Z95 = 1.959964
MARKERS = "osD^v<>p*h"
LINES = ["-", "--", ":", "-."]


def _offsets(n: int, width: float = 0.8) -> np.ndarray:
    return (np.arange(n) - (n - 1) / 2) * width / max(n, 1)


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


_COLORS = {"MET": "tab:green", "NOT MET": "tab:red", "UNDERPOWERED": "tab:orange", "PREREG CHANGED": "tab:purple"}


def difference_figure(items: list[DifferenceItem], path: Path) -> Path:
    """One panel per comparison, each on its own scale: the difference with its 95% CI (thin) and
    +-threshold_sd sd (thick: the criterion needs it clear of zero), zero and the signed minimum
    effect (or an equivalence margin) as vertical lines, the verdict in the panel's title."""
    n = max(len(items), 1)
    fig, axes = plt.subplots(n, 1, figsize=(8, 1.15 * n + 0.6), squeeze=False)
    for ax, it in zip(axes[:, 0], items):
        color = _COLORS.get(it.verdict or "", "tab:blue")
        xs = [0.0, it.delta]
        if it.se is not None:
            half = max(Z95, it.threshold_sd or 0) * it.se
            xs += [it.delta - half, it.delta + half]
            ax.errorbar(it.delta, 0, xerr=Z95 * it.se, fmt="none", ecolor=color, elinewidth=1.2, capsize=5)
            if it.threshold_sd:
                ax.errorbar(it.delta, 0, xerr=it.threshold_sd * it.se, fmt="none", ecolor=color, elinewidth=6,
                            alpha=0.4)
        ax.plot(it.delta, 0, "o", color=color)
        if it.min_effect:
            m = it.min_effect if it.direction == "increase" else -it.min_effect
            ax.axvline(m, color="black", linestyle="--", linewidth=1)
            xs.append(m)
        if it.margin:
            for m in (-it.margin, it.margin):
                ax.axvline(m, color="black", linestyle=":", linewidth=1)
            xs += [-it.margin, it.margin]
        ax.axvline(0.0, color="grey", linewidth=1)
        lo, hi = min(xs), max(xs)
        pad = 0.15 * (hi - lo or abs(it.delta) or 1e-3)
        ax.set_xlim(lo - pad, hi + pad)
        ax.set_yticks([])
        z = (f"{abs(it.delta) / it.se:.1f} {it.se_kind} sd" if it.se else
             ("exactly equal" if it.se == 0 and it.delta == 0 else f"no {it.se_kind} sd"))
        ax.set_title(f"{it.label.replace(chr(10), '  ')}: {it.delta:+.4f} ({z})" +
                     (f"  {it.verdict}" if it.verdict else ""), fontsize=8, color=color, loc="left")
        ax.tick_params(axis="x", labelsize=7)
        ax.grid(axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel("difference (treatment - control); thin: 95% CI; thick: +-threshold sd (must clear 0); "
                           "dashed: minimum effect; dotted: equivalence margin", fontsize=7)
    return _save(fig, path)


def _intervals(ests) -> tuple[np.ndarray | None, str]:
    """yerr from the clustered sds, or None (and why) when any was not computed."""
    if any(e.cluster_se is None for e in ests):
        note = next(e.cluster_note for e in ests if e.cluster_se is None)
        return None, f"no intervals: {note}"
    return np.array([Z95 * e.cluster_se for e in ests]), "95% CI, clustered"


def depth_figure(cells: list[Cells], path: Path) -> Path:
    """p_i and p_i_cond per depth per arm, 95% CI from the clustered sd."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    off = _offsets(len(cells), 0.5)
    notes = set()
    for j, c in enumerate(cells):
        for ax, cond in zip(axes, (False, True)):
            depths = range(2 if cond else 1, c.K + 1)
            est = [estimate(doc_sums(c, f"p{i}_cond" if cond else f"p{i}"), n_boot=0) for i in depths]
            if not est:
                continue
            yerr, note = _intervals(est)
            notes.add(note)
            x = np.array(list(depths)) + off[j]
            ax.errorbar(x, [e.value for e in est], yerr=yerr, fmt=MARKERS[j % len(MARKERS)], capsize=4,
                        label=c.arm)
    axes[0].set_title("p_i: #(a >= i) / #(k >= i)")
    axes[1].set_title("p_i_cond: #(a >= i) / #(a >= i-1, k >= i)")
    K = max(c.K for c in cells)
    for ax, first in zip(axes, (1, 2)):
        ax.set_xlabel("depth i")
        ax.set_xticks(range(first, max(K, first) + 1))
        ax.set_xlim(first - 0.5, max(K, first) + 0.5)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("acceptance (" + "; ".join(sorted(notes)) + ")")
    axes[0].legend()
    return _save(fig, path)


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
    return _save(fig, path)


def turn_figure(cells: list[Cells], path: Path) -> Path:
    """p1 and p2_uncond per turn index (turn 0 is the cold turn), with the same interval kind as
    the depth figure (95% CI from the clustered sd); arms offset, each its own marker and line."""
    K = min(c.K for c in cells)
    metrics = ["p1"] + (["p2"] if K >= 2 else [])
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.5 * len(metrics), 4), squeeze=False)
    turns = sorted(set().union(*(set(c.table["turn"].unique()) for c in cells)))
    off = _offsets(len(cells), 0.4)
    notes = set()
    for ax, m in zip(axes[0], metrics):
        for j, c in enumerate(cells):
            ts = [t for t in turns if (c.table["turn"] == t).any()]
            est = [estimate(doc_sums(c.turn(int(t)), m), n_boot=0) for t in ts]
            yerr, note = _intervals(est)
            notes.add(note)
            ax.errorbar(np.array(ts, dtype=float) + off[j], [e.value for e in est], yerr=yerr,
                        fmt=MARKERS[j % len(MARKERS)], linestyle=LINES[j % len(LINES)], capsize=3, label=c.arm)
        name = "p2_uncond" if m == "p2" else m
        ax.set_title(f"{name} by turn (0 = cold)")
        ax.set_xlabel("turn")
        ax.set_ylabel(f"{name} (" + "; ".join(sorted(notes)) + ")")
        ax.set_xticks(turns)
        ax.grid(alpha=0.3)
        ax.legend()
    return _save(fig, path)


def confidence_figure(bins, break_even: float, path: Path) -> Path:
    """E[1 + accept_len] by chain-confidence bin (bars, with the step count) against the break-even
    of the measured costs: a bin above the line pays for its verify."""
    fig, ax = plt.subplots(figsize=(7, 4))
    x = (bins["lo"] + bins["hi"].clip(upper=1.0)) / 2
    ax.bar(x, bins["tokens"], width=0.085, color=["tab:green" if p else "tab:red" for p in bins["pays"]])
    for xi, t, n in zip(x, bins["tokens"], bins["n"]):
        if n:
            ax.annotate(f"{n:,}", (xi, t), textcoords="offset points", xytext=(0, 3), ha="center", fontsize=7)
    ax.axhline(break_even, color="black", linestyle="--", label=f"break-even {break_even:.2f} (c_spec / c_serial)")
    ax.set_xlabel("chain confidence (min top-1 prob over the drafts)")
    ax.set_ylabel("E[1 + accept_len] (tokens per verify step)")
    ax.set_title("DRAFT_CONF: does verifying pay, by confidence?")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def coverage_figure(cov, path: Path) -> Path:
    """Conditional top-j coverage per depth (SHADOW_TOPK), j = 1..k, all turns."""
    fig, ax = plt.subplots(figsize=(6, 4))
    depths = sorted({c.depth for c in cov.cells})
    for d in depths:
        cs = sorted((c for c in cov.cells if c.depth == d and c.turns == "all"), key=lambda c: c.j)
        ax.errorbar([c.j for c in cs], [c.rate for c in cs], yerr=[Z95 * c.se for c in cs], fmt="o-", capsize=3,
                    label=f"depth {d} (n={cs[0].n:,})")
    ax.set_xlabel("j (the target's token among the drafter's top j)")
    ax.set_ylabel("coverage (95% binomial CI)")
    ax.set_xticks(range(1, cov.topk + 1))
    ax.set_title("SHADOW_TOPK: conditional top-j coverage")
    ax.grid(alpha=0.3)
    ax.legend()
    return _save(fig, path)


def sequential_figure(looks: list[dict], path: Path, *, min_effect: float, direction: str, decided_at: int | None,
                      title: str, budget: float | None = None, line: str = "minimum effect") -> Path:
    """A sequential study's path: the estimate and its confidence sequence at each look against the
    documents seen (clusters where no study recorded them), zero and the signed minimum effect as
    lines (`line` names it: a non-inferiority's is its margin), the look that decided marked, and
    (`budget`: the documents its budget allowed) what it did not need to run shaded."""
    x = np.array([lk.get("documents") or lk["n_clusters"] for lk in looks], dtype=float)
    words = "documents seen" if all(lk.get("documents") for lk in looks) else "clusters seen"
    est = np.array([lk["estimate"] for lk in looks])
    lo, hi = np.array([lk["lower"] for lk in looks]), np.array([lk["upper"] for lk in looks])
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.fill_between(x, lo, hi, step="post" if len(x) > 1 else None, alpha=0.25, color="tab:blue",
                    label="confidence sequence")
    ax.plot(x, est, "o-", color="tab:blue", markersize=3, label="estimate (cluster mean)")
    m = min_effect if direction == "increase" else -min_effect
    ax.axhline(m, color="black", linestyle="--", linewidth=1, label=f"{line} {m:+g}")
    ax.axhline(0.0, color="grey", linewidth=1)
    if decided_at:
        lk = looks[decided_at - 1]
        ax.axvline(x[decided_at - 1], color=_COLORS.get(lk["decision"], "tab:green"), linestyle=":",
                   label=f"{lk['decision']} at look {decided_at}")
    if budget and budget > x[-1]:
        ax.axvspan(x[-1], budget, color="grey", alpha=0.12, label=f"not run (budget: {budget:,.0f})")
    ax.set_xlabel(words)
    ax.set_ylabel("difference (treatment - control)")
    ax.set_title(title, fontsize=9, loc="left")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _save(fig, path)


def ladder_throughput_figure(cells, path: Path, names: dict | None = None) -> Path:
    """Committed tokens/s against K at each batch width (one panel per width: scales differ by
    orders of magnitude), with the delta method's 95% interval; names: a family ladder's families."""
    what = "K" if names is None else "family"
    widths = sorted(cells["B"].unique())
    fig, axes = plt.subplots(1, len(widths), figsize=(3.2 * len(widths), 3.4), squeeze=False)
    for ax, b in zip(axes[0], widths):
        c = cells[cells["B"] == b].sort_values("K")
        ax.errorbar(c["K"], c["X"], yerr=[c["X"] - c["X_lo"], c["X_hi"] - c["X"]], marker="o", capsize=3)
        if (c["K"] == 0).any():
            ax.axhline(float(c.loc[c["K"] == 0, "X"].iloc[0]), color="gray", linestyle=":",
                       label="K=0 (plain)" if names is None else "plain decode")
        ax.set_title(f"B = {b}")
        ax.set_xlabel("K (drafts per step)" if names is None else "drafter family")
        if names is None:
            ax.set_xticks(c["K"])
        else:
            ax.set_xticks(c["K"], [names[k] for k in c["K"]], rotation=45, fontsize=7)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("committed tokens / s")
    if (cells["K"] == 0).any():
        axes[0][0].legend(fontsize=7)
    fig.suptitle(f"throughput against {what}, 95% intervals (delta method)")
    return _save(fig, path)


def ladder_figure(result, path: Path) -> Path:
    """The ladder: the K served against batch width; ties drawn as a bar over the tied K (a family
    ladder: the family, by its index, named on the axis)."""
    names = result.names
    what = "K" if names is None else "family"
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ch = sorted(result.choices.values(), key=lambda c: c.B)
    bs = [c.B for c in ch]
    ax.step(bs, [c.K for c in ch], where="post", color="tab:blue", label=f"{what} served")
    for c in ch:
        ks = (c.best,) + c.tied
        ax.vlines(c.B, min(ks), max(ks), color="tab:orange", linewidth=4, alpha=0.5)
        ax.plot(c.B, c.K, "o", color="tab:blue" if c.pays else "tab:red")
    ax.vlines([], 0, 0, color="tab:orange", linewidth=4, alpha=0.5, label=f"best and tied {what}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(bs, [str(b) for b in bs])
    ax.set_xlabel("batch width B")
    ax.set_ylabel(what)
    if names is None:
        ax.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    else:
        ax.set_yticks(sorted(names), [names[k] for k in sorted(names)], fontsize=7)
    ax.set_title("K ladder (red: no K pays)" if names is None else "family ladder (red: no family pays)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _save(fig, path)
