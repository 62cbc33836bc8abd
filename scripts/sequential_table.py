"""The sequential claims questions against their fixed-n registrations, one Markdown row per
question and model: the sequential decision and where it stopped, the verify steps it ran per arm,
the fixed-n run's steps and verdict, and whether the two verdicts agree where both decided.

    python scripts/sequential_table.py --out DIR LABEL=STUDY_DIR:FIXED_REPORT_JSON ...

STUDY_DIR holds a sequential study's study.json (atlas_ab/study/sequential.py); FIXED_REPORT_JSON is
`python -m atlas_ab.analysis report` of the fixed-n sweep (`+study=claims`), or a `claims` report's
report.json (its model whose label starts with LABEL). A sequential registration claims_seq_X
answers the fixed-n claims_X.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

DECIDED = ("MET", "NOT MET")


def rows(label: str, study_dir: Path, fixed_json: Path | None) -> list[dict]:
    study = json.loads((study_dir / "study.json").read_text())
    fixed = {}
    if fixed_json is not None and fixed_json.is_file():
        data = json.loads(fixed_json.read_text())
        if "models" in data:    # a `claims` report: the model whose label starts with LABEL, greedy
            key = next((k for k in data["models"] if k.startswith(label) and "sampled" not in k), None)
            qs = (data["models"].get(key) or {}).get("questions") or {}
            fixed = {q["verdict"]["name"]: q["verdict"] for q in qs.values() if q.get("verdict")}
        else:                   # a `report` of the fixed-n sweep
            fixed = {v["name"]: v for v in data.get("verdicts", [])}
    out = []
    for name, e in study["preregs"].items():
        looks, at = e.get("looks") or [], e.get("decided_at")
        lk = looks[at - 1] if at else (looks[-1] if looks else {})
        sv = e.get("saving") or {}
        used = max((sv.get("steps_per_arm") or {0: 0}).values())
        f = fixed.get(name.replace("claims_seq_", "claims_", 1)) or {}
        f_steps = max(f.get("n_control") or 0, f.get("n_treatment") or 0) or None
        seq_d, fix_d = e.get("decision"), f.get("status")
        agree = ("yes" if seq_d == fix_d else "**no**") if seq_d in DECIDED and fix_d in DECIDED else \
            "n/a (not both decided)"
        out.append({"model": label, "question": name, "decision": seq_d, "look": lk.get("index"),
                    "documents": lk.get("documents"), "waves": lk.get("waves"), "steps_per_arm": used,
                    "fixed_n_per_arm": sv.get("fixed_n_per_arm"), "fixed_run_steps": f_steps,
                    "saved_vs_fixed_run": None if not f_steps else 1 - used / f_steps,
                    "fixed_verdict": fix_d, "agree": agree})
    return out


def markdown(table: list[dict]) -> str:
    head = ["model", "question", "sequential", "stopped at", "verify steps/arm", "fixed-n run steps/arm",
            "saved vs fixed-n run", "registered min/arm", "fixed-n verdict", "agree"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in table:
        saved = "n/a" if r["saved_vs_fixed_run"] is None else f"{r['saved_vs_fixed_run']:.0%}"
        lines.append("| " + " | ".join([
            r["model"], r["question"], str(r["decision"]),
            f"look {r['look']} ({r['documents']} docs, {r['waves']} waves)" if r["look"] else "no look",
            f"{r['steps_per_arm']:,}", f"{r['fixed_run_steps']:,}" if r["fixed_run_steps"] else "n/a", saved,
            f"{r['fixed_n_per_arm']:,}" if r["fixed_n_per_arm"] else "n/a", str(r["fixed_verdict"]), r["agree"]])
            + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", metavar="LABEL=STUDY_DIR:FIXED_REPORT_JSON")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    table = []
    for spec in a.runs:
        label, _, rest = spec.partition("=")
        study, _, fixed = rest.partition(":")
        table += rows(label, Path(study), Path(fixed) if fixed else None)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sequential_table.json").write_text(json.dumps(table, indent=1))
    (out / "sequential_table.md").write_text(markdown(table))
    print(markdown(table), end="")


if __name__ == "__main__":
    main()
