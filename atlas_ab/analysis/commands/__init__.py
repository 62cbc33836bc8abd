"""The analysis CLI's subcommands, one module each (`register(subparsers)` sets `func(args) -> int`).

They hold only argument parsing and output; the work is in the library modules of
`atlas_ab.analysis`, so `import atlas_ab.analysis.commands.compare` never shadows the
library's `compare` function.
"""
