"""The KV-only row shortcut on the GPU in bf16 (GPU only): the drafter's pools equal PREFILL_FULL's bit
for bit on the Triton path (the same norm, fused qkv matmul and RoPE + write kernels on the same
shapes), and a wave's captured steps give the same rows with either path, for an arm whose context
rows are written at the turn prefill (drafter_prefill_on) and one whose catch-up rows are written
inside the step graph (refeed_on), run ahead and step by step."""
import pandas as pd
import pytest
import torch

from atlas_ab.config.structured import ArmConfig
from atlas_ab.proposers.mtp_head import MTPProposer
from atlas_ab.speculative.loop import Wave
from atlas_ab.speculative.targets import LiveTarget
from atlas_ab.telemetry.schema import TIMING_COLUMNS
from tests.helpers.tiny import tiny_docs, tiny_models
from tests.proposers.test_kv_rows import VARIANTS, build, pools

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_gpu_bf16_kv_only_rows_are_the_full_blocks_bit_for_bit(variant):
    mtp = build(device="cuda", dtype=torch.bfloat16, **VARIANTS[variant])
    full, short = pools(mtp, True), pools(mtp, False)
    assert full[0].abs().sum() > 0
    for f, s in zip(full, short):
        assert torch.equal(f, s)


@pytest.mark.parametrize("arm", [ArmConfig(name="drafter_prefill_on", drafter_prefill=True),
                                 ArmConfig(name="refeed_on", catchup=True, refeed=True)], ids=lambda a: a.name)
@pytest.mark.parametrize("ahead", [True, False], ids=["ahead", "steps"])
def test_gpu_captured_steps_are_the_same_with_the_shortcut_and_the_full_block(arm, ahead):
    trunk, mtp = tiny_models()
    trunk, mtp = trunk.cuda().to(torch.bfloat16), mtp.cuda().to(torch.bfloat16).attach(trunk)
    docs = tiny_docs(n=8, turns=3, chunk=12)
    out = []
    for full in (True, False):
        prop = MTPProposer(trunk, mtp, arm.row_space, arm.refeed, prefill_full=full)
        t = Wave(LiveTarget(trunk, graphs=True), prop, arm, docs, 12, run_ahead=ahead).run()
        out.append(t.steps.table().to_pandas().drop(columns=list(TIMING_COLUMNS)))
    pd.testing.assert_frame_equal(out[0], out[1], check_exact=True)
