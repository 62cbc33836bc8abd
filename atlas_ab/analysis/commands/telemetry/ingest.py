"""`ingest SOURCE FILE... --out RUN`: engine telemetry into the contract (atlas_ab/ingest;
docs/ingest.md)."""
from __future__ import annotations

from atlas_ab.analysis import cli


def run(args) -> int:
    from atlas_ab.ingest import ingest

    res = ingest(args.source, args.files, args.out, arm=args.arm, k=args.k, strict=args.strict)
    for w in res.warnings:
        cli.warn(w)
    return cli.emit(args, res.to_dict(), res.summary())


def register(subparsers) -> None:
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
    p.set_defaults(func=run)
