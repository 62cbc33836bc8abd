"""The family ladder: which drafter family to serve at each batch width, and how sure that is.

The K ladder's model (fitting.py) with a family in place of K:
  family     an arm name of `+study=families` (baseline = the MTP head, draft_model, ngram, suffix,
             eagle3), or plain (plain decode, no drafter: the floor).
  E_f        E[1 + accepted | family] over every sequence-step the family took, its steps with no
             draft included (a weightless family that finds no match commits one token, as plain
             decode does): from the families study's paired replay (one stored trajectory, every
             family on the same documents, so the E_f share clusters and their covariance enters
             each comparison, as two K's do).
  t(B, f)    the mean batched step time of family f at width B, from `+study=families_ladder`'s live
             runs, each replicate its own process, pooled by random effects.
  X(B, f)    = B x E_f / t(B, f), committed tokens per second with every slot busy.
Its option k is the family's index in study.families with plain at 0; among families tied with the
best, the ladder serves the first listed (families_ladder.yaml lists the cheapest first). Per-depth
p_cond counts a no-draft step as a step that accepted nothing (p_1 is per sequence-step).

Refused, in one line each: timing runs of no family ladder, several family lists, no plain decode, a
timed family without an acceptance run (or with two), an acceptance run whose drafter (proposer, K,
feeding) is not the one timed, acceptance runs on different clusterings.
"""
from __future__ import annotations

from pathlib import Path

from atlas_ab import AtlasError
from atlas_ab.analysis.ladder.fitting import Acceptance, LadderResult, acceptance_of
from atlas_ab.analysis.ladder.live import clusters_of, study_of, times_from
from atlas_ab.analysis.runs import Run
from atlas_ab.config.family_arms import FIELDS, PLAIN

#: the levers that make a family's drafter: an acceptance run and the timed runs must agree on them
DRAFTER = ("num_drafts", *FIELDS)


def is_family_ladder(runs: list[Run]) -> bool:
    """Whether the runs are a family ladder's (their study lists families)."""
    return any(study_of(r).get("families") for r in runs)


def family_of(run: Run) -> str:
    """The family a run ran: a family ladder job's study.family; else plain for K = 0, else the arm's name
    (the families study names its arms by family)."""
    fam = study_of(run).get("family")
    if fam:
        return str(fam)
    return PLAIN if ((run.manifest or {}).get("levers") or {}).get("num_drafts") == 0 else str(run.arm)


def order_of(timing: list[Run]) -> list[str]:
    """The families in the option order: plain first, then study.families as listed."""
    lists = {tuple(study_of(r).get("families") or ()) for r in timing}
    if len(lists) != 1 or not next(iter(lists)):
        raise AtlasError("family ladder: the timing runs list different families (or none): "
                         + "; ".join(", ".join(f) or "(none)" for f in sorted(lists)) + " -- give one sweep's runs")
    fams = list(next(iter(lists)))
    if PLAIN not in fams:
        raise AtlasError(f"family ladder: study.families={fams} has no plain decode, the floor every family's gain "
                         "is taken over: add plain")
    return [PLAIN] + [f for f in fams if f != PLAIN]


def _drafter(run: Run) -> dict:
    lv = (run.manifest or {}).get("levers") or {}
    return {k: lv.get(k) for k in DRAFTER}


def acceptance_of_families(accept: list[Run], timing: list[Run], order: list[str]
                           ) -> tuple[dict[int, Acceptance], str]:
    """Option -> the family's steps in its acceptance run (every step, no-draft ones included); the cluster
    unit. Each drafting family timed needs one acceptance run running the same drafter."""
    timed = {}
    for r in timing:
        f = family_of(r)
        if f != PLAIN:
            timed.setdefault(f, _drafter(r))
    by: dict[str, Run] = {}
    for r in accept:
        f = family_of(r)
        if f in by:
            raise AtlasError(f"{r.path}: a second acceptance run of family {f!r} (also {by[f].path}): give one "
                             "families sweep")
        by[f] = r
    acc, units = {}, set()
    for i, f in enumerate(order):
        if f == PLAIN or f not in timed:
            continue
        if f not in by:
            raise AtlasError(f"family ladder: no acceptance run of family {f!r} (timed); the families study "
                             f"(+study=families) runs every family in replay: give its runs with --acceptance")
        r = by[f]
        ran = _drafter(r)
        if ran != timed[f]:
            diff = ", ".join(f"{k} {ran[k]} vs {timed[f][k]}" for k in DRAFTER if ran[k] != timed[f][k])
            raise AtlasError(f"{r.path}: family {f!r}'s acceptance run is not the drafter timed ({diff})")
        s = r.steps
        acc[i] = acceptance_of(int(timed[f]["num_drafts"]), clusters_of(r, s["doc_id"].to_numpy()),
                               s["accept_len"].to_numpy())
        units.add(r.clusters[1])
    if len(units) > 1:
        raise AtlasError(f"family ladder: the acceptance runs cluster by different units ({', '.join(sorted(units))})")
    return acc, units.pop() if units else "document"


def inputs(timing: list[Run], accept: list[Run], allow_outliers: bool = False, warn=None):
    """The fit's inputs: (acceptance by option, times by (B, option), option -> family, cluster unit)."""
    order = order_of(timing)
    index = {f: i for i, f in enumerate(order)}

    def option(r: Run):
        f = family_of(r)
        if f not in index:
            raise AtlasError(f"{r.path}: family {f!r} is not in the study's families ({', '.join(order)})")
        return index[f], f

    times = times_from(timing, allow_outliers, warn, option=option)
    acc, unit = acceptance_of_families(accept, timing, order)
    return acc, times, dict(enumerate(order)), unit


def write_family_configs(result: LadderResult, out: Path, timing: list[Run], allow_single: bool = False) -> dict:
    """families_vllm.json: each width's served family as vLLM's --speculative-config (null: plain decode),
    beside ladder.json; none from a single-replicate ladder unless allow_single (configs.py says why)."""
    from atlas_ab.analysis.ladder.configs import FILES, SINGLE, finite
    from atlas_ab.atomic import write_json
    from atlas_ab.config.engine_specs import vllm
    from atlas_ab.config.structured import ArmConfig

    out.mkdir(parents=True, exist_ok=True)
    written = {}
    if result.single_replicate and not allow_single:
        result.notes.append(f"families_vllm.json not written: {SINGLE} (a cell timed in one job)")
    else:
        lever = {family_of(r): _drafter(r) for r in timing}
        per = {}
        for b, k in result.ladder.items():
            f = result.names[k]
            per[str(b)] = None if f == PLAIN else vllm(ArmConfig(name=f, **lever[f]))
        p = out / "families_vllm.json"
        write_json(p, {"speculative_config_by_batch_width": per,
                       **({"note": SINGLE} if result.single_replicate else {})})
        written["families_vllm"] = p
    p = out / FILES["json"]
    write_json(p, finite({**result.to_dict(), "notes": list(result.notes)}))
    written["json"] = p
    return written
