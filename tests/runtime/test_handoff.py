"""The hidden handoff: which hidden the MTP layer is handed (pre or post the trunk's final norm) and
which it recycles into drafts 2+ (pre or post its own final norm) is declared by the checkpoint,
overridable by the arm (handoff_norm / recycle_norm), and recorded in the manifest. On a checkpoint
whose norm weights are far from uniform the four combinations draft differently, and the declared
one is the independent reference's."""
import json
import shutil
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from atlas_ab import AtlasError
from atlas_ab.config.levers import BY_NAME, arm_from_env, arm_of, arm_to_env
from atlas_ab.config.structured import ArmConfig, validate_arm
from atlas_ab.runtime import checkpoint
from tests.helpers.compose import cfg_of
from tests.helpers.mtp_reference import DEEPSEEK, MIMO, deepseek_checkpoint, mimo_checkpoint
from tests.runtime.test_layouts import PROMPTS, compare, our_drafts

pytestmark = pytest.mark.float_sensitive

ROOT = Path(__file__).resolve().parents[2]
COMBOS = [(h, r) for h in ("pre", "post") for r in ("pre", "post")]
SPREAD = 0.8        # every RMSNorm weight drawn from [0.2, 1.8]: far from uniform


@pytest.mark.parametrize("build,ref", [(mimo_checkpoint, lambda cfg: MIMO),
                                       (deepseek_checkpoint, lambda cfg: DEEPSEEK(cfg["num_hidden_layers"]))],
                         ids=["mimo", "deepseek_v3"])
def test_the_four_combinations_draft_differently_and_the_declared_one_is_the_reference(tmp_path, build, ref):
    cfg, t = build(tmp_path / "c", norm_spread=SPREAD)
    ck = checkpoint.load(tmp_path / "c", "cpu", torch.float32)
    drafts = {c: our_drafts(ck, PROMPTS, 3, handoff=c[0], recycle=c[1])[0] for c in COMBOS}
    assert len({json.dumps(d) for d in drafts.values()}) == 4, drafts
    declared = (ck.layout.handoff_norm, ck.layout.recycle_norm)
    for combo in COMBOS:        # each combination is the reference's of the same combination ...
        assert compare(ck, t, cfg, ref(cfg), *combo, handoff=combo[0], recycle=combo[1]) < 1e-5
    # ... and what the drafter runs by default is the declared one
    assert compare(ck, t, cfg, ref(cfg), *declared) < 1e-5
    assert all(compare(ck, t, cfg, ref(cfg), *c) == float("inf") for c in COMBOS if c != declared)


def test_uniform_final_norms_hide_the_difference(tmp_path):
    """Why nothing showed it before: with a uniform final-norm weight, RMSNorm(c * RMSNorm(h)) ==
    RMSNorm(h), so pre and post are the same handoff (up to eps) -- the shipped default's case."""
    cfg, t = mimo_checkpoint(tmp_path / "c")
    t["model.norm.weight"] = torch.full_like(t["model.norm.weight"], 1.7)
    t["model.mtp_layers.0.final_layernorm.weight"] = torch.full_like(t["model.norm.weight"], 0.6)
    from tests.helpers.mtp_reference import write_checkpoint
    write_checkpoint(tmp_path / "c", cfg, t)
    ck = checkpoint.load(tmp_path / "c", "cpu", torch.float32)
    d = {c: our_drafts(ck, PROMPTS, 3, handoff=c[0], recycle=c[1]) for c in COMBOS}
    assert len({json.dumps(v[0]) for v in d.values()}) == 1
    assert max(abs(a - b) for v in d.values() for a, b in zip(sum(v[1], []), sum(d["pre", "pre"][1], []))) < 1e-4


# ---- the levers -------------------------------------------------------------------------------------
def test_the_levers_compose_validate_and_round_trip_the_env():
    for name, field, value in (("handoff_post", "handoff_norm", "post"), ("recycle_post", "recycle_norm", "post"),
                               ("handoff_pre", "handoff_norm", "pre"), ("recycle_pre", "recycle_norm", "pre")):
        arm = arm_of(cfg_of(f"+arm={name}"))
        assert getattr(arm, field) == value and arm.name == name
        back = arm_from_env(arm_to_env(arm))
        assert getattr(back, field) == value
    assert BY_NAME["handoff_norm"].env == "ATLAS_MTP_HANDOFF_NORM" and BY_NAME["handoff_norm"].ours
    assert BY_NAME["recycle_norm"].env == "ATLAS_MTP_RECYCLE_NORM" and BY_NAME["recycle_norm"].ours
    # the env parse is exact, like the reference engine's switches: anything else is the checkpoint's declaration
    for raw in ("POST", " post", "1", "", None):
        env = {} if raw is None else {"ATLAS_MTP_HANDOFF_NORM": raw}
        assert arm_from_env(env).handoff_norm == "checkpoint"
    assert ArmConfig().handoff_norm == ArmConfig().recycle_norm == "checkpoint"


def test_bad_lever_values_are_one_line():
    with pytest.raises(AtlasError, match="handoff_norm='after' must be one of checkpoint, pre, post"):
        validate_arm(ArmConfig(handoff_norm="after"))
    with pytest.raises(AtlasError, match="recycle_norm applies to the MTP proposer only"):
        validate_arm(ArmConfig(proposer="draft_model", recycle_norm="post"))


# ---- the manifest ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mimo_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("mimo") / "ck"
    mimo_checkpoint(d, vocab_size=4096, drafts_well=True)
    shutil.copy(ROOT / "atlas_ab/models/default/tokenizer.json", d / "tokenizer.json")
    return d


@pytest.mark.parametrize("arm,in_effect", [(None, ("pre", "post")), ("handoff_post", ("post", "post")),
                                           ("recycle_pre", ("pre", "pre"))])
def test_the_manifest_records_the_declared_and_the_run_handoff(tmp_path, mimo_dir, arm, in_effect):
    from atlas_ab.run.session import run
    over = ["model=path", f"model.path={mimo_dir}", "workload=tiny", "workload.n_docs=2", "runner.device=cpu",
            "runner.progress=false", "runner.threads=1"] + ([f"+arm={arm}"] if arm else [])   # conftest's one thread
    cfg = cfg_of(*over)
    m = run(cfg, tmp_path / "run", out=open("/dev/null", "w"))
    assert m["status"] == "complete" and m["gate"]["passed"]
    assert m["model"]["mtp_layout"] == "mimo"
    assert m["model"]["handoff"] == {"handoff_norm": "pre", "recycle_norm": "post", "source": "default for layout mimo",
                                     "layout": "mimo",
                                     "in_effect": {"handoff_norm": in_effect[0], "recycle_norm": in_effect[1]}}
    assert m["levers"]["handoff_norm"] == OmegaConf.to_object(cfg.arm).handoff_norm
