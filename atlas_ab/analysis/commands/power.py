"""`power`: steps per arm to show an effect, and what a given n would show (see stats/sizing.py)."""
from __future__ import annotations

import math

from atlas_ab import AtlasError
from atlas_ab.analysis import cli
from atlas_ab.analysis.stats import sizing

#: each flag's valid range, in the words the refusal prints
RANGES = {
    "p": (lambda v: 0 <= v <= 1, "a rate in [0, 1]"),
    "delta": (lambda v: v != 0 and -1 <= v <= 1, "a non-zero difference of rates, in [-1, 1]"),
    "sd": (lambda v: v > 0, "a threshold in sd, > 0"),
    "alpha": (lambda v: 0 < v < 1, "a two-sided alpha in (0, 1)"),
    "power": (lambda v: 0 < v < 1, "a power in (0, 1)"),
    "icc": (lambda v: 0 <= v <= 1, "an intra-document correlation in [0, 1]"),
    "m": (lambda v: v >= 1, "steps per document, >= 1"),
    "n": (lambda v: v >= 1, "steps per arm, >= 1"),
}


def check(args) -> None:
    """Refuse, naming the flag, a value that is not finite or out of its range."""
    for flag, (ok, words) in RANGES.items():
        v = getattr(args, flag)
        if v is not None and not (math.isfinite(v) and ok(v)):
            raise AtlasError(f"--{flag} {v}: must be {words}")


def run(args) -> int:
    check(args)
    res = sizing.solve(args.p, args.delta, threshold_sd=args.sd, alpha=args.alpha, power=args.power,
                       icc=args.icc, m=args.m, n=args.n)
    return cli.emit(args, res.to_dict(), res.summary())


def register(subparsers) -> None:
    p = subparsers.add_parser("power", help="sample size and power (unpooled normal approximation)")
    p.add_argument("--p", type=float, required=True, help="control (base) rate")
    p.add_argument("--delta", type=float, required=True, help="effect: treatment - control")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--sd", type=float, help="threshold in sd the effect must show")
    g.add_argument("--alpha", type=float, help="two-sided alpha instead of a threshold in sd")
    p.add_argument("--power", type=float, default=0.8)
    p.add_argument("--icc", type=float, default=0.0, help="intra-document correlation of outcomes")
    p.add_argument("--m", type=float, default=1.0, help="steps per document (with --icc)")
    p.add_argument("--n", type=int, help="also report what n steps per arm would show")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(func=run)
