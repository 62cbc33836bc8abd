"""`coverage RUN`: per-depth conditional top-k coverage of a SHADOW_TOPK run."""
from __future__ import annotations

from atlas_ab import AtlasError
from atlas_ab.analysis import cli
from atlas_ab.analysis.tree import predict_tree, topk_coverage, tree_check
from atlas_ab.config.tree import parse_tree


def register(subparsers) -> None:
    p = subparsers.add_parser("coverage", help="per-depth conditional top-k coverage (SHADOW_TOPK runs)")
    p.add_argument("run", metavar="RUN", help="run directory")
    p.add_argument("--tree", metavar="SPEC", help="also predict a static tree's per-depth acceptance and tokens "
                   "per step from the coverage: paths '[(0,), (1,), (0, 0)]' or top-k per depth 'topk:2,1'")
    p.add_argument("--linear-k", type=int, metavar="K", help="the linear chain --tree is compared with "
                   "(default: the tree's depth)")
    p.add_argument("--realized", metavar="TREE_RUN", help="with --tree: test the prediction against the tree arm's "
                   "run, position by position and past its branches (analysis/tree/check.py)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    cli.add_run_flags(p, mismatch=False)
    p.set_defaults(func=run)


def run(args) -> int:
    tree = parse_tree(args.tree) if args.tree else None      # a bad tree is refused before the run is read
    if args.realized and tree is None:
        raise AtlasError("coverage --realized: name the tree it ran with --tree")
    (r,), _ = cli.load_runs([args.run], args, optional=("topk_ids", "target", "drafts", "position"))
    cov = topk_coverage(r.steps, r.arm)
    if tree is None:
        return cli.emit(args, {"run": str(args.run), **cov.to_dict()}, cov.summary())
    pred = predict_tree(cov, tree, linear_k=args.linear_k)
    out, text = {"run": str(args.run), **cov.to_dict(), "tree": pred.to_dict()}, cov.summary() + "\n\n" + pred.summary()
    if args.realized:
        (t,), _ = cli.load_runs([args.realized], args, optional=("tree_path", "position"))
        check = tree_check(r, t, cov, tree)
        out["check"], text = check.to_dict(), text + "\n\n" + check.summary()
    return cli.emit(args, out, text)

