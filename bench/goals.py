"""The speed goals (issues 23 and 41), printed beside what a bench run measured.

One command per goal, each printing the goal, its target, the figure and its interval:
  - end to end (main job, claims study, 5.7B 64 x 8; a fresh machine): python bench/bench_e2e.py
  - the step over its physical limit and over its bare verify:
        python bench/bench_runner.py --models llama8b,gpu --only-grid --widths 16,64
  - the verify forward over its bytes at the rated bandwidth (the read-only bandwidth beside it):
        python bench/bench_forward.py --shapes 5.7B
  - FINGERPRINTS on / off at B=256: python bench/bench_runner.py --only-fingerprints --fp-alternations 11
  - start-up before the first step: python bench/bench_startup.py
(scripts/gpu.sh time_to_verdict runs them all in one device call.)

A goal is a ratio taken in one run (the runner's step over its graphed bare verify, the
forward over its memory/FLOP bound, FINGERPRINTS on over off), its target, and whether the
run met it. A goal the run did not measure is listed as such, never guessed.

A figure that is the median of alternations also carries an interval for that median
(`median_interval`: order statistics, distribution-free), and the verdict is taken on it: MET only
when the whole interval meets the target, NOT MET only when none of it does, and otherwise
"INSIDE ITS NOISE", not judged: on a shared host a median of five alternations swings by more
than the 5% a goal may judge.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from statistics import median
from typing import Optional

from scipy.stats import binom

# The H200's rated HBM3e bandwidth (vendor datasheet, 4.8 TB/s), printed beside the measured copy
# bandwidth: the bound uses the measured one, which varied 2.76-4.25 TB/s between calls.
RATED_BYTES_PER_S = {"NVIDIA H200": 4.8e12}
#: The least coverage of a median's interval (5 alternations give min..max, 93.75%).
COVERAGE = 0.90


def median_interval(values: list[float]) -> tuple[float, float, float]:
    """(lo, hi, coverage): a distribution-free interval for the median of the population the
    values were drawn from, the order statistics x_(k) and x_(n+1-k) with the largest k whose
    coverage 1 - 2 P(Bin(n, 1/2) <= k - 1) is at least COVERAGE (n = 5: min and max, 0.9375;
    n = 10: the 2nd and 9th, 0.9785). Needs n >= 5 (below that no k reaches the coverage)."""
    x, n = sorted(values), len(values)
    k = 1
    while k < (n + 1) // 2 and 1 - 2 * binom.cdf(k, n, 0.5) >= COVERAGE:
        k += 1
    return x[k - 1], x[n - k], float(1 - 2 * binom.cdf(k - 1, n, 0.5))


@dataclass(frozen=True)
class Goal:
    name: str
    target: float
    measured: Optional[float]
    higher_is_better: bool = False
    detail: str = ""
    #: the interval of the measured median (`median_interval`), where it is one; the verdict's basis
    interval: Optional[tuple[float, float]] = None

    def _meets(self, x: float) -> bool:
        return x >= self.target if self.higher_is_better else x <= self.target

    @property
    def met(self) -> Optional[bool]:
        if self.measured is None or self.target != self.target:      # nan target: shown, not judged
            return None
        if self.interval is None:
            return self._meets(self.measured)
        lo, hi = self.interval
        if self._meets(lo) and self._meets(hi):
            return True
        if not self._meets(lo) and not self._meets(hi):
            return False
        return None                                                  # inside its noise: not judged

    @property
    def verdict(self) -> str:
        if self.met is None:
            judged = self.measured is not None and self.target == self.target and self.interval is not None
            return "INSIDE ITS NOISE" if judged else "-"
        return "MET" if self.met else "NOT MET"

    def line(self) -> str:
        op = ">=" if self.higher_is_better else "<="
        got = "not measured in this run" if self.measured is None else f"{self.measured:.3f}" + (
            f" ({self.interval[0]:.3f}-{self.interval[1]:.3f})" if self.interval else "")
        target = "-" if self.target != self.target else f"{op} {self.target:g}"      # nan: shown, not judged
        return f"| {self.name} | {target} | {got} | {self.verdict} | {self.detail} |"

    def as_dict(self) -> dict:
        return {**asdict(self), "met": self.met, "verdict": self.verdict}


def table(goals: list[Goal]) -> str:
    return "\n".join(["| goal | target | measured | verdict | how |", "|---|---|---|---|---|",
                      *(g.line() for g in goals)])


def worst(values: list[float]) -> Optional[float]:
    """A goal over several shapes holds only if it holds at the worst of them."""
    return max(values) if values else None


def worst_interval(cells: list[list[float]]) -> Optional[tuple[float, float]]:
    """The interval of the worst (largest) of several cells' medians, each cell's alternations
    given: (the largest low end, the largest high end). None where a cell has < 5 alternations
    (or there is none): the verdict is then the figure's alone."""
    if not cells or min(len(c) for c in cells) < 5:
        return None
    ends = [median_interval(c)[:2] for c in cells]
    return max(lo for lo, _ in ends), max(hi for _, hi in ends)


