"""`export FORMAT RUN --out FILE`: a run of ours written as vLLM's per-request spec-decode metrics
(analysis/runs/vllm_export.py; docs/ingest.md)."""
from __future__ import annotations

from atlas_ab.analysis import cli


def run(args) -> int:
    from atlas_ab.analysis.runs import export

    res = export(args.run, args.format, args.out, allow_incomplete=args.allow_incomplete)
    return cli.emit(args, res.to_dict(), res.summary())


def register(subparsers) -> None:
    from atlas_ab.analysis.runs import FORMATS

    p = subparsers.add_parser("export", help="a run as vLLM's per-request spec-decode metrics (JSON lines)")
    p.add_argument("format", choices=FORMATS, help="vllm-detailed (per-step arrays) or histogram (summary)")
    p.add_argument("run", metavar="RUN", help="run directory")
    p.add_argument("--out", required=True, metavar="FILE", help="JSON-lines file to write")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    cli.add_run_flags(p, mismatch=False)
    p.set_defaults(func=run)
