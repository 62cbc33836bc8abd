"""The drafter protocol is declared, not sniffed: DraftProposer holds what the loop calls on every
drafter, the optional capabilities (proposers/capabilities.py) are subclassed by the families that
have them, an arm needing one its proposer lacks is refused in one line when the wave is built, and
nothing in atlas_ab asks a proposer what it has (hasattr / getattr / dir / vars)."""
import ast
import inspect
from pathlib import Path

import pytest

from atlas_ab.config.structured import ArmConfig
from atlas_ab.errors import AtlasError
from atlas_ab.proposers.base import DraftProposer
from atlas_ab.proposers.capabilities import (
    NEEDED,
    CatchupFeed,
    DevicePlanner,
    NewRequest,
    OracleDraft,
    TreeDrafter,
    plans_on_device,
    require,
)
from atlas_ab.proposers.draft_model import DraftModelProposer
from atlas_ab.proposers.mtp_head import MTPProposer
from atlas_ab.speculative.loop import Wave
from atlas_ab.speculative.targets import LiveTarget
from tests.helpers.tiny import tiny_docs, tiny_draft, tiny_models

ROOT = Path(__file__).resolve().parents[2]
CAPABILITIES = (CatchupFeed, OracleDraft, TreeDrafter, DevicePlanner, NewRequest)
SNIFFS = ("hasattr", "getattr", "dir", "vars")


def sniffs(source: str, proposer_classes: set[str]) -> list[str]:
    """The calls in `source` that ask a proposer what it has: hasattr / getattr / dir / vars of an
    expression naming a proposer, or of `self` inside a class in `proposer_classes`."""
    found = []

    def visit(node, cls):
        if isinstance(node, ast.ClassDef):
            cls = node.name
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in SNIFFS
                and node.args):
            obj = ast.unparse(node.args[0])
            if "proposer" in obj.lower() or (obj == "self" and cls in proposer_classes):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
        for child in ast.iter_child_nodes(node):
            visit(child, cls)
    visit(ast.parse(source), None)
    return found


def proposer_classes() -> set[str]:
    """Every class of atlas_ab/proposers that is a DraftProposer or a capability."""
    names = set()
    for path in (ROOT / "atlas_ab" / "proposers").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.name in {"MTPTree", "MTPProposer", "DraftModelProposer",
                                                                "DraftProposer", *(c.__name__ for c in CAPABILITIES)}:
                names.add(node.name)
    return names


def test_the_detector_sees_a_sniff():
    src = ("def f(proposer, step):\n"
           "    a = hasattr(proposer, 'plan_on_device')\n"
           "    b = getattr(step.proposer, 'per_depth', ())\n"
           "    c = getattr(arm, 'tree')\n"
           "class MTPProposer:\n"
           "    def alloc(self):\n"
           "        return getattr(self, 'kv', None)\n")
    assert sniffs(src, {"MTPProposer"}) == ["line 2: hasattr(proposer, 'plan_on_device')",
                                            "line 3: getattr(step.proposer, 'per_depth', ())",
                                            "line 7: getattr(self, 'kv', None)"]


def test_nothing_in_atlas_ab_sniffs_a_proposer():
    classes = proposer_classes()
    assert {"MTPProposer", "DraftModelProposer", "MTPTree"} <= classes
    found = {str(p.relative_to(ROOT)): s for p in sorted((ROOT / "atlas_ab").rglob("*.py"))
             if (s := sniffs(p.read_text(), classes))}
    assert found == {}


def test_capabilities_are_asked_only_where_they_are_declared():
    """isinstance against a capability lives in capabilities.py (require, plans_on_device): the
    loop asks those, once, when a wave is built."""
    names = {c.__name__ for c in CAPABILITIES}
    asked = []
    for path in sorted((ROOT / "atlas_ab").rglob("*.py")):
        if path.name == "capabilities.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
                if any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node.args[1])):
                    asked.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert asked == []


def test_both_families_implement_the_protocol():
    for cls in (MTPProposer, DraftModelProposer):
        assert issubclass(cls, DraftProposer) and not inspect.isabstract(cls), cls
    assert all(issubclass(MTPProposer, c) for c in CAPABILITIES)
    assert not any(issubclass(DraftModelProposer, c) for c in CAPABILITIES)
    # the capabilities an arm can need are the four levers; the device planner is never required
    assert [(c, lever) for c, lever, _ in NEEDED] == [(CatchupFeed, "catchup"), (OracleDraft, "oracle_p2"),
                                                      (TreeDrafter, "tree"), (NewRequest, "prefix_reuse")]


@pytest.fixture(scope="module")
def models():
    return tiny_models()


def test_only_a_device_planner_runs_ahead(models):
    trunk, mtp = models
    assert plans_on_device(MTPProposer(trunk, mtp, "compact", False))
    assert not plans_on_device(DraftModelProposer(tiny_draft(trunk)))


@pytest.mark.parametrize("lever,over,capability", [
    ("catchup", dict(catchup=True), "CatchupFeed"),
    ("oracle_p2", dict(oracle_p2=True, num_drafts=2), "OracleDraft"),
    ("tree", dict(tree="topk:2,1", num_drafts=2), "TreeDrafter"),
])
def test_an_arm_needing_a_capability_its_proposer_lacks_is_refused_when_the_wave_is_built(models, lever, over,
                                                                                          capability):
    """The arm is built directly (validate_arm refuses these for draft_model earlier): the wave's
    own check is one line naming the arm, the lever, the capability and the proposer."""
    trunk, _ = models
    arm = ArmConfig(name="dm", proposer="draft_model", **over)
    target = LiveTarget(trunk)
    with pytest.raises(AtlasError) as e:
        Wave(target, DraftModelProposer(tiny_draft(trunk)), arm, tiny_docs(n=2), 4)
    assert str(e.value) == (f"arm 'dm': {lever} needs a proposer with {capability} (proposers/capabilities.py); "
                            "DraftModelProposer (kind 'draft_model') has none")
    assert target.kv is None          # refused before anything was allocated


def test_a_proposer_outside_the_protocol_is_refused_in_one_line():
    class Stray:
        kind = "stray"
    with pytest.raises(AtlasError) as e:
        require(Stray(), ArmConfig(name="a"))
    assert str(e.value) == "arm 'a': proposer Stray is not a DraftProposer (proposers/base.py)"


def test_a_family_missing_a_declared_member_cannot_be_built():
    """A family that declares a capability must implement all of it: an abstract member left out
    is refused when the class is instantiated, naming the member."""
    class Half(DraftModelProposer, OracleDraft):
        def plan_oracle(self, positions, active):
            return {}, {}
    with pytest.raises(TypeError, match="oracle_draft2"):
        Half(None)
