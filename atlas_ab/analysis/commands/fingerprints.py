"""`fingerprints RUN`: the reference engine's REFEED fingerprint verification table of one run."""
from __future__ import annotations

from atlas_ab import AtlasError
from atlas_ab.analysis import cli
from atlas_ab.analysis.fingerprints import fingerprint_table, read_events
from atlas_ab.telemetry.schema import ROW_SPACES


def register(subparsers) -> None:
    p = subparsers.add_parser("fingerprints", help="the REFEED fingerprint verification table of one run "
                                                   "(FINGERPRINTS events)")
    p.add_argument("run", metavar="RUN", help="run directory")
    p.add_argument("--row-space", choices=ROW_SPACES,
                   help="drafter row space for the RoPE rule (default: the manifest's row_space)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    cli.add_run_flags(p, mismatch=False)
    p.set_defaults(func=run)


def run(args) -> int:
    """Print the table; exit 1 when any row is below 100%."""
    events, manifest = read_events(args.run, allow_incomplete=args.allow_incomplete)
    row_space = args.row_space or (manifest or {}).get("row_space")
    if row_space is None:
        raise AtlasError(f"{args.run}: no row_space in a manifest; pass --row-space compact|dense")
    table = fingerprint_table(events, row_space)
    if args.json:
        cli.emit_json({"run": str(args.run), **table.to_dict()})
    else:
        print(f"{args.run}")
        print(table.summary())
    return 0 if table.ok else 1
