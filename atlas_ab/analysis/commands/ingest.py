"""`ingest SOURCE FILE... --out RUN`, `export FORMAT RUN --out FILE`, `pairs RUN_A RUN_B`:
engine telemetry into the contract, ours out as vLLM's, and request-level pairing
(atlas_ab/ingest; docs/ingest.md)."""
from __future__ import annotations

from atlas_ab.analysis import cli


def run_ingest(args) -> int:
    from atlas_ab.ingest import ingest

    res = ingest(args.source, args.files, args.out, arm=args.arm, k=args.k, strict=args.strict)
    for w in res.warnings:
        cli.warn(w)
    return cli.emit(args, res.to_dict(), res.summary())


def run_export(args) -> int:
    from atlas_ab.analysis.runs import export

    res = export(args.run, args.format, args.out, allow_incomplete=args.allow_incomplete)
    return cli.emit(args, res.to_dict(), res.summary())


def run_pairs(args) -> int:
    from atlas_ab.analysis.comparison import pairs
    from atlas_ab.analysis.runs import (
        check_code,
        check_provenance,
        check_texts,
        code_json,
        load_units,
        top_lines,
        without_units,
    )

    a, b = (load_units(p, args.allow_incomplete) for p in (args.run_a, args.run_b))
    mismatches = check_provenance([a, b], args.allow_mismatch) + check_code([a, b], args.allow_mismatch)
    for m in mismatches:
        cli.warn(m + " (allowed by --allow-mismatch)")
    texts = check_texts(a, b, args.drop_differing)      # pairs only requests that decoded one text
    if texts.note:
        cli.warn(texts.note)
    a, b = without_units(a, texts.differ), without_units(b, texts.differ)
    res = pairs(a, b, args.metric, n_boot=args.bootstrap, seed=args.seed)
    return cli.emit(args, {**res.to_dict(), "code": code_json([a, b]), "texts": texts.to_dict()},
                    top_lines([a, b], mismatches) + "\n" + res.summary()
                    + (f"\n{texts.note}" if texts.differ else ""))


def register(subparsers) -> None:
    from atlas_ab.analysis.runs import FORMATS
    from atlas_ab.ingest import SOURCES

    p = subparsers.add_parser("ingest", help="engine telemetry (vLLM, SGLang, TensorRT-LLM, llama.cpp, "
                                             "Prometheus, the reference engine's log) into a run directory")
    p.add_argument("source", choices=list(SOURCES), help="what emitted the files")
    p.add_argument("files", nargs="+", metavar="FILE", help="responses (JSON, JSON lines, SSE), /metrics scrapes "
                                                            "(before, after), or logs")
    p.add_argument("--out", required=True, metavar="RUN", help="run directory to write (must not hold a run)")
    p.add_argument("--arm", help="arm name (default: the directory name)")
    p.add_argument("--k", type=int, help="sglang tree drafting: speculative_num_steps (the accepted path's depth)")
    p.add_argument("--strict", action="store_true", help="refuse a field or metric name the reader does not know "
                                                         "(default: ignore it, warn once, note it in the manifest)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(func=run_ingest)

    p = subparsers.add_parser("export", help="a run as vLLM's per-request spec-decode metrics (JSON lines)")
    p.add_argument("format", choices=FORMATS, help="vllm-detailed (per-step arrays) or histogram (summary)")
    p.add_argument("run", metavar="RUN", help="run directory")
    p.add_argument("--out", required=True, metavar="FILE", help="JSON-lines file to write")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    cli.add_run_flags(p, mismatch=False)
    p.set_defaults(func=run_export)

    p = subparsers.add_parser("pairs", help="two runs paired request by request on (doc_id, turn)")
    cli.add_two_runs(p, "p1", "p{i}, p{i}_cond, tokens_per_step, draft_acceptance_rate")
    p.add_argument("--drop-differing", action="store_true",
                   help="leave out (and count) requests whose completion texts differ between the runs "
                        "(default: refuse them)")
    p.set_defaults(func=run_pairs)
