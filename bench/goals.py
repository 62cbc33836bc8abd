"""Issue 23's speed goals, printed beside what a bench run measured.

A goal is a ratio taken in one run (the runner's step over its graphed bare verify, the
forward over its memory/FLOP bound, FINGERPRINTS on over off), its target, and whether the
run met it. A goal the run did not measure is listed as such, never guessed.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from statistics import median
from typing import Optional

# The H200's rated HBM3e bandwidth (vendor datasheet, 4.8 TB/s), printed beside the measured copy
# bandwidth: the bound uses the measured one, which varied 2.76-4.25 TB/s between calls.
RATED_BYTES_PER_S = {"NVIDIA H200": 4.8e12}


@dataclass(frozen=True)
class Goal:
    name: str
    target: float
    measured: Optional[float]
    higher_is_better: bool = False
    detail: str = ""

    @property
    def met(self) -> Optional[bool]:
        if self.measured is None or self.target != self.target:      # nan target: shown, not judged
            return None
        return self.measured >= self.target if self.higher_is_better else self.measured <= self.target

    def line(self) -> str:
        op = ">=" if self.higher_is_better else "<="
        got = "not measured in this run" if self.measured is None else f"{self.measured:.3f}"
        target = "-" if self.target != self.target else f"{op} {self.target:g}"      # nan: shown, not judged
        verdict = {True: "MET", False: "NOT MET", None: "-"}[self.met]
        return f"| {self.name} | {target} | {got} | {verdict} | {self.detail} |"

    def as_dict(self) -> dict:
        return {**asdict(self), "met": self.met}


def table(goals: list[Goal]) -> str:
    return "\n".join(["| goal | target | measured | verdict | how |", "|---|---|---|---|---|",
                      *(g.line() for g in goals)])


def worst(values: list[float]) -> Optional[float]:
    """A goal over several shapes holds only if it holds at the worst of them."""
    return max(values) if values else None


def runner_goals(grid: list[dict], levers: dict) -> list[Goal]:
    """From bench_runner's grid rows (model, B, K, step_over_bare) and lever ratios."""
    def over(model, Bs, Ks):
        return [r["step_over_bare"] for r in grid if r["model"] == model and r["B"] in Bs and r["K"] in Ks
                and r.get("grid_arm", "plain") == "plain"]       # the goals are the plain arm's
    fp = levers.get("fingerprints") or {}
    alternations = fp.get("run_ratios") or []
    return [
        Goal("runner step / bare verify, 33.6M preset, B=64 K=2", 1.3, worst(over("gpu", (64,), (2,)))),
        Goal("runner step / bare verify, 5.7B shape, B=16,64 K=1-3", 1.1, worst(over("llama8b", (16, 64), (1, 2, 3))),
             detail="worst of the shapes measured"),
        Goal("FINGERPRINTS on / off throughput", 0.95, median(alternations) if len(alternations) >= 5 else None,
             higher_is_better=True,
             detail=f"median of {len(alternations)} alternations"
             + (f" (they ranged {min(alternations):.3f}-{max(alternations):.3f})" if alternations else "")
             + ("" if len(alternations) >= 5 else " (< 5: not judged)")),
    ]


def forward_goals(grid: list[dict], rated_grid: list[dict] | None = None) -> list[Goal]:
    """From bench_forward's grid rows (shape, ratio_new = forward / bound). The bound at the copy
    bandwidth this run measured is shown; the verdict is taken at the rated bandwidth when the
    device has one (`rated_grid`: the same rows re-bounded there), since a copy that reads low makes
    the measured bound loose and the goal easy."""
    def at(rows):
        return worst([r["ratio_new"] for r in rows if r["shape"] == "5.7B"])
    # each cell's forward is the median of its alternations with the old one (runs before those
    # had one timing a cell: shown, not judged)
    rounds = min((r.get("rounds", 1) for r in grid if r["shape"] == "5.7B"), default=0)
    how = f"worst of the shapes measured, each the median of {rounds} alternation(s)" \
        + ("" if rounds >= 5 else " (< 5: not judged)")
    target = 1.3 if rounds >= 5 else float("nan")
    shown = Goal("forward / bound at the measured copy bandwidth, 5.7B shape, B=16,64 K=1-3",
                 float("nan") if rated_grid else target, at(grid),
                 detail=how + ("; not the verdict (below)" if rated_grid else ""))
    if not rated_grid:
        return [shown]
    return [shown, Goal("forward / bound at the rated bandwidth, 5.7B shape, B=16,64 K=1-3", target, at(rated_grid),
                        detail=how + ": the verdict")]


def startup_goals(out: dict) -> list[Goal]:
    """From bench_startup's phases: the time before the first step (the process's start to a built
    Runner), and the gate over the steps' time in the wave whose kernels are warm (the second: the
    steps' own warm-up is kept out of their time too, in warmup_ms; the first wave is shown)."""
    first, warm = out.get("first_wave"), out.get("same_wave_again")
    return [
        Goal("start-up before the first step (warm machine)", 5.0, out.get("before_first_step_s"),
             detail="interpreter + imports + config + Runner build"),
        Goal("lossless gate / the steps' time", 0.10, warm["gate_over_steps"] if warm else None,
             detail="the second wave"
             + (f" (its forward alone {warm['gate_forward_s'] / (warm['step_ms_sum'] / 1e3):.3f},"
                f" {warm['gate_arbitrated']} fp32 arbitrations)" if warm else "")
             + (f"; the first wave, kernels cold: {first['gate_over_steps']:.3f}" if first else "")),
    ]
