"""A peer engine beside our runner on one workload: llama.cpp's or vLLM's server as collected by
`python -m atlas_ab.collect` (docs/ingest.md), and `python -m atlas_ab +arm=...` over the same
documents; one markdown table, and `--json OUT`.

    python bench/bench_peer.py --engine RUN_E --ours RUN_O [--engine-wall-s S] [--ours-wall-s S]
        [--engine-startup-s S] [--build-s S] [--ours-build-s S] [--label "llama.cpp draft-simple"] [--json OUT]

Terms (per system):
  request          one (doc_id, turn): one turn of one document, generating G tokens.
  committed tokens every token a turn committed to its reply, its first included. The engine's
                   `timings.predicted_n`; ours: the `committed` tokens of the turn's steps plus
                   the one its prefill produced. Both must equal docs x turns x G (ignore_eos).
  verify step      one sequence's draft-and-verify step, committing 1 + its accepted drafts.
                   Ours: the step rows with k >= 1. The engine reports token totals only, so its
                   steps are the decode steps after a turn's first token, predicted_n - 1 -
                   draft_n_accepted; of those at most one per request drafted nothing (the server
                   drafts none with one token left), so its verify steps lie in [that - requests,
                   that], both written out.
  mean accepted    accepted drafts / verify steps; draft rate: accepted / drafted drafts. Ours
                   also counted as the server counts (budgeted, ingest/llamacpp.server_counts): it
                   drafts at most G - g - 1 tokens at a step that g tokens of the turn precede, none
                   with one left, while our runner drafts K at every step and counts every accepted
                   draft, even past the turn's end.
  work seconds     the time the steps took, start-up excluded. Ours: the manifest's waves less
                   the one-off compile and graph capture inside them (run/startup.py; the lossless
                   gate's check stays in). The engine: the collector's requests window: with every
                   document in flight at once (concurrency >= documents, turns in order), the
                   longest document's sum of per-request seconds; otherwise --engine-wall-s.
  start-up seconds ours: import + model + compile + capture; the engine: the server's launch to
                   its first healthy answer (--engine-startup-s, measured by the caller).
  build seconds    the engine's build (--build-s); ours: a warm-up run of the same command that
                   built our Triton kernels into the cache (--ours-build-s). A run whose caches
                   were cold says so under the table: its first-call builds are in its work seconds.
  wall seconds     each command's wall time as the caller measured it (--engine-wall-s: the
                   collector's process; --ours-wall-s: the runner's); ours falls back to the
                   manifest's total.
  steps per arm    the verify steps per arm a powered REFEED study needs: sizing.solve (the
                   `power` command's arithmetic) with the pre-registration's min_effect and
                   threshold_sd, the base rate --p (default the seeds' control p2_uncond,
                   0.4182, the pre-registration's own note), --power (0.8), and the ICC its
                   `decides` implies (binomial: 0) unless --icc; never below its min_n_per_arm.
  seconds to a powered REFEED verdict = 2 arms x steps per arm / verify steps per work second
                   (and the same plus start-up, once).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:       # `python bench/bench_peer.py` from anywhere
    sys.path.insert(0, str(ROOT))

from atlas_ab import AtlasError  # noqa: E402

PROG = "bench_peer.py"
#: The seeds' control arm before the powered A/B (atlas_ab/prereg/refeed_p2_uncond.yaml's note).
SEEDS_P2_UNCOND = 0.4182
ARMS = 2


# ---- one system's counts and times -------------------------------------------------------------

@dataclass(frozen=True)
class Side:
    label: str
    requests: int
    committed: int
    steps: int                      # verify steps (the engine: decode steps, the upper end)
    steps_lo: int                   # the lower end of the verify steps (ours: = steps)
    drafted: int
    accepted: int
    work_s: float
    work_how: str
    startup_s: Optional[float] = None
    wall_s: Optional[float] = None
    build_s: Optional[float] = None
    k: Optional[int] = None
    width: Optional[int] = None     # slots (the engine) / batch width (ours)
    budgeted: Optional[tuple[int, int, int]] = None     # ours as the server counts: steps, drafted, accepted


@dataclass(frozen=True)
class EngineRequest:
    doc_id: int
    turn: int
    predicted: int                  # timings.predicted_n
    drafted: int                    # timings.draft_n
    accepted: int                   # timings.draft_n_accepted
    seconds: float                  # the collector's wait for this answer
    steps: Optional[int] = None     # verify steps where the engine counts them (vLLM: num_spec_steps)


def engine_steps(r: EngineRequest) -> int:
    """Decode steps after the turn's first token: each commits 1 + its accepted drafts (an engine
    that counts its verify steps gives them as they are)."""
    if r.steps is not None:
        return r.steps
    n = r.predicted - 1 - r.accepted
    if n < 0 or r.accepted > r.drafted:
        raise AtlasError(f"doc {r.doc_id} turn {r.turn}: predicted_n {r.predicted}, draft_n {r.drafted}, "
                         f"draft_n_accepted {r.accepted}: not the counts of one greedy turn")
    return n


def request_window(reqs: list[EngineRequest], concurrency: int) -> Optional[float]:
    """The longest document's sum of request seconds, when every document was in flight at once
    (its turns run back to back); None otherwise (the window then depends on the scheduling)."""
    docs: dict[int, float] = {}
    for r in reqs:
        docs[r.doc_id] = docs.get(r.doc_id, 0.0) + r.seconds
    if not docs or concurrency < len(docs):
        return None
    return max(docs.values())


def engine_side(reqs: list[EngineRequest], concurrency: int, label: str, wall_s: Optional[float] = None,
                startup_s: Optional[float] = None, build_s: Optional[float] = None,
                k: Optional[int] = None, width: Optional[int] = None) -> Side:
    if not reqs:
        raise AtlasError("the engine run holds no request")
    steps = sum(engine_steps(r) for r in reqs)
    window = request_window(reqs, concurrency)
    if window is not None:
        work, how = window, f"requests window (all {len({r.doc_id for r in reqs})} documents in flight)"
    elif wall_s is not None:
        work, how = wall_s, f"the collector's wall (concurrency {concurrency} < documents)"
    else:
        raise AtlasError(f"concurrency {concurrency} is below the documents: give --engine-wall-s")
    exact = all(r.steps is not None for r in reqs)
    return Side(label=label, requests=len(reqs), committed=sum(r.predicted for r in reqs), steps=steps,
                steps_lo=steps if exact else steps - len(reqs), drafted=sum(r.drafted for r in reqs),
                accepted=sum(r.accepted for r in reqs), work_s=work, work_how=how, startup_s=startup_s,
                wall_s=wall_s, build_s=build_s, k=k, width=width)


def budgeted(turns: list[list[tuple[int, int, int]]], gen_tokens: int) -> tuple[int, int, int]:
    """(verify steps, drafted, accepted) of our turns, each counted as llama.cpp's server counts them
    (ingest/llamacpp.server_counts: rows (k, accept_len, committed tokens) in step order)."""
    from atlas_ab.ingest.llamacpp import server_counts

    per_turn = [server_counts(rows, gen_tokens) for rows in turns]
    return tuple(sum(t[i] for t in per_turn) for i in range(3))


def ours_side(k: list[int], accept_len: list[int], committed: list[int], requests: int, timings: dict,
              label: str, wall_s: Optional[float] = None, num_drafts: Optional[int] = None,
              width: Optional[int] = None, budget: Optional[tuple[int, int, int]] = None,
              build_s: Optional[float] = None) -> Side:
    """From step rows (k, accept_len, len(committed)) and the manifest's timings; `requests` is
    the (doc_id, turn) count, each of which produced one token in its prefill. build_s: the warm-up
    run that built our kernels (the caller's; the analog of the engine's build)."""
    verify = [i for i, x in enumerate(k) if x >= 1]
    need = ("waves", "import", "model")
    if any(timings.get(x) is None for x in need):
        raise AtlasError(f"our run's manifest timings lack {[x for x in need if timings.get(x) is None]}")
    once = float(timings.get("compile") or 0.0) + float(timings.get("capture") or 0.0)
    work = float(timings["waves"]) - once
    if work <= 0:
        raise AtlasError(f"our run's waves ({timings['waves']} s) are not longer than its compile + capture "
                         f"({once} s)")
    total = timings.get("total")
    how = "waves less compile and capture"
    files = [v.get("files") for v in (timings.get("caches") or {}).values() if v.get("files") is not None]
    if files and not any(files):
        # the eager parts' (the prefill's) first-call Triton builds fall in the waves, not the capture:
        # a cold H200 run of the draft-model pair read 4.70 work s where a warm one read 0.67
        # (bench/RESULTS.md, "Time to a verdict")
        how += "; caches COLD: our kernels' first builds are inside it"
    return Side(label=label, requests=requests, committed=sum(committed) + requests, steps=len(verify),
                steps_lo=len(verify), drafted=sum(k[i] for i in verify), accepted=sum(accept_len[i] for i in verify),
                work_s=work, work_how=how, build_s=build_s,
                startup_s=float(timings["import"]) + float(timings["model"]) + once,
                wall_s=wall_s if wall_s is not None else (None if total is None else float(total)),
                k=num_drafts, width=width, budgeted=budget)


# ---- the figures -------------------------------------------------------------------------------

def rates(s: Side) -> dict:
    """Per work second: committed tokens, verify steps; acceptance per step and per draft."""
    if s.steps <= 0 or s.drafted <= 0:
        raise AtlasError(f"{s.label}: {s.steps} verify steps, {s.drafted} drafts: nothing to rate")
    return {"tokens_per_s": s.committed / s.work_s, "steps_per_s": s.steps / s.work_s,
            "steps_per_s_lo": s.steps_lo / s.work_s, "mean_accepted": s.accepted / s.steps,
            "mean_accepted_hi": s.accepted / s.steps_lo if s.steps_lo > 0 else None,
            "draft_rate": s.accepted / s.drafted}


def seconds_to_verdict(n_per_arm: int, steps_per_s: float, arms: int = ARMS) -> float:
    """Both arms' verify steps at this system's rate."""
    return arms * n_per_arm / steps_per_s


@dataclass(frozen=True)
class Sizing:
    prereg: str
    p: float
    delta: float
    threshold_sd: float
    power: float
    icc: float
    m: float
    n_power: int            # sizing.solve's steps per arm
    min_n_per_arm: int
    n_per_arm: int          # the larger: a run below the registered minimum is not judged

    def words(self) -> str:
        return (f"{self.prereg}: p2_uncond base rate {self.p:g}, effect {self.delta:+g} (min_effect), "
                f"threshold {self.threshold_sd:g} sd (threshold_sd), power {self.power:g}, ICC {self.icc:g}"
                + (f" at m {self.m:g} steps/document" if self.icc else "")
                + f" -> {self.n_power:,} steps per arm (sizing.solve); registered minimum {self.min_n_per_arm:,}; "
                f"used {self.n_per_arm:,}")


def study_size(prereg: str, p: float, power: float, icc: Optional[float], m: Optional[float]) -> Sizing:
    from atlas_ab.analysis.stats import sizing
    from atlas_ab.config.paths import resolve_path
    from atlas_ab.config.prereg import Decides, load_prereg

    spec = load_prereg(resolve_path(prereg)).spec
    for f in ("min_effect", "threshold_sd", "decides"):
        if not hasattr(spec, f):
            raise AtlasError(f"{prereg}: a {spec.KIND} pre-registration has no {f}: a difference is sized")
    if icc is None:
        if spec.decides != Decides.binomial:
            raise AtlasError(f"{prereg}: decided on the {spec.decides.value} sd: give --icc (and --m)")
        icc = 0.0
    m = 1.0 if m is None else m
    res = sizing.solve(p, spec.min_effect, threshold_sd=spec.threshold_sd, power=power, icc=icc, m=m)
    low = spec.min_n_per_arm or 0
    return Sizing(prereg=prereg, p=p, delta=spec.min_effect, threshold_sd=spec.threshold_sd, power=power,
                  icc=icc, m=m, n_power=res.n_per_arm, min_n_per_arm=low, n_per_arm=max(res.n_per_arm, low))


# ---- reading the two runs ------------------------------------------------------------------------

def read_engine(run: Path) -> tuple[dict, list[EngineRequest]]:
    """The collector's manifest and its raw answers, the file checked against the manifest's sha256."""
    from atlas_ab.analysis.runs import read_manifest
    from atlas_ab.atomic import sha256_file

    m = read_manifest(run)          # a run not complete (or stopped) is refused there
    if m is None:
        raise AtlasError(f"{run / 'manifest.json'}: no such file (not a collector run)")
    engine = (m.get("engine") or {}).get("name")
    if engine not in ("llamacpp", "vllm"):
        raise AtlasError(f"{run}: engine {engine!r}: llama.cpp runs (their timings carry predicted_n) or vLLM "
                         "runs (per-request spec-decode metrics) only")
    raw = run / "raw" / "responses.jsonl"
    listed = {Path(f["path"]).name: f.get("sha256") for f in (m.get("source") or {}).get("files", [])}
    if not raw.is_file() or listed.get(raw.name) != f"sha256:{sha256_file(raw)}":
        raise AtlasError(f"{raw}: missing, or not the file its manifest lists")
    reqs = []
    for i, line in enumerate(raw.read_text().splitlines()):
        try:
            rec = json.loads(line)
            reqs.append(_vllm_request(rec) if engine == "vllm" else _llamacpp_request(rec))
        except (ValueError, KeyError, TypeError, IndexError) as e:
            raise AtlasError(f"{raw}: line {i + 1}: no {engine} counts ({e.__class__.__name__}: {e})") from None
    return m, reqs


def _llamacpp_request(rec: dict) -> EngineRequest:
    t = rec["response"]["timings"]
    return EngineRequest(int(rec["doc_id"]), int(rec["turn"]), int(t["predicted_n"]), int(t.get("draft_n", 0)),
                         int(t.get("draft_n_accepted", 0)), float(rec["seconds"]))


def _vllm_request(rec: dict) -> EngineRequest:
    """vLLM's per-request spec-decode metrics: its verify steps are counted (num_spec_steps), so the
    step count is exact; every committed token is in usage.completion_tokens."""
    resp = rec["response"]
    sd = resp["metrics"]["speculative_decoding"]
    return EngineRequest(int(rec["doc_id"]), int(rec["turn"]), int(resp["usage"]["completion_tokens"]),
                         int(sd["num_draft_tokens"]), int(sd["num_accepted_draft_tokens"]), float(rec["seconds"]),
                         steps=int(sd["num_spec_steps"]))


def read_ours(run: Path):
    """Our run (load_run: shards checked against the manifest) and its manifest."""
    from atlas_ab.analysis.runs import load_run

    r = load_run(run, columns=("committed",))
    if r.manifest is None or not r.manifest.get("timings"):
        raise AtlasError(f"{run}: no manifest timings (not a run of `python -m atlas_ab`)")
    if r.manifest.get("mode") != "live":
        raise AtlasError(f"{run}: mode {r.manifest.get('mode')!r}: only a live run's waves time its steps")
    return r


def expected_tokens(workload: dict) -> Optional[int]:
    c = workload.get("config") or workload
    try:
        return int(c["n_docs"]) * int(c["turns"]) * int(c["gen_tokens"])
    except (KeyError, TypeError, ValueError):
        return None


def compare(args) -> dict:
    em, reqs = read_engine(Path(args.engine))
    ours = read_ours(Path(args.ours))
    om = ours.manifest
    wl_e, wl_o = (em.get("workload") or {}).get("hash"), (om.get("workload") or {}).get("hash")
    if wl_e != wl_o:
        raise AtlasError(f"not the same workload: engine {wl_e}, ours {wl_o}")
    steps = ours.steps.assign(n_committed=ours.steps["committed"].map(len)).sort_values(["doc_id", "turn", "step"])
    turns = [list(zip(g["k"], g["accept_len"], g["n_committed"])) for _, g in steps.groupby(["doc_id", "turn"])]
    gen = (om["config"].get("workload") or {}).get("gen_tokens")
    o = ours_side(steps["k"].tolist(), steps["accept_len"].tolist(), steps["n_committed"].tolist(),
                  len(turns), om["timings"], args.ours_label, wall_s=args.ours_wall_s,
                  num_drafts=(om.get("levers") or {}).get("num_drafts"),
                  width=(om.get("waves") or {}).get("batch_width"),
                  budget=None if gen is None else budgeted(turns, int(gen)), build_s=args.ours_build_s)
    e = engine_side(reqs, int((em.get("collect") or {}).get("concurrency") or 1), args.label,
                    wall_s=args.engine_wall_s, startup_s=args.engine_startup_s, build_s=args.build_s,
                    k=args.engine_k, width=args.engine_slots)
    size = study_size(args.prereg, args.p, args.power, args.icc, args.m)
    want = expected_tokens(om["config"]["workload"])
    out = {"sizing": asdict(size), "sizing_words": size.words(), "expected_tokens": want,
           "workload_hash": wl_o, "engine_run": str(args.engine), "ours_run": str(args.ours),
           "ours_device": om.get("device"), "ours_dtype": om.get("dtype"), "systems": {}}
    for key, s in (("engine", e), ("ours", o)):
        r = rates(s)
        verdict = seconds_to_verdict(size.n_per_arm, r["steps_per_s"])
        out["systems"][key] = {**asdict(s), **r, "verdict_s": verdict,
                               "verdict_s_with_startup": None if s.startup_s is None else verdict + s.startup_s,
                               "verdict_s_hi": seconds_to_verdict(size.n_per_arm, r["steps_per_s_lo"])}
    out["notes"] = notes(out, e, o, want)
    return out


def notes(out: dict, e: Side, o: Side, want: Optional[int]) -> list[str]:
    n = []
    for s in (e, o):
        if want is not None and s.committed != want:
            n.append(f"{s.label}: {s.committed} committed tokens, the workload asks {want}")
    if e.requests != o.requests:
        n.append(f"requests differ: engine {e.requests}, ours {o.requests}")
    return n


# ---- output ------------------------------------------------------------------------------------

def _f(x, fmt: str = ",.1f") -> str:
    return "-" if x is None else format(x, fmt)


def table(res: dict) -> str:
    e, o = res["systems"]["engine"], res["systems"]["ours"]
    n = res["sizing"]["n_per_arm"]
    rows = [
        ("requests (doc, turn)", _f(e["requests"], ","), _f(o["requests"], ",")),
        ("K (draft max) / slots or batch width", f"{_f(e['k'], 'd')} / {_f(e['width'], 'd')}",
         f"{_f(o['k'], 'd')} / {_f(o['width'], 'd')}"),
        ("committed tokens", _f(e["committed"], ","), _f(o["committed"], ",")),
        ("verify steps", f"{e['steps_lo']:,}-{e['steps']:,}", _f(o["steps"], ",")),
        ("drafted / accepted", f"{e['drafted']:,} / {e['accepted']:,}", f"{o['drafted']:,} / {o['accepted']:,}"),
        ("... ours as the server counts (verify steps: drafted / accepted)", "(as above)",
         "-" if not o["budgeted"] else "{:,}: {:,} / {:,}".format(*o["budgeted"])),
        ("mean accepted per verify step", f"{_f(e['mean_accepted'], '.4f')}-{_f(e['mean_accepted_hi'], '.4f')}",
         _f(o["mean_accepted"], ".4f")),
        ("draft acceptance rate", _f(e["draft_rate"], ".4f"), _f(o["draft_rate"], ".4f")),
        ("build s", _f(e["build_s"]), _f(o["build_s"])),
        ("start-up s", _f(e["startup_s"], ".2f"), _f(o["startup_s"], ".2f")),
        ("work s", _f(e["work_s"], ".3f"), _f(o["work_s"], ".3f")),
        ("wall s (the command)", _f(e["wall_s"], ".2f"), _f(o["wall_s"], ".2f")),
        ("committed tokens / work s", _f(e["tokens_per_s"]), _f(o["tokens_per_s"])),
        ("verify steps / work s", f"{e['steps_per_s_lo']:,.1f}-{e['steps_per_s']:,.1f}", _f(o["steps_per_s"])),
        ("steps per arm, powered REFEED study", _f(n, ","), _f(n, ",")),
        ("seconds to a powered REFEED verdict", f"{_f(e['verdict_s'])}-{_f(e['verdict_s_hi'])}", _f(o["verdict_s"])),
        ("... plus start-up", _f(e["verdict_s_with_startup"]), _f(o["verdict_s_with_startup"])),
    ]
    lines = [f"| | {e['label']} | {o['label']} |", "|---|---|---|", *(f"| {a} | {b} | {c} |" for a, b, c in rows)]
    lines += ["", f"sizing: {res['sizing_words']}",
              f"work s: engine = {e['work_how']}; ours = {o['work_how']} ({res['ours_device']}, {res['ours_dtype']})",
              "the engine's verify steps: predicted_n - 1 - accepted per request, less at most one undrafted step "
              "each (the range; the verdict's range follows it)"]
    lines += [f"NOTE: {x}" for x in res["notes"]]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", required=True, help="the collector's run directory (llama.cpp, --token-ids)")
    p.add_argument("--ours", required=True, help="our runner's run directory, the same workload")
    p.add_argument("--label", default="llama.cpp", help="the engine's column title")
    p.add_argument("--ours-label", default="atlas_ab runner", help="our column title")
    p.add_argument("--engine-wall-s", type=float, help="the collector command's wall seconds")
    p.add_argument("--ours-wall-s", type=float, help="the runner command's wall seconds")
    p.add_argument("--engine-startup-s", type=float, help="the server's launch to healthy, seconds")
    p.add_argument("--build-s", type=float, help="the engine's build, seconds (shown)")
    p.add_argument("--ours-build-s", type=float,
                   help="our warm-up run that built our kernels, seconds (shown as our build)")
    p.add_argument("--engine-k", type=int, help="the server's --spec-draft-n-max (shown)")
    p.add_argument("--engine-slots", type=int, help="the server's --parallel (shown)")
    p.add_argument("--prereg", default="refeed_p2_uncond", help="the pre-registration the study is sized from")
    p.add_argument("--p", type=float, default=SEEDS_P2_UNCOND, help="the control arm's p2_uncond")
    p.add_argument("--power", type=float, default=0.8)
    p.add_argument("--icc", type=float, help="intra-document correlation (default: 0 for a binomial prereg)")
    p.add_argument("--m", type=float, help="steps per document, with --icc")
    p.add_argument("--json", help="write the figures here")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        for f in ("engine_wall_s", "ours_wall_s", "engine_startup_s", "build_s", "ours_build_s"):
            v = getattr(args, f)
            if v is not None and not (math.isfinite(v) and v > 0):
                raise AtlasError(f"--{f.replace('_', '-')} {v}: must be seconds > 0")
        res = compare(args)
    except AtlasError as e:
        print(f"{PROG}: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    print(table(res))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