def step_limit_ms(trunk_bytes: float, drafter_bytes: float, kv_bytes: float, K: int, bytes_per_s: float) -> float:
    """The whole step's physical limit: the trunk's weights read once (the verify), the drafter's
    once per draft (its own layers and the lm_head it shares), and the KV the verify and the drafts
    read, at `bytes_per_s` (the rated bandwidth: a step can be no faster)."""
    return (trunk_bytes + K * drafter_bytes + kv_bytes) / bytes_per_s * 1e3


def runner_goals(grid: list[dict], levers: dict) -> list[Goal]:
    """From bench_runner's grid rows (model, B, K, step_over_bare) and lever ratios."""
    def cells(model, Bs, Ks):
        return [r for r in grid if r["model"] == model and r["B"] in Bs and r["K"] in Ks
                and r.get("grid_arm", "plain") == "plain"]       # the goals are the plain arm's

    def goal(name, target, rows, detail=""):
        # each alternation's step median over the cell's bare verify (measured once a cell)
        alts = [[s / r["bare_forward_ms"] for s in r.get("step_ms_medians", [])] for r in rows]
        return Goal(name, target, worst([r["step_over_bare"] for r in rows]), detail=detail,
                    interval=worst_interval(alts))
    def limit_goal(name, target, rows, detail=""):
        rows = [r for r in rows if r.get("limit_ms")]
        alts = [[s / r["limit_ms"] for s in r.get("step_ms_medians", [])] for r in rows]
        return Goal(name, target, worst([r["step_over_limit"] for r in rows]), interval=worst_interval(alts),
                    detail=detail + ("" if rows else " (no rated bandwidth for this device: not measured)"))

    every = (1, 16, 64, 256)
    fp = levers.get("fingerprints") or {}
    alternations = fp.get("run_ratios") or []
    judged = len(alternations) >= 5
    return [
        goal("runner step / bare verify, 33.6M preset, B=64 K=2", 1.3, cells("gpu", (64,), (2,))),
        goal("runner step / bare verify, 5.7B shape, B=16,64 K=1-3", 1.1, cells("llama8b", (16, 64), (1, 2, 3)),
             detail="worst of the shapes measured"),
        limit_goal("runner step / its physical limit at the rated bandwidth, 5.7B shape, B=16,64 K=1-3", 1.35,
                   cells("llama8b", (16, 64), (1, 2, 3)),
                   detail="limit: trunk weights + K x drafter weights + KV read; worst of the shapes measured"),
        limit_goal("runner step / its physical limit at the rated bandwidth, 33.6M preset", float("nan"),
                   cells("gpu", every, (1, 2, 3)), detail="shown: the worst cell measured"),
        limit_goal("runner step / its physical limit at the rated bandwidth, default model", float("nan"),
                   cells("default", every, (1, 2, 3)), detail="shown: the worst cell measured"),
        Goal("FINGERPRINTS on / off throughput", 0.95, median(alternations) if judged else None,
             higher_is_better=True, interval=median_interval(alternations)[:2] if judged else None,
             detail=f"median of {len(alternations)} alternations"
             + (f" (they ranged {min(alternations):.3f}-{max(alternations):.3f})" if alternations else "")
             + ("" if judged else " (< 5: not judged)")),
    ]


