"""DRAFTER_SKIP (ATLAS_GLM_MTP_SKIP=head|block), the timing arms of the drafter's cost split: what a
skipped propose drafts (head: token 0 at confidence 0; block: the head's argmax over eh_proj's output,
no KV row written), the engine's parse, the combinations refused, and a run of one marked timing-only,
which report / claims / gate refuse to judge in one line."""
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from atlas_ab import AtlasError
from atlas_ab.analysis.runs import refuse_timing_only
from atlas_ab.config.levers import arm_from_env, env_drafter_skip
from atlas_ab.config.structured import ArmConfig, timing_only, validate_arm
from atlas_ab.proposers.mtp_head import MTPProposer
from atlas_ab.run.engine import RunInfo
from atlas_ab.speculative.loop import Wave
from atlas_ab.speculative.lossless_gate import check
from atlas_ab.speculative.targets import LiveTarget
from tests.helpers.tiny import tiny_docs, tiny_models

G = 8


@pytest.fixture(scope="module")
def models():
    return tiny_models()


def propose(models, skip: str):
    """One propose of K=2 from two sequences (a fresh drafter: row 0 at slot 0); drafts, conf, the pool."""
    trunk, mtp = models
    p = MTPProposer(trunk, mtp, "compact", False, drafter_skip=skip)
    p.alloc(np.array([20, 20]))
    g = torch.Generator().manual_seed(3)
    tok, hid = torch.tensor([5, 9]), torch.randn(2, trunk.args.hidden_size, generator=g)
    with torch.no_grad():
        prop = p.propose(None, tok, hid, np.array([4, 6]), 2, np.array([True, True]))
    return prop, p.kv, tok, hid


def test_skip_head_drafts_token_0_at_confidence_0(models):
    prop, kv, *_ = propose(models, "head")
    assert prop.drafts.tolist() == [[0, 0], [0, 0]] and prop.conf.tolist() == [[0.0, 0.0], [0.0, 0.0]]
    assert kv.k.abs().sum() > 0          # the block ran: the propose's rows were written


def test_skip_block_drafts_the_heads_argmax_over_eh_proj_and_writes_no_row(models):
    trunk, mtp = models
    prop, kv, tok, hid = propose(models, "block")
    assert kv.k.abs().sum() == 0 and kv.v.abs().sum() == 0      # no block, no KV row
    with torch.no_grad():
        x = mtp.forward(tok[:, None], hid[:, None], torch.zeros(2, 1, dtype=torch.long),
                        torch.zeros(2, 1, dtype=torch.long), kv, trunk.embed_tokens, block=False)
        want = mtp.logits(x, trunk.lm_head)[:, 0].argmax(-1)
    assert prop.drafts[:, 0].tolist() == want.tolist()
    assert kv.k.abs().sum() == 0


@pytest.mark.parametrize("skip", ["head", "block"])
def test_a_skip_arm_runs_losslessly(models, skip):
    """Greedy verification keeps the output the target's whatever the drafts."""
    trunk, mtp = models
    docs = tiny_docs(n=2, turns=2, chunk=10)
    arm = ArmConfig(name=f"skip_{skip}", drafter_skip=skip)
    trace = Wave(LiveTarget(trunk), MTPProposer(trunk, mtp, "compact", False, drafter_skip=skip), arm, docs, G).run()
    gate = check(trunk, docs, trace.generated, G, [0, 1])
    assert gate.passed and gate.divergences == 0
    steps = trace.steps.table().to_pandas()
    if skip == "head":
        assert all((np.asarray(d) == 0).all() for d in steps.drafts)


@pytest.mark.parametrize("value,want", [("head", "head"), ("block", "block"), (None, "none"), ("", "none"),
                                        ("HEAD", "none"), (" head", "none"), ("none", "none"), ("1", "none")])
def test_the_engines_parse(value, want):
    assert env_drafter_skip(value) == want
    assert arm_from_env({} if value is None else {"ATLAS_GLM_MTP_SKIP": value}).drafter_skip == want


def test_refusals():
    with pytest.raises(AtlasError, match="must be one of none, head, block"):
        validate_arm(ArmConfig(drafter_skip="lm_head"))
    for over, what in ((dict(draft_conf=0.5), "draft_conf"), (dict(shadow_topk=4), "shadow_topk"),
                       (dict(oracle_p2=True), "oracle_p2"), (dict(proposer="draft_model"), "proposer=draft_model")):
        with pytest.raises(AtlasError, match=f"runs with {what} off"):
            validate_arm(ArmConfig(drafter_skip="head", **over))
    validate_arm(ArmConfig(drafter_skip="block", catchup=True, refeed=True))


def test_a_skip_run_is_timing_only_and_not_judged(tmp_path):
    assert timing_only(ArmConfig()) is None
    why = timing_only(ArmConfig(drafter_skip="head"))
    assert "token 0" in why
    info = dict(model={}, workload={}, device="cpu", dtype="float32", row_space="compact", proposer="mtp", levers={})
    assert "timing_only" not in RunInfo(**info).to_dict()
    assert RunInfo(**info, timing_only=why).to_dict()["timing_only"] == why
    plain, timed = (SimpleNamespace(path=tmp_path / n, manifest=m) for n, m in (("a", {}), ("b", {"timing_only": why})))
    refuse_timing_only([plain], "report")
    with pytest.raises(AtlasError) as e:
        refuse_timing_only([plain, timed], "gate")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"gate: {tmp_path / 'b'} is a timing-only run (drafter_skip=head")
