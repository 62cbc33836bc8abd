"""`ladder RUNS... --out DIR`: which K to serve at each batch width (analysis/ladder/fitting.py), written as
the engines' configs (analysis/ladder/configs.py) with its figures; given a `+study=families_ladder` sweep and
`--acceptance` the families study's runs, which drafter family (analysis/ladder/families.py)."""
from __future__ import annotations

from pathlib import Path

from atlas_ab import AtlasError
from atlas_ab.analysis import cli


def run(args) -> int:
    from atlas_ab.analysis.ladder import acceptance_from, fit, model_of, times_from, write_configs
    from atlas_ab.analysis.ladder.machines import on_machines
    from atlas_ab.analysis.runs import expand

    def load(paths):
        return cli.load_each(paths, args.allow_incomplete)

    from atlas_ab.analysis.ladder import is_collected

    paths = expand(args.runs, cli.warn)
    collected = [is_collected(p) for p in paths]
    if any(collected):
        if not all(collected) or args.acceptance:
            raise AtlasError("ladder: collected engine runs and atlas_ab runs (or --acceptance) mixed: give an "
                             "engine's collected runs alone")
        return _engine(args, paths)
    kept = []
    if not args.machines:
        from atlas_ab.analysis.ladder.families import is_family_ladder
        timing = load(args.runs)
        if is_family_ladder(timing):
            return _families(args, timing, load(args.acceptance) if args.acceptance else [], kept)

    def timed(runs):
        return times_from(runs, args.allow_outliers, lambda m: (cli.warn(m), kept.append(m)))

    if args.machines:      # each RUNS argument one machine's runs: machines pooled above their replicates
        if len(args.runs) < 2:
            raise AtlasError("ladder --machines: give each machine's runs as one RUNS argument, >= 2 of them")
        per = [load([p]) for p in args.runs]
        timing = [r for rs in per for r in rs]
        times = on_machines([timed(rs) for rs in per])
        accept = load(args.acceptance) if args.acceptance else per[0]
    else:
        accept = load(args.acceptance) if args.acceptance else timing
        times = timed(timing)
    acc, unit, acc_width = acceptance_from(accept)
    times = _at_widths(times, args.widths)
    res = fit(acc, times, n_boot=args.bootstrap, seed=args.seed, method=args.method, cluster_unit=unit)
    src_t, src_a = model_of(timing), model_of(accept)
    _timing_notes(res, kept, timing)
    res.notes.append(f"timing: {src_t}; acceptance: {src_a}, its runs at batch width {acc_width} "
                     "(the widest that has every K)")
    if args.acceptance:
        res.notes.append("acceptance and timing come from different runs: acceptance on random weights means "
                         "nothing, so it is taken from the trained model's runs, timing from the shape's")
    out = Path(args.out)
    levers = dict(((accept[0].manifest or {}).get("levers") or {}))
    files = write_configs(res, out, levers=levers, max_batch=args.max_batch,
                          provenance={"timing_runs": [str(r.path) for r in timing],
                                      "acceptance_runs": [str(r.path) for r in accept],
                                      "timing_model": src_t, "acceptance_model": src_a, "cluster_unit": unit},
                          allow_single=args.allow_single_replicate)
    return _finish(res, out, files, args)


def _families(args, timing, accept, kept) -> int:
    """A family ladder (+study=families_ladder timing, +study=families acceptance): analysis/ladder/families.py."""
    from atlas_ab.analysis.ladder import fit, model_of
    from atlas_ab.analysis.ladder.families import inputs, write_family_configs

    if not accept:
        raise AtlasError("ladder: a family ladder takes acceptance from the families study's paired replay: give "
                         "its runs with --acceptance (python -m atlas_ab -m +study=families)")
    acc, times, names, unit = inputs(timing, accept, args.allow_outliers, lambda m: (cli.warn(m), kept.append(m)))
    times = _at_widths(times, args.widths)
    res = fit(acc, times, n_boot=args.bootstrap, seed=args.seed, method=args.method, cluster_unit=unit, names=names)
    _timing_notes(res, kept, timing)
    res.notes.append(f"timing: {model_of(timing)}; acceptance: {model_of(accept)}, the families study's paired "
                     "runs (every step, no-draft steps included)")
    out = Path(args.out)
    files = write_family_configs(res, out, timing, allow_single=args.allow_single_replicate)
    return _finish(res, out, files, args)


