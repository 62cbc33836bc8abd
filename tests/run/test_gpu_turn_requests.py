"""Issue 50's arms on the GPU in bf16, captured (GPU only): a carried drafter's captured steps equal the
one-request drafter's exactly (PREFIX_REUSE + CARRY_DRAFTER is the runner's old path), run ahead and
step by step; a fresh drafter prefilled over whole prompts runs step by step (runs_ahead refuses it),
holds every key at a warm turn's first propose and stays lossless; the DRAFTER_SKIP timing arms run
captured and lossless (head: every draft token 0)."""
import numpy as np
import pandas as pd
import pytest
import torch

from atlas_ab.config.structured import ArmConfig
from atlas_ab.proposers.mtp_head import MTPProposer
from atlas_ab.speculative.loop import Wave
from atlas_ab.speculative.lossless_gate import check
from atlas_ab.speculative.run_ahead import runs_ahead
from atlas_ab.speculative.targets import LiveTarget
from atlas_ab.telemetry.schema import TIMING_COLUMNS
from tests.helpers.tiny import tiny_docs, tiny_models

pytestmark = pytest.mark.gpu
G = 12


@pytest.fixture(scope="module")
def models():
    trunk, mtp = tiny_models()
    return trunk.cuda().to(torch.bfloat16), mtp.cuda().to(torch.bfloat16).attach(trunk)


def run(models, arm, docs, ahead=True, skip="none"):
    trunk, mtp = models
    prop = MTPProposer(trunk, mtp, arm.row_space, arm.refeed, drafter_skip=skip)
    return Wave(LiveTarget(trunk, graphs=True), prop, arm, docs, G, run_ahead=ahead).run()


@pytest.mark.parametrize("ahead", [True, False], ids=["ahead", "steps"])
def test_gpu_a_carried_drafter_is_the_one_request_drafter(models, ahead):
    docs = tiny_docs(n=8, turns=3, chunk=12)
    for base, carried in ((ArmConfig(name="x"), ArmConfig(name="x", prefix_reuse=True, carry_drafter=True)),
                          (ArmConfig(name="x", drafter_prefill=True),
                           ArmConfig(name="x", drafter_prefill=True, prefix_reuse=True, carry_drafter=True))):
        a, b = (run(models, arm, docs, ahead).steps.table().to_pandas().drop(columns=list(TIMING_COLUMNS))
                for arm in (base, carried))
        pd.testing.assert_frame_equal(a, b, check_exact=True)


def test_gpu_a_rebuilt_drafter_holds_every_key_and_is_lossless(models):
    trunk, mtp = models
    docs = tiny_docs(n=8, turns=3, chunk=12)
    arm = ArmConfig(name="reuse_prefill", prefix_reuse=True, drafter_prefill=True)
    assert not runs_ahead(arm, True, MTPProposer(trunk, mtp, "compact", False))
    trace = run(models, arm, docs)
    steps = trace.steps.table().to_pandas()
    first = steps[(steps.step == 0) & (steps.turn > 0)]
    assert (first.drafter_rows == first.position - 1).all()
    gate = check(trunk, docs, trace.generated, G, list(range(8)))
    assert gate.passed


@pytest.mark.parametrize("skip", ["head", "block"])
def test_gpu_skip_arms_run_captured_and_lossless(models, skip):
    trunk, _ = models
    docs = tiny_docs(n=8, turns=2, chunk=12)
    trace = run(models, ArmConfig(name=f"skip_{skip}", drafter_skip=skip), docs, skip=skip)
    assert check(trunk, docs, trace.generated, G, list(range(8))).passed
    if skip == "head":
        assert all((np.asarray(d) == 0).all() for d in trace.steps.table().to_pandas().drafts)
