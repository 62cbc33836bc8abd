"""`throughput --control RUN... --treatment RUN...`: one arm's tokens/s over another's, each arm's runs its
replicates, pooled by random effects (analysis/ladder/throughput.py); one run an arm is marked
"single replicate: not a verdict"."""
from __future__ import annotations

from atlas_ab.analysis import cli


def run(args) -> int:
    from atlas_ab.analysis.ladder import throughput_ratio
    def load(paths):
        return cli.load_each(paths, args.allow_incomplete)

    res = throughput_ratio(load(args.control), load(args.treatment))
    return cli.emit(args, res.to_dict(), res.summary())


def register(subparsers) -> None:
    p = subparsers.add_parser("throughput", help="tokens/s of one arm over another, each arm's runs its replicates")
    p.add_argument("--control", nargs="+", required=True, metavar="RUN",
                   help="the control arm's live runs at batch width 1, one per replicate job")
    p.add_argument("--treatment", nargs="+", required=True, metavar="RUN", help="the treatment arm's runs")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    cli.add_run_flags(p, mismatch=False)
    p.set_defaults(func=run)