def forward_goals(grid: list[dict], rated_grid: list[dict] | None = None) -> list[Goal]:
    """From bench_forward's grid rows (shape, ratio_new = forward / bound). The bound at the copy
    bandwidth this run measured is shown; the verdict is taken at the rated bandwidth when the
    device has one (`rated_grid`: the same rows re-bounded there), since a copy that reads low makes
    the measured bound loose and the goal easy."""
    def at(rows):
        return worst([r["ratio_new"] for r in rows if r["shape"] == "5.7B"])

    def interval(rows):       # each round's forward over the same bound
        return worst_interval([[r["ratio_new"] * t / r["new_ms"] for t in r.get("new_ms_rounds", [])]
                               for r in rows if r["shape"] == "5.7B"])
    # each cell's forward is the median of its alternations with the old one (runs before those
    # had one timing a cell: shown, not judged)
    rounds = min((r.get("rounds", 1) for r in grid if r["shape"] == "5.7B"), default=0)
    how = f"worst of the shapes measured, each the median of {rounds} alternation(s)" \
        + ("" if rounds >= 5 else " (< 5: not judged)")
    target = 1.35 if rounds >= 5 else float("nan")
    shown = Goal("forward / bound at the measured copy bandwidth, 5.7B shape, B=16,64 K=1-3",
                 float("nan") if rated_grid else target, at(grid), interval=interval(grid),
                 detail=how + ("; not the verdict (below)" if rated_grid else ""))
    if not rated_grid:
        return [shown]
    return [shown, Goal("forward / bound at the rated bandwidth, 5.7B shape, B=16,64 K=1-3", target, at(rated_grid),
                        interval=interval(rated_grid), detail=how + ": the verdict")]


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


def e2e_goals(runs: list[dict]) -> list[Goal]:
    """From bench_e2e's runs (job, complete, wall_s, elapsed_s, rc, time_lines), in the order run: the
    first `main` is the fresh machine's (cold caches), a second one the warm process. One run each:
    no interval. A job killed at its timeout counts its elapsed time (a lower bound, so a NOT MET is
    sure); a job that failed is not measured."""
    def nth(job, n=0):
        found = [r for r in runs if r["job"] == job]
        return found[n] if len(found) > n else None

    def live_check(r):
        """A replay sweep's live checks over its jobs' waves (the part a replay-only run would not pay)."""
        jobs = [x for x in r.get("timings") or [] if x]           # a job that wrote no manifest has none
        if not any(x.get("live_check") for x in jobs):
            return ""
        return (f"; live check {sum(x.get('live_check') or 0.0 for x in jobs):.1f} s of "
                f"{sum(x.get('waves') or 0.0 for x in jobs):.1f} s of waves over {len(jobs)} job(s)")

    def figure(r):
        if r is None:
            return None, "not run"
        if r["complete"]:
            return r["wall_s"], (r["time_lines"][0] if r.get("time_lines") else f"{r['jobs']} job(s)") + live_check(r)
        if r["rc"] == "timeout":
            return r["elapsed_s"], f"killed at its timeout: at least {r['elapsed_s']:.0f} s"
        return None, f"failed (exit {r['rc']})"

    def goal(name, target, r):
        x, how = figure(r)
        return Goal(name, target, x, detail=how)
    cold, warm, cpu = nth("main"), nth("main", 1), nth("main_cpu")
    (c, _), (w, _), (p, how_cpu) = figure(cold), figure(warm), figure(cpu)
    def ratio(x):
        return x / p if x is not None and p else None
    return [
        goal("main job end to end, s (the machine's first run: cold caches)", 8.0, cold),
        goal("main job end to end, s (a second process: warm caches)", 8.0, warm),
        Goal("main job: this device's time / the same job on this machine's CPU, cold caches", 1.0, ratio(c),
             detail="never slower than the CPU" + (f"; CPU {p:.1f} s" if p else f"; CPU: {how_cpu}")),
        Goal("main job: this device's time / the same job on this machine's CPU, warm caches", 1.0, ratio(w),
             detail="never slower than the CPU" + (f"; CPU {p:.1f} s" if p else f"; CPU: {how_cpu}")),
        goal("main job end to end, s, bookkeeping compiled (runner.fuse_bookkeeping=true), warm", float("nan"),
             nth("main_fuse")),
        goal("main job end to end, s, bookkeeping compiled through inductor's worker pool, warm", float("nan"),
             nth("main_pool")),
        goal("main job end to end, s, cold again, bookkeeping compiled in the process (1 thread)", float("nan"),
             nth("main_cold_1t")),
        goal("main job end to end, s, cold again, bookkeeping compiled through inductor's worker pool",
             float("nan"), nth("main_cold_pool")),
        goal("main job end to end, s, no CUDA graphs (runner.cuda_graphs=false: nothing captured or compiled)",
             float("nan"), nth("main_eager")),
        goal("claims study end to end, s (13 arms, replayed)", 40.0, nth("claims")),
        goal("5.7B shape, 64 documents x 8 turns, end to end, s", 15.0, nth("llama8b")),
        goal("tree study end to end, s (3 arms, 32 documents, live: no goal set)", float("nan"), nth("tree")),
    ]