def _at_widths(times: dict, widths) -> dict:
    """The cells at --widths (all without it)."""
    if not widths:
        return times
    kept = {c: t for c, t in times.items() if c[0] in widths}
    if not kept:
        raise AtlasError(f"--widths {widths}: none of the runs is at those batch widths")
    return kept


def _timing_notes(res, kept: list, timing) -> None:
    """What the fit's notes say of its timing runs: outliers kept, and whether replicates had processes of their own."""
    from atlas_ab.analysis.ladder.live import process_note
    if kept:
        res.notes.append(f"{len(kept)} of {len(timing)} timing runs hold warm-up-sized outliers, kept by "
                         "--allow-outliers: their stalls count in the step times")
    res.notes.append(process_note(timing))


def _finish(res, out: Path, files: dict, args) -> int:
    """The figures and ladder.md beside the configs, then the answer on stdout (or as JSON)."""
    files.update(_figures(res, out))
    (out / "ladder.md").write_text(res.summary() + "\n")
    if args.json:
        cli.emit_json({**res.to_dict(), "files": {k: str(v) for k, v in files.items()}})
    else:
        print(res.summary())
        print("wrote: " + ", ".join(str(p) for p in files.values()))
    return 0


def _figures(res, out: Path) -> dict:
    """The two figures; none, said once, where matplotlib is missing (the GPU machine)."""
    try:
        from atlas_ab.analysis.report import plots
    except ImportError as e:
        cli.warn(f"no figures: {e}")
        return {}
    return {"throughput_png": plots.ladder_throughput_figure(res.cells, out / "ladder_throughput.png", res.names),
            "ladder_png": plots.ladder_figure(res, out / "ladder.png")}


def _engine(args, paths) -> int:
    """The same table from an engine's own acceptance and latency (analysis/ladder/engine.py)."""
    from atlas_ab.analysis.ladder import engine_inputs, fit, write_configs

    acc, times, notes = engine_inputs(paths)
    res = fit(acc, times, n_boot=args.bootstrap, seed=args.seed, method=args.method, require_plain=False)
    res.notes += ["engine telemetry: B is the collector's --concurrency (requests in flight), step time a "
                  "request's wall time over its steps (queueing and prefill inside)"] + notes
    out = Path(args.out)
    files = write_configs(res, out, max_batch=args.max_batch, provenance={"engine_runs": [str(p) for p in paths]},
                          allow_single=args.allow_single_replicate)
    return _finish(res, out, files, args)


def register(subparsers) -> None:
    p = subparsers.add_parser("ladder", help="the K ladder (or the family ladder): best K (family) per batch width, "
                                             "with intervals, as engine configs")
    p.add_argument("runs", nargs="+", metavar="RUN",
                   help="live runs (or a +study=ladder sweep directory): one per (batch width, K, replicate), K=0 "
                        "included; or an engine's collected runs, one per (--concurrency, K)")
    p.add_argument("--out", required=True, help="output directory (configs, ladder.json, ladder.md, figures)")
    p.add_argument("--acceptance", nargs="+", metavar="RUN",
                   help="take acceptance from these runs instead (a trained model's, when RUNS time a random-weight "
                        "shape); live or replay")
    p.add_argument("--method", choices=("delta", "bootstrap"), default="delta",
                   help="the interval that decides ties and 'no K pays' (both are reported)")
    p.add_argument("--widths", type=int, nargs="+", metavar="B", help="only these batch widths")
    p.add_argument("--max-batch", type=int, metavar="N", help="the last range of the configs runs to N (default: "
                                                             "the widest width measured)")
    p.add_argument("--allow-outliers", action="store_true",
                   help="keep step times with warm-up-sized outliers (a busy host's stalls), warning for each "
                        "run, instead of refusing them")
    p.add_argument("--allow-single-replicate", action="store_true",
                   help="write the engine configs even where a cell was timed in one job only (not a verdict: "
                        "the configs' headers say so); without it such a ladder writes ladder.md and ladder.json")
    p.add_argument("--machines", action="store_true",
                   help="each RUN argument is one machine's runs (a sweep directory): each machine's replicates are "
                        "pooled, then the machines, so the spread between machines is inside every interval")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    cli.add_run_flags(p, mismatch=False)
    cli.add_boot_flags(p)
    p.set_defaults(func=run)
