"""FINGERPRINTS as one step probe (step_probe.py): the wave, the device step and the run-ahead call
the probe at fixed points and name the lever nowhere else; a wave with FINGERPRINTS off gets the
no-op probe, whose device points run no op at all (so the captured step is the same without it).
The probe's records themselves are tests/telemetry's (in-step == snapshot) and test_run_ahead's."""
import ast
from pathlib import Path

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from atlas_ab.config.structured import ArmConfig
from atlas_ab.proposers.mtp_head import MTPProposer
from atlas_ab.speculative.loop import Wave
from atlas_ab.speculative.step_events import Fingerprints
from atlas_ab.speculative.step_probe import NO_PROBE
from atlas_ab.speculative.targets import LiveTarget
from tests.helpers.tiny import tiny_docs, tiny_models

SPEC = Path(__file__).resolve().parents[2] / "atlas_ab" / "speculative"


def identifiers(path: Path) -> set[str]:
    """Every name the code of a module uses: names, attributes, parameters, keywords, imports."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, ast.keyword) and node.arg:
            out.add(node.arg)
        elif isinstance(node, ast.alias):
            out.add(node.asname or node.name)
    return out


def parameters(path: Path) -> set[str]:
    return {a.arg for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.arguments)
            for a in node.args + node.kwonlyargs}


def test_the_step_modules_name_fingerprints_only_where_the_probe_is_built():
    named = {f: sorted(i for i in identifiers(SPEC / f) if "fingerprint" in i.lower())
             for f in ("loop.py", "step.py", "run_ahead.py")}
    # the wave builds its probe (FINGERPRINTS' recorder or the no-op) from the arm and a test's hash
    assert named == {"loop.py": ["Fingerprints", "fingerprint_rows"], "step.py": [], "run_ahead.py": []}
    # and no parameter exists only for it: the propose's fingerprints and the side stream's joins
    assert {f: parameters(SPEC / f) & {"fp", "join", "fingerprints"} for f in ("loop.py", "step.py", "run_ahead.py")} \
        == {"loop.py": set(), "step.py": set(), "run_ahead.py": set()}


@pytest.fixture(scope="module")
def models():
    return tiny_models()


@pytest.mark.parametrize("graphs", [False, True])
def test_a_wave_gets_the_no_op_probe_unless_fingerprints_are_on(models, graphs):
    trunk, mtp = models
    for arm, recorded in ((ArmConfig(name="plain"), False), (ArmConfig(name="fp", fingerprints=True), True),
                          (ArmConfig(name="ring", catchup=True, refeed=True), True)):
        w = Wave(LiveTarget(trunk, graphs=graphs), MTPProposer(trunk, mtp, arm.row_space, arm.refeed), arm,
                 tiny_docs(n=2), 4)
        assert isinstance(w.probe, Fingerprints) == recorded, arm.name
        assert (w.probe is NO_PROBE) == (not recorded)
        assert w.step.probe is w.probe and (w.ahead is None or w.ahead.step.probe is w.probe)
        assert (w.trace.events is not None) == recorded


def test_the_no_op_probes_device_points_run_no_op():
    """What the step calls on the probe inside its graph: nothing at all where it does nothing."""
    n, fed = torch.arange(4), torch.zeros(4, 2, 8)
    packed, vh, slot = torch.zeros(4, 10, dtype=torch.long), torch.zeros(4, 3, 8), torch.zeros(4, 3, dtype=torch.long)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        taken = NO_PROBE.propose(n, fed)
        cols = NO_PROBE.read_columns(taken)
        NO_PROBE.verify(taken, packed, None, vh, slot)
        NO_PROBE.join()
        ahead = NO_PROBE.ahead_columns(n, n)
    assert (taken, cols, ahead) == (None, None, [])
    assert [e.name for e in prof.events() if e.name.startswith("aten::")] == []
