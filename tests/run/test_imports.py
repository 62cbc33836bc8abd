"""Dependencies point one way: a run (its entry point, its session locking a study's
pre-registrations, its summary and progress figures) never imports the analysis or its
statistics (scipy, statsmodels, matplotlib)."""
import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

RUN_SIDE = """
import json, sys
from pathlib import Path
import pyarrow as pa
import atlas_ab.__main__
from atlas_ab.config.structured import StudyConfig
from atlas_ab.run.progress import Progress
from atlas_ab.run.session import Job, acceptance_summary, lock_preregs

entries = lock_preregs(StudyConfig(name="refeed", preregs=["analysis/prereg/refeed_p2_uncond.yaml"],
                                   arms=["catchup_on", "refeed_on"]), Job(run_dir=Path(sys.argv[1])))
summary = acceptance_summary(pa.table({"doc_id": [0, 0, 1], "turn": [0, 0, 0], "step": [0, 1, 0],
                                       "k": [2, 2, 0], "accept_len": [2, 0, 0]}))
p = Progress(total_tokens=10, enabled=False)
p.on_step(3, [2, 2], [2, 1])
print(json.dumps({"modules": sorted(sys.modules), "summary": summary, "figures": p.figures(),
                  "locked": [e["sha256"] for e in entries]}))
"""


def test_the_run_side_never_imports_the_analysis_or_its_statistics(tmp_path):
    r = subprocess.run([sys.executable, "-c", RUN_SIDE, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    heavy = [m for m in out["modules"] if m.split(".")[0] in ("scipy", "statsmodels", "matplotlib")
             or m.startswith("atlas_ab.analysis")]
    assert heavy == []
    assert len(out["locked"]) == 1 and len(out["locked"][0]) == 64
    # the definitions the run side uses are the analysis' (telemetry/acceptance.py): 2 verify steps,
    # accept_len 2 and 0 -> p1 = p2_uncond = 0.5, tokens/step 2.0; one serial step
    assert out["summary"] == {"n_steps": 3, "n_serial": 1, "p1": 0.5, "p2_uncond": 0.5, "p2_cond": 1.0,
                              "tokens_per_step": 2.0}
    assert out["figures"]["p1"] == 1.0 and out["figures"]["p2_uncond"] == 0.5 and out["figures"]["n_steps"] == 2


# -- the package's layers, each importable without the layers below it ----------------------------

#: The package's folders in import order: each may import the ones before it, never one after.
#: telemetry is first: it is the contract every side shares (the columns, the row spaces, the metric
#: names), imports no other folder, and the loop imports the record format it writes. The last three
#: are leaves: none imports another.
LAYERS = ("telemetry", "config", "workload", "runtime", "proposers", "speculative", "run", "ingest")
LEAVES = ("analysis", "collect", "engines", "train")
TOP = ("study",)        # drives the run side and judges with the analysis: above both, below nothing
TORCH_FREE = ("telemetry.schema", "telemetry.acceptance", "config", "workload", "ingest", "analysis", "collect")

#: arrows still pointing back, each with the change that removes it (delete the entry when it lands)
PENDING: dict = {}

IMPORT_LAYER = """
import importlib, json, pkgutil, sys
name = sys.argv[1]
mod = importlib.import_module("atlas_ab." + name)
subs = [m.name for m in pkgutil.walk_packages(getattr(mod, "__path__", []), mod.__name__ + ".")
        if not m.name.endswith(".__main__")]
for s in subs:
    importlib.import_module(s)
print(json.dumps({"modules": sorted(sys.modules), "imported": [mod.__name__, *subs]}))
"""


def _downstream(layer: str) -> set[str]:
    if layer in TOP:
        return set()
    if layer in LEAVES:
        return set(LEAVES) - {layer} | set(TOP)
    return set(LAYERS[LAYERS.index(layer) + 1:]) | set(LEAVES) | set(TOP)


def _fresh_import(name: str) -> dict:
    r = subprocess.run([sys.executable, "-c", IMPORT_LAYER, name], cwd=ROOT, capture_output=True, text=True,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


def test_the_layers_are_every_folder_of_the_package():
    folders = {p.name for p in (ROOT / "atlas_ab").iterdir() if (p / "__init__.py").exists()}
    assert folders == set(LAYERS) | set(LEAVES) | set(TOP)


def _pending(layer: str) -> list:
    """A layer with a PENDING arrow fails its fresh import until the arrow is gone (strict: then it
    must lose its PENDING entry)."""
    why = [w for (src, _), w in PENDING.items() if src.startswith(f"atlas_ab/{layer}/")]
    return [pytest.mark.xfail(strict=True, reason=why[0])] if why else []


@pytest.mark.parametrize("layer", [pytest.param(x, marks=_pending(x)) for x in LAYERS + LEAVES + TOP])
def test_a_layer_imports_in_a_fresh_interpreter_without_its_downstream(layer):
    out = _fresh_import(layer)
    below = sorted(m for m in out["modules"] if m.startswith("atlas_ab.") and m.split(".")[1] in _downstream(layer))
    assert below == []


@pytest.mark.parametrize("name", TORCH_FREE)
def test_the_analysis_side_and_the_contract_import_no_torch(name):
    out = _fresh_import(name)
    assert [m for m in out["modules"] if m.split(".")[0] in ("torch", "triton")] == []


def _imports(path: Path):
    """(line, atlas_ab module) of every import in a file, those inside functions included."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("atlas_ab."):
            yield node.lineno, node.module
        elif isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names if a.name.startswith("atlas_ab."))


def test_no_import_anywhere_points_back_up_the_layers():
    """The fresh imports above see module-level imports only; this reads every import statement,
    the deferred ones inside functions too (a backward arrow hides best there)."""
    back = {}
    for path in sorted((ROOT / "atlas_ab").rglob("*.py")):
        rel = path.relative_to(ROOT)
        if len(rel.parts) < 3:
            continue                     # the entry point (__main__.py) and the helpers every layer uses
        src = rel.parts[1]
        for line, mod in _imports(path):
            dst = mod.split(".")[1]
            if dst in _downstream(src):
                back.setdefault((rel.as_posix(), dst), []).append(f"{mod} (line {line})")
    assert {k: v for k, v in back.items() if k not in PENDING} == {}
    assert set(back) == set(PENDING), "a pending arrow is gone: delete its PENDING entry"
