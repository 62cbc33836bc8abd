"""The ladder's two inputs read from run directories (a `+study=ladder` sweep's, or any live runs).

Timing: a live run at batch width B and K (the manifest's `waves.batch_width`, `levers.num_drafts`;
K = 0 is plain decode, run/plain.py) gives one time per batched step: its rows (one per sequence)
share the step's `step_ms`, so a batched step is (wave, turn, step), the wave read from the
manifest's shards. Warm-up steps carry no step_ms and are left out (speculative/timing.py); a
warm-up-sized outlier refuses the run (economics.outliers). The runs' loops must be one: step times
of run-ahead chunks (a chunk's mean) are not compared with one step's own (economics.one_loop; plain
decode steps one at a time, so a ladder runs every arm step by step, and has nothing to fuse).

Acceptance: every run with K >= 1 (live or replay) gives its verify steps' accept_len, by cluster
(documents, or the source files the workload cut them from); runs of one K at several widths are one
sample (the same document is one cluster in all of them).

Replicates: a `+study=ladder` sweep times each (B, K) in `study.replicates` jobs, in a seeded interleaved
order (config/ladder_order.py); each job's manifest holds its replicate in config.study.replicate
(`replicate_of`; a run made before replicates is replicate 0). Timing keeps every replicate of a cell
(ladder.fit pools them by random effects); acceptance, which greedy decoding makes the same in every
replicate, is read from each cell's first replicate.

The two may come from different runs: acceptance from a trained model's, timing from a random-weight
shape's (acceptance on random weights means nothing), each read as above.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from atlas_ab import AtlasError
from atlas_ab.analysis.economics import loop_of, outliers
from atlas_ab.analysis.ladder.fitting import Acceptance, acceptance_of
from atlas_ab.analysis.runs import Run, load_run


def width_and_k(run: Run) -> tuple[int, int]:
    m = run.manifest or {}
    b = (m.get("waves") or {}).get("batch_width")
    k = (m.get("levers") or {}).get("num_drafts")
    if b is None or k is None:
        raise AtlasError(f"{run.path}: the manifest names no batch width or K (waves.batch_width, "
                         "levers.num_drafts): not a run of this harness")
    return int(b), int(k)


def study_of(run: Run) -> dict:
    """The study section of the run's resolved config ({} for a run outside a study)."""
    return ((run.manifest or {}).get("config") or {}).get("study") or {}


def replicate_of(run: Run) -> int:
    """The replicate a ladder job timed (config.study.replicate; 0 for a run made before replicates)."""
    r = study_of(run).get("replicate", 0)
    if not isinstance(r, int) or isinstance(r, bool) or r < 0:
        raise AtlasError(f"{run.path}: config.study.replicate={r!r} in the manifest is not a replicate id "
                         "(an int >= 0)")
    return r


def step_times(run: Run, allow_outliers: bool = False, warn=None) -> np.ndarray:
    """[n] ms: one per timed batched step of a live run. allow_outliers: a warm-up-sized outlier is
    kept (its time counts) and said through `warn`, not refused (a shared host's stalls)."""
    m = run.manifest or {}
    if m.get("mode") == "replay":
        raise AtlasError(f"{run.path}: a replay run carries no step times (timing comes from live runs only)")
    full = load_run(run.path, columns=("step_ms",), optional=("warmup_ms",), allow_incomplete=run.status != "complete")
    s = full.steps
    warm = s["warmup_ms"].notna() if "warmup_ms" in s.columns else pd.Series(False, index=s.index)
    if (s["step_ms"].isna() & ~warm).any():
        raise AtlasError(f"{run.path}: step_ms is null on {int((s['step_ms'].isna() & ~warm).sum())} step(s) "
                         "that are not warm-up")
    try:
        outliers(run.path, s)
    except AtlasError as e:
        if not allow_outliers:
            raise
        (warn or (lambda m: None))(f"{e} [kept: --allow-outliers]")
    wave_of = {d: sh["wave"] for sh in m.get("shards") or [] for d in sh.get("docs") or []}
    if not wave_of:
        raise AtlasError(f"{run.path}: the manifest's shards list no documents, so its batched steps cannot be told "
                         "apart")
    s = s[s["step_ms"].notna()]
    wave = s["doc_id"].map(wave_of)
    if wave.isna().any():
        raise AtlasError(f"{run.path}: doc {int(s['doc_id'][wave.isna()].iloc[0])} is in no shard of the manifest")
    per = s.assign(wave=wave.to_numpy()).groupby(["wave", "turn", "step"])["step_ms"]
    if (per.nunique() > 1).any():
        raise AtlasError(f"{run.path}: rows of one batched step (wave, turn, step) carry different step_ms")
    return per.first().to_numpy(np.float64)


def clusters_of(run: Run, doc: np.ndarray) -> np.ndarray:
    cmap, _ = run.clusters
    return doc if cmap is None else np.asarray(cmap)[doc]


