"""The claims runs grouped by model (and sampling temperature), each group's workload facts, and
the check that a FINDINGS text quotes only those facts."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from atlas_ab import AtlasError
from atlas_ab.analysis.report.markdown import table as _table
from atlas_ab.analysis.runs import Run


@dataclass(frozen=True)
class ModelRuns:
    label: str
    runs: tuple[Run, ...]

    def arm(self, name: str) -> Run | None:
        return next((r for r in self.runs if r.arm == name), None)

    @property
    def manifest(self) -> dict:
        return self.runs[0].manifest or {}


def temperature(run: Run) -> float:
    """The run's sampling temperature (0: greedy verification, also for runs that predate sampling)."""
    return float((((run.manifest or {}).get("workload") or {}).get("sampling") or {}).get("temperature") or 0.0)


def _replicates(runs) -> bool:
    """Runs of one arm that are replicates: each its own process (a registration's `replicates`)."""
    procs = [((r.manifest or {}).get("host") or {}).get("process") for r in runs]
    return None not in procs and len(set(procs)) == len(procs)


def group_by_model(runs: list[Run]) -> list[ModelRuns]:
    """Runs by model, and within a model by sampling temperature (a sampled study's arms are the
    greedy study's under another verification: one group each)."""
    groups: dict[tuple, list[Run]] = {}
    for r in runs:
        groups.setdefault((r.hash("model") or "unknown", temperature(r)), []).append(r)
    out = []
    for (_h, temp), rs in groups.items():
        m = (rs[0].manifest or {}).get("model") or {}
        arch = m.get("architecture") or {}
        params = (m.get("params") or {}).get("total")
        name = Path(m["path"]).name if m.get("name") == "path" and m.get("path") else m.get("name", "?")
        label = (f"{name} (d={arch.get('hidden_size')}, {arch.get('num_hidden_layers')} layers, "
                 f"{params / 1e6:.1f}M params)" if params else str(name))
        if temp:
            label += f", sampled at T={temp:g}"
        for study in {((r.manifest or {}).get("study") or {}).get("name") for r in rs}:
            wl = {r.hash("workload") for r in rs if ((r.manifest or {}).get("study") or {}).get("name") == study}
            if len(wl) > 1:
                raise AtlasError(f"model {label}, study {study}: its runs measured {len(wl)} different workloads "
                                 f"({', '.join(sorted(str(w)[:19] for w in wl))}); one study, one workload")
        names = [r.arm for r in rs]
        dup = {n for n in names if names.count(n) > 1 and not _replicates(r for r in rs if r.arm == n)}
        if dup:
            raise AtlasError(f"model {label}: arm {sorted(dup)[0]!r} appears in more than one run (replicates of an "
                             "arm must each be their own process)")
        out.append(ModelRuns(label, tuple(sorted(rs, key=lambda r: r.arm))))
    return sorted(out, key=lambda g: ((g.manifest.get("model") or {}).get("params", {}).get("total", 0),
                                      temperature(g.runs[0])))


def workload_facts(group: ModelRuns) -> list[dict]:
    """Per study of the group, the workload numbers its prose quotes (FINDINGS.md): documents,
    source files (the cluster unit), turns, generated tokens per turn, verify steps per arm."""
    out = []
    studies: dict[str, list[Run]] = {}
    for r in group.runs:
        studies.setdefault(((r.manifest or {}).get("study") or {}).get("name") or "none", []).append(r)
    for study, rs in sorted(studies.items()):
        m = rs[0].manifest or {}
        w, c = m.get("workload") or {}, (m.get("config") or {}).get("workload") or {}
        docs = len(w["doc_cluster"]) if w.get("doc_cluster") is not None else c.get("n_docs")
        files = w.get("n_clusters") if w.get("cluster_unit") == "source file" else docs
        steps = [int((r.steps["k"] >= 1).sum()) for r in rs]
        out.append({"study": study, "mode": m.get("mode"), "arms": len(rs), "documents": docs, "source_files": files,
                    "turns": c.get("turns"), "gen_tokens": c.get("gen_tokens"),
                    "verify_steps_per_arm": [min(steps), max(steps)]})
    return out


def facts_table(facts: list[dict]) -> list[str]:
    return _table(["study", "mode", "arms", "documents", "source files (clusters)", "turns x generated tokens",
                   "verify steps per arm"],
                  [[f["study"], f["mode"], f["arms"], f"{f['documents']:,}", f"{f['source_files']:,}",
                    f"{f['turns']} x {f['gen_tokens']}",
                    f"{f['verify_steps_per_arm'][0]:,} - {f['verify_steps_per_arm'][1]:,}"] for f in facts])


#: Prose numbers check_findings holds to the report's workload facts: "N source files", "N clusters",
#: "N documents" (the forms FINDINGS.md uses for them).
_PROSE = {"source files": "source_files", "clusters": "source_files", "documents": "documents"}


def check_findings(text: str, data: dict) -> list[str]:
    """The workload numbers in a FINDINGS text that no model's workload in `data` (report.json) has."""
    allowed: dict[str, set] = {k: set() for k in set(_PROSE.values())}
    for g in data["models"].values():
        for f in g.get("workload") or []:
            for k in allowed:
                allowed[k].add(f[k])
    bad = []
    for words, key in _PROSE.items():
        for m in re.finditer(rf"\b(\d[\d,]*) {words}\b", text):
            n = int(m.group(1).replace(",", ""))
            if n not in allowed[key]:
                bad.append(f"'{m.group(0)}': the report's workloads have {key.replace('_', ' ')} "
                           f"{', '.join(str(x) for x in sorted(allowed[key])) or 'none'}")
    return bad
