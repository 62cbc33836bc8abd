"""The one Markdown table writer of the reports (report/, claims/)."""
from __future__ import annotations


def table(header: list[str], rows: list[list]) -> list[str]:
    """A GitHub Markdown table, one line per row; cells are str()-ed."""
    return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            + ["| " + " | ".join(map(str, r)) + " |" for r in rows])
