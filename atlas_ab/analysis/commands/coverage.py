"""`coverage RUN`: per-depth conditional top-k coverage of a SHADOW_TOPK run."""
from __future__ import annotations

from atlas_ab.analysis import cli
from atlas_ab.analysis.coverage import topk_coverage
from atlas_ab.analysis.tree_prediction import predict_tree
from atlas_ab.config.tree import parse_tree


def register(subparsers) -> None:
    p = subparsers.add_parser("coverage", help="per-depth conditional top-k coverage (SHADOW_TOPK runs)")
    p.add_argument("run", metavar="RUN", help="run directory")
    p.add_argument("--tree", metavar="SPEC", help="also predict a static tree's per-depth acceptance and tokens "
                   "per step from the coverage: paths '[(0,), (1,), (0, 0)]' or top-k per depth 'topk:2,1'")
    p.add_argument("--linear-k", type=int, metavar="K", help="the linear chain --tree is compared with "
                   "(default: the tree's depth)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    cli.add_run_flags(p, mismatch=False)
    p.set_defaults(func=run)


def run(args) -> int:
    tree = parse_tree(args.tree) if args.tree else None      # a bad tree is refused before the run is read
    (r,), _ = cli.load_runs([args.run], args, optional=("topk_ids", "target", "drafts"))
    cov = topk_coverage(r.steps, r.arm)
    if tree is None:
        return cli.emit(args, {"run": str(args.run), **cov.to_dict()}, cov.summary())
    pred = predict_tree(cov, tree, linear_k=args.linear_k)
    return cli.emit(args, {"run": str(args.run), **cov.to_dict(), "tree": pred.to_dict()},
                    cov.summary() + "\n\n" + pred.summary())