def acceptance_from(runs: list[Run]) -> tuple[dict[int, Acceptance], str, int | None]:
    """K -> the verify steps of that K's run at the acceptance width; the cluster unit; that width. The
    acceptance width is the widest batch width at which every K >= 1 ran: its documents are the
    most, every K is read on the same ones (their covariance is a paired one), and no document is
    counted once per width (a greedy step's acceptance does not depend on B; pooling widths would
    weight the narrow widths' documents several times, and a workload cut for 8 documents clusters
    by document where one cut for 256 clusters by source file)."""
    cells: dict[tuple[int, int], Run] = {}
    seen: dict[tuple[int, int, int], Run] = {}
    for r in runs:
        b, k = width_and_k(r)
        i = replicate_of(r)
        if k and (b, k, i) in seen:      # as times_from: one run per cell and replicate, never one dropped in silence
            raise AtlasError(f"{r.path}: a second acceptance run at batch width {b} K={k}" + _replicate_words(i))
        if k:
            seen[(b, k, i)] = r
    for (b, k, _i), r in sorted(seen.items(), key=lambda kv: kv[0]):
        cells.setdefault((b, k), r)      # the cell's first replicate: greedy acceptance is the same in each
    Ks = sorted({k for _, k in cells})
    common = [b for b in sorted({b for b, _ in cells}) if all((b, k) in cells for k in Ks)]
    if Ks and not common:
        raise AtlasError("acceptance runs: no batch width has a run of every K (" + ", ".join(
            f"K={k} at B={sorted(b for b, kk in cells if kk == k)}" for k in Ks) + ")")
    acc, units = {}, set()
    for k in Ks:
        r = cells[(common[-1], k)]
        s = r.steps[r.steps["k"] >= 1]
        if (s["k"] != k).any():
            raise AtlasError(f"{r.path}: verify steps with k other than the arm's K={k} (DRAFT_CONF or a ragged "
                             "turn end): the ladder reads runs with every lever but K off")
        acc[k] = acceptance_of(k, clusters_of(r, s["doc_id"].to_numpy()), s["accept_len"].to_numpy())
        units.add(r.clusters[1])
    if len(units) > 1:
        raise AtlasError(f"acceptance runs at B={common[-1]} cluster by different units ({', '.join(sorted(units))})")
    return acc, units.pop() if units else "document", common[-1] if Ks else None


def _replicate_words(i: int) -> str:
    return (f", replicate {i} (one run per cell and replicate: a sweep with replicates is +study=ladder "
            "study.replicates=N; runs from before replicates are each replicate 0)")


def times_from(runs: list[Run], allow_outliers: bool = False, warn=None,
               option=None) -> dict[tuple[int, int], list[np.ndarray]]:
    """(B, K) -> batched step times (ms), one array per replicate in replicate order, refusing two runs of
    one cell and replicate and mixed loops (plain decode has no bookkeeping to fuse, so only the K >= 1
    runs are held to one fused setting). option: run -> (the cell's second key, its words), for a family
    ladder (analysis/ladder/families.py); default K."""
    by: dict[tuple[int, int], dict[int, np.ndarray]] = {}
    loops, fused = {}, {}
    for r in runs:
        b, k = width_and_k(r)
        key, words = option(r) if option else (k, f"K={k}")
        i = replicate_of(r)
        if i in by.get((b, key), {}):
            raise AtlasError(f"{r.path}: a second run at batch width {b} {words}" + _replicate_words(i))
        by.setdefault((b, key), {})[i] = step_times(r, allow_outliers, warn)
        m = r.manifest or {}
        loops[r.path] = m.get("loop", "step_by_step")
        if k:
            fused[r.path] = bool(m.get("fused"))
    if len(set(loops.values())) > 1 or len(set(fused.values())) > 1:
        raise AtlasError("step times from different loops: " + ", ".join(f"{p} ({loop_of(r.manifest or {})})"
                                                                         for p, r in ((r.path, r) for r in runs))
                         + "; a ladder runs every arm with runner.run_ahead=false and one runner.fuse_bookkeeping")
    return {c: [reps[i] for i in sorted(reps)] for c, reps in sorted(by.items())}


def process_of(run: Run) -> str | None:
    """The process the run ran in (manifest host.process: host, pid, start), None for a run made before
    runs recorded it (2026-12-03)."""
    return ((run.manifest or {}).get("host") or {}).get("process")


def process_note(runs: list[Run]) -> str:
    """Whether each cell's replicates ran in separate processes, in words: a process carries an effect
    its own jobs share (config/ladder_order.py), which only replicates in separate processes put inside
    a cell's interval."""
    by: dict[tuple, list] = {}
    for r in runs:
        by.setdefault((*width_and_k(r), study_of(r).get("family")), []).append(process_of(r))
    multi = {c: ps for c, ps in by.items() if len(ps) > 1}
    if not multi:
        return "one run a cell: processes do not apply"
    if any(p is None for ps in multi.values() for p in ps):
        return ("the runs do not record their process (made before 2026-12-03), so whether each cell's "
                "replicates ran in separate processes is not known")
    shared = sorted(c for c, ps in multi.items() if len(set(ps)) < len(ps))
    n = len({p for ps in multi.values() for p in ps})
    if not shared:
        return (f"every cell's replicates ran in separate processes ({n} in all): the between-process "
                "variance is inside each interval")
    cells = ", ".join(f"B={b} {fam or f'K={k}'}" for b, k, fam in shared[:4]) + (", ..." if len(shared) > 4 else "")
    return (f"{len(shared)} of {len(multi)} cells have replicates that ran in one process ({cells}): the "
            "effect a process carries (2.0% sd on the H200's 5.7B B=1 K=2 cell, issue 51) is not inside "
            "their intervals; run each replicate as its own process (study.block=r)")


def model_of(runs: list[Run]) -> str:
    """The model the runs measured, in words (name, parameters, init)."""
    names = set()
    for r in runs:
        m = (r.manifest or {}).get("model") or {}
        total = (m.get("params") or {}).get("total")
        names.add(f"{m.get('name')} ({total / 1e6:.1f}M parameters, {m.get('init')})" if total else str(m.get("name")))
    return ", ".join(sorted(names))
