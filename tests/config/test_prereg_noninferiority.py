"""The noninferiority kind as a registration file (config/prereg.py, NoninferioritySpec): what it
parses to, its criterion line, the one line each bad value gets, and docs/analysis.md's example."""
import json
import re
from pathlib import Path

import pytest

from atlas_ab import AtlasError
from atlas_ab.config.prereg import Direction, NoninferioritySpec, load_prereg

ROOT = Path(__file__).resolve().parents[2]
NI = {"kind": "noninferiority", "hypothesis": "h", "primary_metric": "p1", "direction": "increase", "margin": 0.01,
      "threshold_sd": 1.6449, "decides": "paired", "arms": {"control": "baseline", "treatment": "head_fp8"},
      "min_pairs": 20000}
SEQ = {"alpha": 0.05, "max_waves": 10}


def _write(tmp_path, doc, name="ni.yaml") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


def test_it_parses_to_its_spec_and_states_its_one_sided_criterion(tmp_path):
    pr = load_prereg(_write(tmp_path, NI))
    s = pr.spec
    assert isinstance(s, NoninferioritySpec) and pr.kind == "noninferiority" and pr.arms == ("baseline", "head_fp8")
    assert (s.margin, s.direction, s.threshold_sd, s.estimand.value, s.sequential) == (
        0.01, Direction.increase, 1.6449, "matched_positions", None)
    assert pr.criterion() == ("p1: head_fp8 - baseline >= -0.01 (higher is better) at 1.6449 sd, one-sided (decided "
                              "on the paired sd clustered by source file; estimand: matched positions), >= 20,000 "
                              "matched pairs")
    down = load_prereg(_write(tmp_path, {**NI, "direction": "decrease", "decides": "cluster", "turns": "warm"},
                              "down.yaml"))
    assert down.criterion().startswith("p1 on warm turns: head_fp8 - baseline <= +0.01 (lower is better) at 1.6449 "
                                       "sd, one-sided (decided on the cluster sd clustered by source file; estimand: "
                                       "whole arm)")


def test_a_sequential_block_parses_and_is_stated(tmp_path):
    pr = load_prereg(_write(tmp_path, {**NI, "sequential": SEQ}))
    assert pr.spec.sequential.alpha == 0.05
    assert pr.criterion().endswith("; sequential (hedged_capital, alpha 0.05, a look every wave, at most 10 waves)")


@pytest.mark.parametrize("change,needle", [
    ({"margin": 0}, "margin: must be a finite number > 0, got 0"),
    ({"margin": -0.01}, "margin: must be a finite number > 0, got -0.01"),
    ({"margin": float("nan")}, "margin: must be a finite number > 0, got nan"),
    ({"margin": None}, "margin: Incompatible value 'None' for field of type 'float'"),
    ({"direction": "worse"}, "direction: must be one of increase, decrease, got 'worse'"),
    ({"min_effect": 0.01}, "unknown field 'min_effect' for a noninferiority pre-registration"),
    ({"relative": True}, "unknown field 'relative' for a noninferiority pre-registration"),
    ({"arms": {"control": "a", "treatment": "a"}}, "arms: control and treatment are the same arm 'a'"),
    ({"primary_metric": "tokens_per_second", "decides": "cluster"},
     "decides: tokens_per_second is judged as a difference of whole arms on the cluster sd"),
    ({"sequential": {"alpha": 0.05}}, "sequential.max_waves: missing: register the budget"),
])
def test_a_bad_value_is_one_line_naming_its_field(tmp_path, change, needle):
    with pytest.raises(AtlasError) as e:
        load_prereg(_write(tmp_path, {**NI, **change}))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{tmp_path / 'ni.yaml'}: ") and needle in msg, msg


@pytest.mark.parametrize("missing", ["margin", "direction"])
def test_a_missing_field_is_named(tmp_path, missing):
    with pytest.raises(AtlasError, match=f"missing field '{missing}' \\(a noninferiority pre-registration needs "):
        load_prereg(_write(tmp_path, {k: v for k, v in NI.items() if k != missing}))


def test_a_sequential_block_where_no_kind_judges_it_names_the_kinds_that_do(tmp_path):
    eq = {k: v for k, v in NI.items() if k != "direction"}
    with pytest.raises(AtlasError) as e:
        load_prereg(_write(tmp_path, {**eq, "kind": "equivalence", "sequential": SEQ}))
    assert str(e.value).endswith("sequential: a sequential study judges a difference of an acceptance metric, not "
                                 "kind: equivalence (the kinds it judges: difference, noninferiority)")


def test_the_docs_example_parses(tmp_path):
    doc = (ROOT / "docs/analysis.md").read_text()
    blocks = [b for b in re.findall(r"```yaml\n(.*?)```", doc, re.S) if "kind: noninferiority" in b]
    assert len(blocks) == 1
    pr = load_prereg(tmp_path / "fp8_head_p1.yaml", text=blocks[0].encode())
    assert pr.name == "fp8_head_p1" and pr.kind == "noninferiority"
    assert pr.criterion().startswith("p1: head_fp8 - baseline >= -0.01 (higher is better) at 1.6449 sd, one-sided")
