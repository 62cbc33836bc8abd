"""A ladder's result in words: the acceptance table, the (B, option) cells with their intervals and each width's
answer, for the K ladder and the family ladder alike (an option is K's number or the family's name)."""
from __future__ import annotations

import math

from atlas_ab.analysis.ladder.fitting import LadderResult, label, norm_cdf
from atlas_ab.analysis.stats.replicates import SINGLE


def summary(res: LadderResult) -> str:
    """The ladder (or family ladder) as text: its acceptance, its cells and each width's answer."""
    lvl = f"{2 * norm_cdf(res.z) - 1:.0%}"
    reps = sorted(set(res.cells["replicates"]))
    fam = res.names is not None
    o = "family" if fam else "K"

    def cell(k) -> str:             # an option in a table cell: K's number, or the family's name
        return str(res.names[k]) if fam else str(k)

    def cells_of(ks) -> str:
        return ", ".join(cell(k) for k in ks)

    lines = [("Family ladder: committed tokens/s = B x E[1 + accepted | family] / step time; " if fam else
              "K ladder: committed tokens/s = B x E[1 + accepted | K] / step time; ") + f"{lvl} intervals, "
             f"{res.method} decides ties" + (f" (bootstrap: {res.n_boot:,} draws)" if res.n_boot else ""),
             f"replicates per cell: {', '.join(map(str, reps))}" + (
                 f": {SINGLE} (a cell timed in one job has only its step-to-step spread, which misses what "
                 "differs between jobs)" if res.single_replicate else
                 f" on {res.machines} machines (random effects over each machine's replicates, then over the "
                 "machines, decide)" if res.machines > 1 else " (random effects over replicates decide)"),
             "", f"| {o} | {'steps' if fam else 'verify steps'} | clusters | E[1 + accepted] | se | per-depth p_cond |",
             "|---|---|---|---|---|---|"]
    for r in res.acceptance.itertuples():
        ps = ", ".join("-" if p != p else f"{p:.3f}" for p in r.p_cond)     # NaN: the source gives no depths
        lines.append(f"| {cell(r.K)} | {r.steps:,} | {r.clusters} | {r.E:.4f} | {r.E_se:.4f} | {ps or '-'} |")
    lines += ["", f"| B | {o} | step ms | se | tokens/s | delta interval | bootstrap interval | replicates | "
              "I^2 | Q p |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in res.cells.itertuples():
        boot = "-" if r.X_boot_lo is None or not math.isfinite(r.X_boot_lo) else \
            f"[{r.X_boot_lo:,.0f}, {r.X_boot_hi:,.0f}]"
        het = ("- | -" if r.replicates < 2 else
               f"{r.i2:.0%} | {r.q_p:.3g}" + (" (replicates disagree)" if r.disagree else ""))
        lines.append(f"| {r.B} | {cell(r.K)} | {r.t_ms:.3f} | {r.t_se:.3f} | {r.X:,.0f} | "
                     f"[{r.X_lo:,.0f}, {r.X_hi:,.0f}] | {boot} | {r.replicates} | {het} |")
    lines += ["", f"| B | serve {o} | best {o} | over {label(0, res.names)} | over next-best | tied | answer |",
              "|---|---|---|---|---|---|---|"]
    for b, c in sorted(res.choices.items()):
        o0 = c.over_0.words(res.method) if c.over_0 else "-"
        on = f"{c.over_next.words(res.method)} ({label(c.over_next.over, res.names)})" if c.over_next else "-"
        lines.append(f"| {b} | {cell(c.K)} | {cell(c.best)} | {o0} | {on} | {cells_of(c.tied) or '-'} | "
                     + (f"({SINGLE}) " if res.single_replicate else "") + f"{c.verdict(res.method)} |")
    lines += [(f"note: B={r.B} {label(r.K, res.names)}: its {r.machines} machines disagree beyond their spreads "
               f"(Cochran's Q p {r.q_p:.3g}, I^2 {r.i2:.0%}): a per-machine effect on this cell" if r.machines > 1 else
               f"note: B={r.B} {label(r.K, res.names)}: its {r.replicates} replicates disagree beyond their spreads "
               f"(Cochran's Q p {r.q_p:.3g}, I^2 {r.i2:.0%}): a stall, or graphs built differently, in one of its "
               "jobs?")
              for r in res.cells.itertuples() if r.disagree]
    lines += [f"note: {n}" for n in res.notes]
    return "\n".join(lines)
