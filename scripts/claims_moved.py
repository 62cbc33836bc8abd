"""What moved between two claims reports: per model and question, the verdict, the effect and its sd
in each, as the Markdown table a FINDINGS.md starts from (the "why" column is left to write).

    python scripts/claims_moved.py analysis/reports/claims_2026-11-30/report.json \
        analysis/reports/claims_2026-12-02/report.json
"""
from __future__ import annotations

import json
import sys


def rows(path: str) -> dict:
    out = {}
    for label, g in json.load(open(path))["models"].items():
        for name, q in g["questions"].items():
            v = q["verdict"]
            out[(label, name)] = (v["status"], v.get("delta"), v.get("sd"), v.get("z"))
    return out


def fmt(r) -> str:
    if r is None:
        return "not asked"
    status, delta, sd, z = r
    if delta is None:
        return status
    return f"{status} {delta:+.4f} ({z:.1f} sd)" if z is not None else f"{status} {delta:+.4f}"


def main(old: str, new: str) -> None:
    a, b = rows(old), rows(new)
    print("| model | question | old | new | moved | why |")
    print("|---|---|---|---|---|---|")
    for key in sorted(set(a) | set(b)):
        ra, rb = a.get(key), b.get(key)
        moved = "same" if ra == rb else ("verdict" if ra is None or rb is None or ra[0] != rb[0] else "figures")
        print(f"| {key[0]} | {key[1]} | {fmt(ra)} | {fmt(rb)} | {moved} | |")


if __name__ == "__main__":
    main(*sys.argv[1:3])
