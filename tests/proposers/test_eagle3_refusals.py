"""EAGLE-3's refusals, each one line before any model loads: the MTP head's levers it has no
equivalent for, a missing head, and a head whose feature layers the target lacks."""
import json

import pytest
import torch

from atlas_ab import AtlasError
from atlas_ab.config.structured import ArmConfig, ModelConfig, RunnerConfig, WorkloadConfig, validate_arm, validate_run
from atlas_ab.proposers import registry
from atlas_ab.runtime import eagle3_checkpoint
from atlas_ab.runtime.eagle3 import Eagle3Head
from atlas_ab.train.eagle3 import head_args
from tests.helpers.tiny import tiny_args


@pytest.mark.parametrize("lever, value", [("oracle_p2", True), ("tree", "topk:2,1"), ("handoff_norm", "post"),
                                          ("recycle_norm", "pre")])
def test_mtp_levers_are_refused(lever, value):
    with pytest.raises(AtlasError, match=rf"arm 'e': {lever} applies to the MTP proposer only \(proposer=eagle3"):
        validate_arm(ArmConfig(name="e", proposer="eagle3", **{lever: value}))


def test_its_own_levers_pass():
    validate_arm(ArmConfig(name="e", proposer="eagle3", catchup=True, refeed=True, drafter_prefill=True,
                           ring_prefill=True, draft_conf=0.5, shadow_topk=2, row_space="dense", num_drafts=3))


@pytest.fixture
def head_dir(tmp_path):
    args = tiny_args(layers=3, mtp=0)
    eagle3_checkpoint.save(tmp_path / "head", Eagle3Head(head_args(args), (1, 2, 3), 32), args)
    return tmp_path / "head"


def run_of(model):
    validate_run(ArmConfig(name="e", proposer="eagle3"), model, WorkloadConfig(), RunnerConfig())


def test_a_head_is_required():
    with pytest.raises(AtlasError, match=r"arm 'e': proposer=eagle3 needs model.eagle3_path"):
        run_of(ModelConfig())


def test_feature_layers_the_target_lacks_refused_from_the_configs(head_dir, monkeypatch):
    """The shipped default target has 6 layers (ids 0..6): layer 3 exists, layer 9 does not. Only the
    config.json files are read (no checkpoint loads: `checkpoint.load` would fail the test)."""
    from atlas_ab.runtime import checkpoint
    monkeypatch.setattr(checkpoint, "load", lambda *a, **k: pytest.fail("a model loaded"))
    cfg = json.loads((head_dir / "config.json").read_text())
    cfg["target_hidden_size"] = 256
    (head_dir / "config.json").write_text(json.dumps({**cfg, "eagle_aux_hidden_state_layer_ids": [1, 3, 9]}))
    with pytest.raises(AtlasError, match=r"head: EAGLE-3 feature layer 9 does not exist in the target "
                                         r".*models/default \(6 layers: ids 0..6\)"):
        run_of(ModelConfig(eagle3_path=str(head_dir)))
    (head_dir / "config.json").write_text(json.dumps({**cfg, "eagle_aux_hidden_state_layer_ids": [1, 3, 5]}))
    run_of(ModelConfig(eagle3_path=str(head_dir)))
    random = dict(name="r", path=None, init="random", hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=2, intermediate_size=64, vocab_size=48)
    with pytest.raises(AtlasError, match=r"EAGLE-3 feature layer 5 does not exist in the target \(4 layers"):
        run_of(ModelConfig(eagle3_path=str(head_dir), **random))


def test_the_builder_refuses_a_head_for_another_target(head_dir):
    from atlas_ab.runtime.model import Transformer

    class Ck:       # a loaded target of two layers and no directory (random weights)
        args = tiny_args(layers=2, mtp=0)
        trunk = Transformer(args)
        path = None
    t = registry.Target(ck=Ck, model=ModelConfig(eagle3_path=str(head_dir)), arm=ArmConfig(proposer="eagle3"),
                        device="cpu", dtype=torch.float32)
    with pytest.raises(AtlasError, match=r"EAGLE-3 feature layers \[1, 2, 3\] .* do not fit the target \(2 layers"):
        registry.build(t)
    Ck.args, Ck.trunk = tiny_args(layers=3, mtp=0), Transformer(tiny_args(layers=3, mtp=0))
    built = registry.build(t)
    assert built.proposer.kind == "eagle3" and built.proposer.feature_layers == (1, 2, 3)
    assert built.manifest["draft"]["feature_layers"] == [1, 2, 3]


def test_the_run_refuses_it_before_any_model_loads(head_dir, tmp_path, monkeypatch):
    from atlas_ab.runtime import checkpoint
    from tests.helpers.faults import FAKE, check, main_of
    monkeypatch.setattr(checkpoint, "load", lambda *a, **k: pytest.fail("a model loaded"))
    cfg = json.loads((head_dir / "config.json").read_text())
    (head_dir / "config.json").write_text(json.dumps({**cfg, "target_hidden_size": 256,
                                                      "eagle_aux_hidden_state_layer_ids": [1, 3, 9]}))
    code, err = main_of("atlas_ab", ["+arm=eagle3", f"model.eagle3_path={head_dir}", f"hydra.run.dir={tmp_path}/run",
                                     *FAKE])
    assert code == 2 and len(err.strip().splitlines()) == 1
    check("run.eagle3-layers", err, tmp=tmp_path)
    run = tmp_path / "run"       # Hydra made it: it says failed and holds no data, no lock
    assert json.loads((run / "manifest.json").read_text())["status"] == "failed"
    assert not (run / "steps").exists() and not (run / ".lock").exists()


def test_a_sampled_replay_is_refused():
    from atlas_ab.config.structured import SamplingConfig
    with pytest.raises(AtlasError, match=r"arm 'e': proposer=eagle3 replays greedy workloads only"):
        validate_run(ArmConfig(name="e", proposer="eagle3"), ModelConfig(eagle3_path="x"),
                     WorkloadConfig(sampling=SamplingConfig(temperature=0.7)),
                     RunnerConfig(mode="replay", trajectories="t"))
