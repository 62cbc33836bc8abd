"""`coverage RUN`: per-depth conditional top-k coverage of a SHADOW_TOPK run."""
from __future__ import annotations

from atlas_ab.analysis import cli
from atlas_ab.analysis.coverage import topk_coverage


def register(subparsers) -> None:
    p = subparsers.add_parser("coverage", help="per-depth conditional top-k coverage (SHADOW_TOPK runs)")
    p.add_argument("run", metavar="RUN", help="run directory")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    cli.add_run_flags(p, mismatch=False)
    p.set_defaults(func=run)


def run(args) -> int:
    (r,), _ = cli.load_runs([args.run], args, optional=("topk_ids", "target", "drafts"))
    cov = topk_coverage(r.steps, r.arm)
    return cli.emit(args, {"run": str(args.run), **cov.to_dict()}, cov.summary())

