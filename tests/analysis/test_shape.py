"""The analysis' shape, held: small modules in small folders, a run's grain asked through its
declared type (runs.AnyRun) and never sniffed, no private name imported across modules, every
CLI verb listed, and judging a registration without a plotting library."""
import argparse
import ast
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "atlas_ab"
ANALYSIS = PACKAGE / "analysis"
#: the most lines one module of the analysis holds, and the most modules one of its folders holds
#: (a package's __init__.py is the folder itself, not one of its modules)
MAX_LINES = 450
MAX_MODULES = 12


def _sources(root: Path) -> list[Path]:
    return sorted(root.rglob("*.py"))


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_no_module_of_the_analysis_is_over_the_line_limit():
    long = {_rel(p): n for p in _sources(ANALYSIS) if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_no_folder_of_the_analysis_holds_more_than_the_module_limit():
    folders = {p.parent for p in _sources(ANALYSIS)}
    crowded = {_rel(d): n for d in folders
               if (n := len([p for p in d.glob("*.py") if p.name != "__init__.py"])) > MAX_MODULES}
    assert crowded == {}


#: the names a run goes by where the analysis holds one (a loaded run, either arm of a pair)
RUN_NAMES = re.compile(r"(^|_)runs?$|^(r|a|b|control|treatment|baseline|candidate|best|shadow|tree_run)$")


def _name_of(node) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def test_no_run_is_sniffed_for_its_attributes():
    """What a run's grain gives is asked of its declared type (runs.AnyRun: has_steps, counts, ...),
    never found by hasattr/getattr on the run."""
    sniffed = []
    for path in _sources(PACKAGE):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("hasattr", "getattr") and len(node.args) >= 2
                    and isinstance(node.args[1], ast.Constant)           # an attribute named, not a field looked up
                    and RUN_NAMES.search(_name_of(node.args[0]) or "")):
                sniffed.append(f"{_rel(path)}:{node.lineno}")
    assert sniffed == []


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_private_name_is_imported_across_modules():
    """`from m import _x` and `m._x` on an imported module of the package: a name another module needs
    is public where it belongs."""
    crossing = []
    for path in _sources(PACKAGE):
        me = _module_of(path)
        tree = ast.parse(path.read_text())
        modules = set()          # local names bound to a module of the package
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("atlas_ab"):
                for a in node.names:
                    if _private(a.name) and node.module != me:
                        crossing.append(f"{_rel(path)}:{node.lineno} from {node.module} import {a.name}")
                    if _is_module(f"{node.module}.{a.name}"):
                        modules.add(a.asname or a.name)
            elif isinstance(node, ast.Import):
                modules |= {a.asname for a in node.names if a.name.startswith("atlas_ab") and a.asname}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and _private(node.attr) and isinstance(node.value, ast.Name)
                    and node.value.id in modules):
                crossing.append(f"{_rel(path)}:{node.lineno} {node.value.id}.{node.attr}")
    assert crossing == []


def _is_module(module: str) -> bool:
    where = ROOT / Path(*module.split("."))
    return where.with_suffix(".py").exists() or (where / "__init__.py").exists()


def _packages() -> list[str]:
    return sorted(_module_of(p) for p in ANALYSIS.glob("*/__init__.py"))


@pytest.mark.parametrize("package", _packages())
def test_each_public_name_resolves_and_no_submodule_shadows_it(package):
    """A package's PUBLIC map names where each name is defined; a submodule of the same name would
    replace the name on the package once imported, so there is none."""
    mod = importlib.import_module(package)
    public = getattr(mod, "PUBLIC", {})
    submodules = {p.stem for p in (ROOT / Path(*package.split("."))).glob("*.py")}
    assert sorted(set(public) & submodules) == []
    for name, where in public.items():
        assert hasattr(importlib.import_module(where), name), f"{package}.{name}: not in {where}"


#: The analysis' packages and top-level modules in import order (README, "What flows where"): each
#: imports only those before it, deferred imports inside functions included.
ORDER = ("lazy", "stats", "metrics", "runs", "cli", "comparison", "tree", "economics", "fingerprints", "ladder",
         "criteria", "sequential", "report", "claims", "ci_gate", "commands", "__main__")


def _part(path: Path) -> str:
    rel = path.relative_to(ANALYSIS).parts
    return rel[0] if len(rel) > 1 else path.stem


def test_the_analysis_imports_in_one_direction():
    assert {_part(p) for p in _sources(ANALYSIS)} - {"__init__"} == set(ORDER)
    back = []
    for path in _sources(ANALYSIS):
        me = _part(path)
        if me == "__init__":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and \
                    (node.module or "").startswith("atlas_ab.analysis"):
                parts = node.module.split(".")
                for there in [parts[2]] if len(parts) > 2 else [a.name for a in node.names]:
                    if there != me and ORDER.index(there) > ORDER.index(me):
                        back.append(f"{_rel(path)}:{node.lineno} imports {there}")
    assert back == []


def test_the_cli_lists_every_verb_and_each_verb_is_its_module():
    from atlas_ab.analysis.__main__ import SUBCOMMANDS, verb_module

    modules = {p.stem for p in (ANALYSIS / "commands").rglob("*.py") if p.name != "__init__.py"}
    assert sorted(SUBCOMMANDS) == sorted(modules)
    for verb in SUBCOMMANDS:
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(verb_module(verb)).register(sub)
        assert list(sub.choices) == [verb]


JUDGE = """
import json, sys
from pathlib import Path
import numpy as np
import pandas as pd
from atlas_ab.analysis.criteria import judge
from atlas_ab.analysis.report.judged import judge_registered, preregs_to_judge
from atlas_ab.analysis.runs import load_run
from tests.helpers.synth import write_run

out = Path(sys.argv[1])
rng = np.random.default_rng(0)
n = 2400
runs = []
for arm, p in (("ctl", 0.55), ("trt", 0.65)):
    df = pd.DataFrame({"doc_id": np.repeat(np.arange(12), n // 12), "turn": np.zeros(n, np.int32),
                       "step": np.tile(np.arange(n // 12), 12), "k": np.full(n, 2, np.int32),
                       "accept_len": (rng.random(n) < p).astype(np.int32) * (1 + (rng.random(n) < p))})
    runs.append(load_run(write_run(out / arm, df, arm)))
prereg = out / "d.yaml"
prereg.write_text(json.dumps({"hypothesis": "h", "threshold_sd": 3.0, "min_n_per_arm": 100, "primary_metric": "p1",
                              "direction": "increase", "min_effect": 0.02, "decides": "cluster",
                              "arms": {"control": "ctl", "treatment": "trt"}}))
judged = judge_registered(runs, preregs_to_judge(runs, prereg), n_boot=0, seed=0, allow_ungated=True,
                          evaluate_unlocked=True)
print(json.dumps({"status": [j.verdict.status for j in judged], "panels": len(judged[0].judgement.items),
                  "plotting": sorted(m for m in sys.modules if m.split(".")[0] == "matplotlib"
                                     or m == "atlas_ab.analysis.report.plots")}))
"""


@pytest.mark.slow          # a fresh interpreter (~3 s)
def test_judging_a_registration_imports_no_plotting_library(tmp_path):
    """The report's judging path (criteria, report.judged) judges a registration, its difference
    panel included, in a fresh interpreter that never loads matplotlib."""
    r = subprocess.run([sys.executable, "-c", JUDGE, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert out["status"] == ["MET"] and out["panels"] == 1
    assert out["plotting"] == []
